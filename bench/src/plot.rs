//! SVG plots.
