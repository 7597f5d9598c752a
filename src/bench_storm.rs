//! How `bootscope bench --parallel N` reports its storms: a line per storm
//! as it ends, and per configuration a table of the per-VM distribution
//! beside the single-VM figure.

use std::fmt::Write as _;

use bootscope_bench::compare::{self, format_value};
use bootscope_bench::doc::ConfigResult;
use bootscope_bench::metrics::{self, MetricKind};
use bootscope_bench::storm::StormRecord;

/// The line printed when a storm ends.
pub fn progress_line(label: &str, s: &StormRecord) -> String {
    let mut line = format!(
        "bench: {label} storm of {}: {} ok, {} failed, makespan {:.1} ms, {:.2} boots/s",
        s.vms,
        s.vms - s.failed,
        s.failed,
        s.makespan_ns as f64 / 1e6,
        s.boots_per_second
    );
    for (name, label) in [
        ("storm:time_to_userspace:p50", "to userspace median"),
        ("storm:time_to_userspace:p99", "p99"),
    ] {
        if let Some(v) = s.metrics.get(name) {
            let _ = write!(line, ", {label} {}", bootscope_model::human::ms(*v));
        }
    }
    if let Some(v) = s.metrics.get("storm:memory:pss:sum") {
        let _ = write!(line, ", PSS of all {:.1} MiB", *v as f64 / 1_048_576.0);
    }
    line
}

/// The per-VM metrics the storms of `c` have statistics of, in report
/// order.
fn storm_bases(c: &ConfigResult) -> Vec<String> {
    let mut bases: Vec<String> = c
        .summary
        .keys()
        .filter_map(|k| k.strip_prefix("storm:")?.strip_suffix(":p50"))
        .map(str::to_string)
        .collect();
    bases.sort_by_key(|k| {
        let memory = k.starts_with("memory:");
        (memory, compare::order_key(k))
    });
    bases
}

/// The storm table of one configuration (empty without storms): for each
/// per-VM metric, the VM alone and the storm's median, p90, p99 and max,
/// each the median over the measured storms; then the makespan, boots per
/// second and the memory of all N VMs together.
pub fn storm_text(c: &ConfigResult) -> String {
    let mut s = String::new();
    let Some(n) = c.storms.first().map(|st| st.vms) else {
        return s;
    };
    let measured: Vec<&StormRecord> = c.storms.iter().filter(|st| !st.warmup).collect();
    let whole = measured.iter().filter(|st| st.ok).count();
    let _ = writeln!(
        s,
        "  storms of {n} VMs: {whole} with every VM ok, {} with a failed VM (left out of the \
         storm statistics); each value below is the median over the storms",
        measured.len() - whole
    );
    let _ = writeln!(
        s,
        "  {:<34} {:>11} {:>11} {:>11} {:>11} {:>11}",
        "per VM", "alone", "median", "p90", "p99", "max"
    );
    let cell = |name: &str| -> String {
        c.summary
            .get(name)
            .map_or_else(|| "-".to_string(), |m| format_value(m.kind, m.stats.median))
    };
    for base in storm_bases(c) {
        let _ = writeln!(
            s,
            "  {:<34} {:>11} {:>11} {:>11} {:>11} {:>11}",
            metrics::display_name(&base),
            cell(&format!("solo:{base}")),
            cell(&format!("storm:{base}:p50")),
            cell(&format!("storm:{base}:p90")),
            cell(&format!("storm:{base}:p99")),
            cell(&format!("storm:{base}:max")),
        );
    }
    let _ = writeln!(
        s,
        "  {:<34} {:>11}",
        "storm makespan",
        cell("storm:makespan")
    );
    let mut rates: Vec<f64> = measured
        .iter()
        .filter(|st| st.ok)
        .map(|st| st.boots_per_second)
        .collect();
    if !rates.is_empty() {
        let median = bootscope_bench::stats::median(&rates);
        rates.sort_by(f64::total_cmp);
        let _ = writeln!(
            s,
            "  {:<34} {:>11.2} (min {:.2}, max {:.2})",
            "boots per second",
            median,
            rates[0],
            rates[rates.len() - 1]
        );
    }
    for kind in ["pss", "uss", "rss"] {
        let name = format!("storm:memory:{kind}:sum");
        if let Some(m) = c.summary.get(&name) {
            let _ = writeln!(
                s,
                "  {:<34} {:>11}",
                format!("{} of all {n} VMs", kind.to_uppercase()),
                format_value(MetricKind::Bytes, m.stats.median)
            );
        }
    }
    s
}
