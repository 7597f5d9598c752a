use super::*;
use crate::stats::TestKind;

fn sample(path: &str, values: &[(&str, &[f64])]) -> Sample {
    Sample {
        path: path.into(),
        label: "a".into(),
        kind: ConfigKind::Bootscope,
        runs: values.first().map(|v| v.1.len()).unwrap_or(0),
        values: values
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_vec()))
            .collect(),
        rounds: values
            .iter()
            .map(|(k, v)| (k.to_string(), (0..v.len() as u64).collect()))
            .collect(),
        provenance: crate::provenance::Provenance::default(),
    }
}

const MS: f64 = 1e6;

#[test]
fn plain_words() {
    let c = compare_metric(
        "phase:kernel",
        &[100.0 * MS, 101.0 * MS, 99.0 * MS, 100.0 * MS],
        &[88.0 * MS, 87.5 * MS, 88.5 * MS, 87.0 * MS],
        TestKind::Welch,
        0.01,
    )
    .unwrap();
    assert!(c.significant);
    assert!(
        c.words()
            .starts_with("kernel phase 12.2 % faster, p < 0.001"),
        "{}",
        c.words()
    );
    let c = compare_metric(
        "exits:io_exits",
        &[100.0; 3],
        &[150.0; 3],
        TestKind::Welch,
        0.01,
    )
    .unwrap();
    assert_eq!(c.words(), "io_exits 50.0 % more, p < 0.001");
    let c = compare_metric("exits:io_exits", &[100.0], &[100.0], TestKind::Welch, 0.01).unwrap();
    assert_eq!(c.words(), "io_exits unchanged");
    assert!(c.no_test.unwrap().contains("needs 2 runs per side"));
    assert_eq!(format_p(0.004), "= 0.004");
    assert_eq!(format_p(0.0123), "= 0.012");
    assert_eq!(format_p(0.21), "= 0.21");
    assert_eq!(format_p(1.0), "= 1");
    assert_eq!(format_p(0.0004), "< 0.001");
}

#[test]
fn times_carry_the_ratio_interval() {
    let base: Vec<f64> = (0..12).map(|i| (100.0 + i as f64) * MS).collect();
    let new: Vec<f64> = base.iter().map(|v| v * 1.05).collect();
    let c = compare_metric("phase:kernel", &base, &new, TestKind::MannWhitney, 0.01).unwrap();
    let r = c.ratio.unwrap();
    assert_eq!(r.confidence, 0.99);
    assert!(r.low < 1.05 && 1.05 < r.high && r.low > 0.9, "{r:?}");
    // Counts, and too few runs, have none.
    let c = compare_metric("exits:io_exits", &base, &new, TestKind::Welch, 0.01).unwrap();
    assert!(c.ratio.is_none());
    let c = compare_metric("phase:kernel", &base[..3], &new[..3], TestKind::Welch, 0.01).unwrap();
    assert!(c.ratio.is_none());
    assert_eq!(format_confidence(0.99), "99");
    assert_eq!(format_confidence(0.995), "99.5");
}

#[test]
fn paired_compare_sees_through_drift() {
    // The machine drifts from round to round (1.0 to 2.9 s); the new
    // side is 2 % slower in every round. Unpaired, the drift hides it.
    let base: Vec<f64> = (0..20).map(|r| (1.0 + 0.1 * r as f64) * 1e9).collect();
    let new: Vec<f64> = base.iter().map(|v| v * 1.02).collect();
    let mut a = sample("one.json", &[("time_to_userspace", &base)]);
    let mut b = sample("one.json", &[("time_to_userspace", &new)]);
    b.label = "b".into();
    let unpaired = compare(&a, &b, &[], TestKind::MannWhitney, 0.01).unwrap();
    assert!(!unpaired.metrics[0].significant);
    let paired = compare(&a, &b, &[], TestKind::Wilcoxon, 0.01).unwrap();
    let c = &paired.metrics[0];
    assert!(c.significant, "{c:?}");
    let r = c.ratio.unwrap();
    assert!((r.estimate - 1.02).abs() < 1e-9 && (r.low - 1.02).abs() < 1e-9);
    // Pairs are made by round: a round whose run failed on one side
    // (round 3 missing from the new side) leaves that round out.
    let rounds: Vec<u64> = (0..20).filter(|r| *r != 3).collect();
    b.values.insert(
        "time_to_userspace".into(),
        rounds.iter().map(|r| new[*r as usize]).collect(),
    );
    b.rounds.insert("time_to_userspace".into(), rounds);
    let c = &compare(&a, &b, &[], TestKind::Wilcoxon, 0.01)
        .unwrap()
        .metrics[0];
    assert_eq!((c.base.n, c.new.n), (19, 19));
    assert!((c.ratio.unwrap().high - 1.02).abs() < 1e-9);
    // Two files, or one configuration against itself: no pairs.
    let mut other = b.clone();
    other.path = "other.json".into();
    let e = compare(&a, &other, &[], TestKind::Wilcoxon, 0.01).unwrap_err();
    assert!(e.to_string().contains("one bench file"), "{e}");
    a.label = "b".into();
    assert!(compare(&a, &b, &[], TestKind::Wilcoxon, 0.01).is_err());
    // check's baseline is recorded apart.
    let opts = CheckOptions {
        metrics: vec![],
        max_regression_pct: 5.0,
        alpha: 0.01,
        test: TestKind::Wilcoxon,
    };
    let e = check(&a, &b, &opts).unwrap_err().to_string();
    assert!(e.contains("welch or mann-whitney"), "{e}");
}

#[test]
fn phase_mismatch_is_an_error() {
    let a = sample(
        "a.json",
        &[
            ("phase:kernel", &[1.0, 2.0]),
            ("phase:userspace", &[1.0, 2.0]),
        ],
    );
    let b = sample(
        "b.json",
        &[
            ("phase:kernel", &[1.0, 2.0]),
            ("phase:vmm setup", &[1.0, 2.0]),
        ],
    );
    let e = compare(&a, &b, &[], TestKind::Welch, 0.01)
        .unwrap_err()
        .to_string();
    assert!(e.contains("only in a.json: userspace"), "{e}");
    assert!(e.contains("only in b.json: vmm setup"), "{e}");
    // Chosen metrics present in both still compare.
    let r = compare(&a, &b, &["phase:kernel".into()], TestKind::Welch, 0.01).unwrap();
    assert_eq!(r.metrics.len(), 1);
    let e = compare(&a, &b, &["phase:userspace".into()], TestKind::Welch, 0.01)
        .unwrap_err()
        .to_string();
    assert!(e.contains("\"phase:userspace\" is not in b.json"), "{e}");
}

#[test]
fn compare_orders_and_skips_zero_metrics() {
    let a = sample(
        "a.json",
        &[
            ("kvm:hypercalls", &[0.0, 0.0]),
            ("exits:total", &[10.0, 10.0]),
            ("phase:userspace", &[1.0, 2.0]),
            ("phase:kernel", &[1.0, 2.0]),
            ("time_to_userspace", &[3.0, 4.0]),
        ],
    );
    let r = compare(&a, &a.clone(), &[], TestKind::MannWhitney, 0.05).unwrap();
    let names: Vec<&str> = r.metrics.iter().map(|c| c.metric.as_str()).collect();
    assert_eq!(
        names,
        [
            "time_to_userspace",
            "phase:kernel",
            "phase:userspace",
            "exits:total"
        ]
    );
    assert!(r.text().contains("kernel phase unchanged"), "{}", r.text());
}

fn opts(metrics: &[&str], pct: f64) -> CheckOptions {
    CheckOptions {
        metrics: metrics
            .iter()
            .map(|m| MetricSpec::parse(m).unwrap())
            .collect(),
        max_regression_pct: pct,
        alpha: 0.01,
        test: TestKind::Welch,
    }
}

#[test]
fn count_checks() {
    let base = sample("base.json", &[("exits:io_exits", &[1000.0, 1010.0, 990.0])]);
    let same = sample("cur.json", &[("exits:io_exits", &[1005.0, 1001.0, 998.0])]);
    let r = check(&base, &same, &opts(&["exits:io_exits"], 25.0)).unwrap();
    assert_eq!(r.verdict, "pass");
    let doubled = sample("cur.json", &[("exits:io_exits", &[2000.0, 2010.0, 1990.0])]);
    let r = check(&base, &doubled, &opts(&["exits:io_exits"], 25.0)).unwrap();
    assert_eq!((r.verdict, r.regressions), ("regression", 1));
    assert!(
        r.text().contains("FAIL  io_exits 100.0 % more"),
        "{}",
        r.text()
    );
    // A metric's own limit overrides --max-regression.
    let r = check(&base, &doubled, &opts(&["exits:io_exits=150"], 25.0)).unwrap();
    assert_eq!(r.verdict, "pass");
    // Fewer exits is never a regression.
    let r = check(&doubled, &base, &opts(&["exits:io_exits"], 0.0)).unwrap();
    assert_eq!(r.verdict, "pass");
}

#[test]
fn time_checks_need_significance_and_size() {
    let base = sample(
        "base.json",
        &[("phase:kernel", &[100.0, 130.0, 70.0, 101.0])],
    );
    // 30 % slower on average but very noisy: not significant.
    let noisy = sample(
        "cur.json",
        &[("phase:kernel", &[180.0, 90.0, 120.0, 130.0])],
    );
    let r = check(&base, &noisy, &opts(&["phase:kernel"], 10.0)).unwrap();
    assert_eq!(r.verdict, "pass");
    assert!(
        r.results[0].message.contains("not significant"),
        "{}",
        r.results[0].message
    );
    let base = sample(
        "base.json",
        &[("phase:kernel", &[100.0, 101.0, 99.0, 100.5])],
    );
    let slow = sample(
        "cur.json",
        &[("phase:kernel", &[130.0, 131.0, 129.0, 130.5])],
    );
    let r = check(&base, &slow, &opts(&["phase:kernel"], 10.0)).unwrap();
    assert_eq!(r.verdict, "regression");
    // Significant but within the limit.
    let r = check(&base, &slow, &opts(&["phase:kernel"], 40.0)).unwrap();
    assert_eq!(r.verdict, "pass");
    // One run: no test possible.
    let one = sample("cur.json", &[("phase:kernel", &[130.0])]);
    let e = check(&base, &one, &opts(&["phase:kernel"], 10.0))
        .unwrap_err()
        .to_string();
    assert!(e.contains("needs at least 2 successful runs"), "{e}");
    // Three against three can never reach alpha 0.01 with Mann-Whitney.
    let mut o = opts(&["phase:kernel"], 10.0);
    o.test = TestKind::MannWhitney;
    let three = sample("cur.json", &[("phase:kernel", &[130.0, 131.0, 129.0])]);
    let e = check(&three, &three, &o).unwrap_err().to_string();
    assert!(
        e.contains("smallest p Mann-Whitney U can give is 0.1"),
        "{e}"
    );
    assert!(e.contains("--runs 5 or more"), "{e}");
}

#[test]
fn default_check_metrics_and_missing_ones() {
    let base = sample(
        "base.json",
        &[
            ("time_to_userspace", &[10.0, 11.0]),
            ("phase:kernel", &[5.0, 6.0]),
            ("exits:total", &[100.0, 100.0]),
            ("exits:io_exits", &[50.0, 50.0]),
        ],
    );
    let r = check(&base, &base.clone(), &opts(&[], 20.0)).unwrap();
    let names: Vec<&str> = r.results.iter().map(|c| c.metric.as_str()).collect();
    assert_eq!(names, ["time_to_userspace", "phase:kernel", "exits:total"]);
    let cur = sample("cur.json", &[("time_to_userspace", &[10.0, 11.0])]);
    let e = check(&base, &cur, &opts(&["exits:io_exits"], 20.0))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("metric \"exits:io_exits\" is not in cur.json"),
        "{e}"
    );
    assert!(e.contains("it has: time_to_userspace"), "{e}");
    // A profiled baseline against an unprofiled run: the profiler's
    // attach is no VMM phase, so the phases still match, and it is
    // not checked where the run lacks it.
    let profiled = sample(
        "profiled.json",
        &[
            ("time_to_userspace", &[10.0, 11.0]),
            ("phase:kernel", &[5.0, 6.0]),
            ("phase:profiler attach", &[3.0, 3.0]),
            ("phase:profiler guest attach", &[0.5, 0.5]),
        ],
    );
    let bare = sample(
        "bare.json",
        &[
            ("time_to_userspace", &[10.0, 11.0]),
            ("phase:kernel", &[5.0, 6.0]),
        ],
    );
    let r = check(&profiled, &bare, &opts(&[], 20.0)).unwrap();
    let names: Vec<&str> = r.results.iter().map(|c| c.metric.as_str()).collect();
    assert_eq!(names, ["time_to_userspace", "phase:kernel"]);
    let r = check(&profiled, &profiled.clone(), &opts(&[], 20.0)).unwrap();
    assert_eq!(r.results.len(), 4);
}

#[test]
fn junit_is_well_formed() {
    let base = sample("base<1>.json", &[("exits:io_exits", &[1000.0, 1000.0])]);
    let cur = sample("cur.json", &[("exits:io_exits", &[3000.0, 3000.0])]);
    let r = check(&base, &cur, &opts(&["exits:io_exits"], 25.0)).unwrap();
    let x = r.junit();
    assert!(x.starts_with("<?xml"));
    assert!(x.contains(r#"<testsuites name="bootscope check" tests="1" failures="1""#));
    assert!(x.contains(r#"<failure type="regression" message="io_exits 200.0 % more"#));
    assert!(x.contains("base&lt;1&gt;.json"));
    assert_eq!(x.matches("<testcase").count(), 1);
    assert_eq!(x.matches("</testcase>").count(), 1);
    assert_eq!(xml_escape("a\u{1}&\"'"), "a\\u{01}&amp;&quot;&apos;");
}

#[test]
fn metric_specs() {
    assert_eq!(
        MetricSpec::parse("exits:io_exits=30").unwrap(),
        MetricSpec {
            name: "exits:io_exits".into(),
            max_regression_pct: Some(30.0)
        }
    );
    assert_eq!(
        MetricSpec::parse("phase:firmware/boot loader")
            .unwrap()
            .max_regression_pct,
        None
    );
    assert!(MetricSpec::parse("x=lots").is_err());
    assert!(MetricSpec::parse("x=-5").is_err());
    assert!(MetricSpec::parse("=5").is_err());
}
