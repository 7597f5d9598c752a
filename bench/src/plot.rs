//! SVG plots, written by hand so any browser or image viewer shows them:
//!
//! * a boot (timeline or profile): one row per phase and per mark on a
//!   millisecond axis, in the manner of `systemd-analyze plot`; a
//!   timeline's initcalls nested under `kernel` by level, bootgraph style;
//!   the exits per reason as horizontal bars, with a profile's top exit
//!   sites beside them, and its exits per phase as stacked bars;
//! * a benchmark: the median boot of each configuration as stacked phases,
//!   a box plot per time metric (quartiles, min-max whiskers, median line,
//!   mean dot), and the median exits per reason of each configuration.

use std::path::Path;

use bootscope_model::timeline::Timeline;

use crate::doc::{check_schema, BenchDoc};
use crate::error::BenchError;

mod bench;
mod boot;
mod exits;
mod initcalls;
mod svg;

use bench::bench_svg;
use boot::{boot_svg, Boot};
pub use svg::group_digits;

/// Renders `bytes` (a timeline, profile or bench document read from
/// `path`) as an SVG document.
pub fn render(bytes: &[u8], path: &Path) -> Result<String, BenchError> {
    const HINT: &str = "give a bench file (bootscope bench --output), a timeline \
                        (bootscope run --timeline) or a profile (bootscope profile --output)";
    let not_json = |source| BenchError::NotJson {
        path: path.into(),
        hint: HINT,
        source,
    };
    // The schema alone first: a bench file (the large kind) is read
    // straight into its types, never as a whole JSON tree.
    let head = crate::doc::head(bytes).map_err(not_json)?;
    let full = || serde_json::from_slice::<serde_json::Value>(bytes).map_err(not_json);
    match head.get("schema").and_then(|s| s.as_str()) {
        Some("bootscope.bench") => Ok(bench_svg(&BenchDoc::parse(bytes, path)?, path)),
        Some("bootscope.timeline") => {
            let value = full()?;
            check_schema(&value, path, "bootscope.timeline", 1, HINT)?;
            let timeline = Timeline::parse(&value).map_err(|e| BenchError::Malformed {
                path: path.into(),
                schema: "bootscope.timeline",
                detail: e.to_string(),
            })?;
            Ok(boot_svg(&Boot::from_timeline(&timeline, &value), path))
        }
        Some("bootscope.profile") => {
            let value = full()?;
            crate::doc::check_schema_versions(&value, path, "bootscope.profile", 1, 2, HINT)?;
            Ok(boot_svg(&Boot::from_profile(&value), path))
        }
        other => Err(BenchError::WrongSchema {
            path: path.into(),
            found: other.unwrap_or("(none)").into(),
            expected: "bootscope.bench, bootscope.timeline or bootscope.profile".into(),
            hint: HINT,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::svg::*;
    use super::*;

    #[test]
    fn steps_and_digits() {
        assert_eq!(nice_step(100.0, 8.0), 20.0);
        assert_eq!(nice_step(15_000.0, 8.0), 2000.0);
        assert_eq!(nice_step(0.9, 8.0), 0.2);
        assert_eq!(group_digits(1234567.0), "1,234,567");
        assert_eq!(group_digits(12.0), "12");
        assert_eq!(fit("abcdef", CHAR_W * 4.0), "abc…");
        assert_eq!(tick_label(0.0, 100e6), "0 ms");
        assert_eq!(tick_label(2.5e5, 5e4), "0.25 ms");
    }

    #[test]
    fn timeline_plot_has_rows_and_bars() {
        let t = serde_json::json!({
            "schema": "bootscope.timeline", "version": 1, "host_kvm": "svm",
            "guest": {"kernel": "/boot/vmlinuz", "vcpus": 1, "memory_bytes": 268435456},
            "outcome": {"detail": "halted <cleanly>"},
            "marks": [{"name": "vmm: process start", "t_ns": 0},
                      {"name": "serial: kernel banner", "t_ns": 5000000}],
            "phases": [{"name": "kernel", "start_ns": 1000000, "end_ns": 90000000, "duration_ns": 89000000}],
            "kvm_stats": {"exits": 100, "io_exits": 60, "halt_exits": 10}
        });
        let svg = render(t.to_string().as_bytes(), Path::new("t.json")).unwrap();
        assert!(svg.starts_with("<?xml"));
        assert!(svg.contains(">kernel</text>"));
        assert!(svg.contains("serial: kernel banner"));
        assert!(svg.contains("halted &lt;cleanly&gt;"));
        assert!(svg.contains("other (no KVM counter)"));
        assert!(svg.contains(">60</text>"));
        assert!(svg.trim_end().ends_with("</svg>"));
    }

    #[test]
    fn plot_refuses_other_files() {
        let e = render(br#"{"schema":"x","version":1}"#, Path::new("x.json"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("expected bootscope.bench, bootscope.timeline or bootscope.profile"),
            "{e}"
        );
        let e = render(
            br#"{"schema":"bootscope.timeline","version":9}"#,
            Path::new("x.json"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("version 9"), "{e}");
    }
}
