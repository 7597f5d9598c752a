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

use crate::error::BenchError;
use crate::schema::{DocKind, Document};

mod bench;
mod boot;
mod exits;
mod fault_curve;
mod initcalls;
mod svg;
mod units;

use bench::bench_svg;
use boot::{boot_svg, Boot};
pub use svg::group_digits;

const HINT: &str = "give a bench file (bootscope bench --output), a timeline \
                    (bootscope run --timeline) or a profile (bootscope profile --output)";

/// Renders the document at `path` (a timeline, profile or bench document)
/// as an SVG document. It is read as a bounded stream by the model's
/// document reader ([`crate::schema::read_any`]), straight into its types.
pub fn render_file(path: &Path) -> Result<String, BenchError> {
    draw(crate::schema::read_any(path, HINT, &ACCEPT)?, path)
}

/// What a plot is drawn of.
const ACCEPT: [DocKind; 3] = [DocKind::Bench, DocKind::Timeline, DocKind::Profile];

/// Renders `bytes` (a timeline, profile or bench document read from
/// `path`) as an SVG document.
pub fn render(bytes: &[u8], path: &Path) -> Result<String, BenchError> {
    draw(crate::schema::parse_any(bytes, path, HINT, &ACCEPT)?, path)
}

/// The plot of a document read from `path`.
fn draw(doc: Document, path: &Path) -> Result<String, BenchError> {
    Ok(match doc {
        Document::Bench(doc) => bench_svg(&crate::doc::checked(*doc, path)?, path),
        Document::Timeline(timeline) => boot_svg(&Boot::from_timeline(&timeline), path),
        Document::Profile(profile) => boot_svg(&Boot::from_profile(&profile), path),
    })
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
    fn a_systemd_guest_s_units_are_drawn_with_the_chain_in_red() {
        let unit = |name: &str, start_ms: u64, ms: u64| {
            serde_json::json!({"name": name, "start_ns": start_ms * 1_000_000,
                "active_ns": (start_ms + ms) * 1_000_000, "duration_ns": ms * 1_000_000,
                "state": "active"})
        };
        let t = serde_json::json!({
            "schema": "bootscope.timeline", "version": 2,
            "marks": [{"name": "port 0x80: userspace 0x60", "t_ns": 8500000}],
            "phases": [{"name": "userspace", "start_ns": 0, "end_ns": 9000000, "duration_ns": 9000000}],
            "units": {"source": "t", "chain_target": "w.service",
                "units": [unit("w.service", 8, 0), unit("multi-user.target", 7, 0),
                          unit("slow.service", 2, 4), unit("other.service", 1, 1)],
                "critical_chain": [
                {"name": "w.service", "active_ns": 8000000, "duration_ns": 0},
                {"name": "multi-user.target", "active_ns": 7000000, "duration_ns": 0},
                {"name": "slow.service", "active_ns": 6000000, "duration_ns": 4000000}]}
        });
        let svg = render(t.to_string().as_bytes(), Path::new("t.json")).unwrap();
        let at = |s: &str| svg.find(s).unwrap_or_else(|| panic!("{s} missing"));
        // By start, every unit; the chain's three in red.
        assert!(at(">other.service<") < at(">slow.service<"));
        assert!(at(">slow.service<") < at(">w.service<"));
        assert!(
            svg.contains("slow.service (active): 2.0 ms to 6.0 ms"),
            "{svg}"
        );
        assert_eq!(svg.matches(r##"fill="#d62728""##).count(), 3);
        assert!(svg.contains("the critical chain to w.service in red (3 units)"));
        assert!(svg.contains(r#"stroke-dasharray="4,3""#));
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

    fn workspace_file(path: &str) -> Vec<u8> {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path);
        std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    /// The `<text>` elements' contents, unescaped enough for assertions.
    fn texts(svg: &str) -> Vec<String> {
        svg.split("<text ")
            .skip(1)
            .filter_map(|t| Some(t.split_once('>')?.1.split_once("</text>")?.0.to_string()))
            .collect()
    }

    #[test]
    fn initcalls_nested_under_kernel_by_level() {
        let t = serde_json::json!({
            "schema": "bootscope.timeline", "version": 1,
            "phases": [
                {"name": "vmm setup", "start_ns": 0, "end_ns": 100_000_000, "duration_ns": 100_000_000},
                {"name": "kernel", "start_ns": 100_000_000, "end_ns": 1_100_000_000, "duration_ns": 1_000_000_000}
            ],
            "initcalls": {
                "levels": [
                    {"level": "core", "start_ns": 200_000_000, "end_ns": 300_000_000},
                    {"level": "device", "start_ns": 400_000_000, "end_ns": 900_000_000}
                ],
                "initcalls": [
                    {"name": "tiny_init", "level": "core", "start_ns": 200_000_000, "duration_ns": 1_000_000, "ret": 0},
                    {"name": "slow_core_init", "level": "core", "start_ns": 210_000_000, "duration_ns": 80_000_000, "ret": 0},
                    {"name": "serial8250_init", "level": "device", "start_ns": 400_000_000, "duration_ns": 300_000_000, "ret": 0},
                    {"name": "broken_init", "level": "device", "start_ns": 700_000_000, "duration_ns": 50_000_000, "ret": -19}
                ]
            }
        });
        let svg = render(t.to_string().as_bytes(), Path::new("t.json")).unwrap();
        let tx = texts(&svg);
        let pos = |s: &str| {
            tx.iter()
                .position(|t| t == s)
                .unwrap_or_else(|| panic!("no text {s:?} in {tx:?}"))
        };
        assert!(tx
            .iter()
            .any(|t| t.starts_with("Kernel initcalls by level (4 initcalls in 2 levels)")));
        // Nested: kernel, then each level followed by its slow initcalls.
        let k = tx.iter().rposition(|t| t == "kernel").unwrap();
        let (core, slow, device, serial, broken) = (
            pos("core (2)"),
            pos("slow_core_init"),
            pos("device (2)"),
            pos("serial8250_init"),
            pos("broken_init"),
        );
        assert!(k < core && core < slow && slow < device && device < serial && serial < broken);
        // Under 1 % of the axis: drawn in its level's row, not labelled.
        assert!(!tx.iter().any(|t| t == "tiny_init"), "{tx:?}");
        assert!(svg.contains("<title>tiny_init (core): 1.0 ms from 200 ms</title>"));
        assert!(tx.iter().any(|t| t == "300 ms"), "{tx:?}");
        // A failed initcall in red, with what it returned.
        assert!(tx.iter().any(|t| t == "50.0 ms, returned -19"), "{tx:?}");
        assert!(svg.contains(r##"fill="#d62728"><title>broken_init"##));
        // Without initcalls: no such section.
        let mut bare = t.clone();
        bare.as_object_mut().unwrap().remove("initcalls");
        let svg = render(bare.to_string().as_bytes(), Path::new("t.json")).unwrap();
        assert!(!svg.contains("Kernel initcalls"));
    }

    #[test]
    fn initcalls_of_a_lab_boot() {
        let bytes = workspace_file("tui/tests/fixtures/lab-initcalls.timeline.json");
        let svg = render(&bytes, Path::new("lab-initcalls.timeline.json")).unwrap();
        let tx = texts(&svg);
        assert!(
            tx.iter()
                .any(|t| t.starts_with("Kernel initcalls by level (670 initcalls in ")),
            "{tx:?}"
        );
        // The device level's slowest initcall of the boot is labelled.
        assert!(tx.iter().any(|t| t == "device (204)"), "{tx:?}");
        assert!(tx.iter().any(|t| t == "shpcd_init"), "{tx:?}");
        // Each of the level's initcalls drawn in its row, with its tooltip.
        assert!(svg.matches(" (device): ").count() >= 204);
    }

    #[test]
    fn top_sites_beside_the_exit_bars_and_exits_per_phase() {
        let bytes = workspace_file("tests/fixtures/lab-sites-loud.profile.json");
        let svg = render(&bytes, Path::new("loud.json")).unwrap();
        let tx = texts(&svg);
        let at = |s: &str| {
            tx.iter()
                .position(|t| t.ends_with(s))
                .unwrap_or_else(|| panic!("no text ending {s:?} in {tx:?}"))
        };
        assert!(tx.iter().any(|t| t.starts_with("top exit sites")), "{tx:?}");
        // io's bar (43,446 exits), then its top sites: the serial console.
        let io = at("43,446");
        assert_eq!(tx[io - 1], "io");
        assert!(
            tx[io + 1].ends_with("io_serial_out"),
            "{:?}",
            &tx[io..io + 4]
        );
        assert!(
            tx[io + 2].ends_with("io_serial_in"),
            "{:?}",
            &tx[io..io + 4]
        );
        // 21,939 of 43,446 io exits at io_serial_out: 50 %.
        assert!(tx[io + 1].starts_with(" 50 %"), "{:?}", tx[io + 1]);
        // Exits per phase: the profile's three phases with exits, in boot
        // order, each with its total.
        let per_phase = at("Exits per phase, by reason");
        let rest = &tx[per_phase..];
        let row = |name: &str| rest.iter().position(|t| t == name).unwrap();
        assert!(row("guest boot") < row("kernel") && row("kernel") < row("userspace"));
        assert_eq!(rest[row("kernel") + 1], "45,610");
        assert!(rest.iter().any(|t| t == "other"), "{rest:?}");
        // A profile without sites: plain bars, no sites column.
        let bytes = workspace_file("tests/fixtures/lab-nosites-quiet.profile.json");
        let svg = render(&bytes, Path::new("quiet.json")).unwrap();
        assert!(!svg.contains("top exit sites"));
        assert!(svg.contains("Exits per phase"));
    }
}
