//! What the user types: sizes, huge page sizes, NUMA policies and
//! `--numa ...`: the model's grammar (`bootscope_model::memory_spec`),
//! which bench reads configurations with too.

pub use bootscope_model::memory_spec::{human_size, parse_size, HugePageSize, NumaSpec, Policy};
