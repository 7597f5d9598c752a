use super::*;

#[test]
fn normal_quantiles() {
    close(normal_quantile_upper(0.025), 1.959_964, 1e-5);
    close(normal_quantile_upper(0.005), 2.575_829, 1e-5);
    close(normal_quantile_upper(0.5), 0.0, 1e-9);
}

#[test]
fn ratio_interval_of_a_pure_factor() {
    let a: Vec<f64> = (1..=20).map(|i| 100.0 + i as f64).collect();
    let b: Vec<f64> = a.iter().map(|v| v * 1.1).collect();
    let r = ratio_interval(&a, &b, 0.95).unwrap();
    // The pairwise log differences are symmetric around ln 1.1.
    close(r.estimate, 1.1, 1e-12);
    assert!(r.low < 1.1 && 1.1 < r.high, "{r:?}");
    assert!(r.high - r.low < 0.2, "{r:?}");
    // Same samples: 1 inside; the interval is symmetric in log space.
    let same = ratio_interval(&a, &a, 0.95).unwrap();
    close(same.estimate, 1.0, 1e-12);
    close(same.low * same.high, 1.0, 1e-12);
}

#[test]
fn ratio_interval_refuses_what_it_cannot_give() {
    // 3 against 3: U takes 20 values, no 95 % interval exists.
    assert!(ratio_interval(&[1.0, 2.0, 3.0], &[1.0, 2.0, 3.0], 0.95).is_none());
    assert!(ratio_interval(&[1.0; 10], &[0.0; 10], 0.95).is_none());
    assert!(ratio_interval(&[1.0; 10], &[f64::NAN; 10], 0.95).is_none());
    assert!(ratio_interval(&[], &[1.0], 0.95).is_none());
    assert!(ratio_interval(&[1.0; 10], &[1.0; 10], 1.0).is_none());
}

#[test]
fn ratio_interval_covers_as_promised() {
    // Log-normal noise (Box-Muller over a fixed LCG) around a 3 %
    // slowdown, 12 runs a side as the lab benchmark uses: the 95 %
    // interval must hold the true factor in about 95 % of trials.
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut uniform = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((state >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    let mut normal = move || {
        let (u, v) = (uniform(), uniform());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    };
    let trials = 2000;
    let mut covered = 0;
    for _ in 0..trials {
        let a: Vec<f64> = (0..12).map(|_| 7000.0 * (0.05 * normal()).exp()).collect();
        let b: Vec<f64> = (0..12)
            .map(|_| 7000.0 * 1.03 * (0.05 * normal()).exp())
            .collect();
        let r = ratio_interval(&a, &b, 0.95).unwrap();
        if r.low <= 1.03 && 1.03 <= r.high {
            covered += 1;
        }
    }
    let rate = covered as f64 / trials as f64;
    assert!((0.93..=0.975).contains(&rate), "coverage {rate}");
}

fn close(got: f64, want: f64, tol: f64) {
    assert!(
        (got - want).abs() <= tol,
        "got {got}, want {want} (tolerance {tol})"
    );
}

#[test]
fn summary_of_known_values() {
    let s = summarize(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]).unwrap();
    assert_eq!(s.n, 8);
    close(s.mean, 5.0, 1e-12);
    // Sample sd: sqrt(32 / 7).
    close(s.sd, (32.0f64 / 7.0).sqrt(), 1e-12);
    assert_eq!((s.min, s.max), (2.0, 9.0));
    close(s.median, 4.5, 1e-12);
    close(s.q1, 4.0, 1e-12);
    close(s.q3, 5.5, 1e-12);
    let one = summarize(&[3.0]).unwrap();
    assert_eq!((one.sd, one.median, one.q1), (0.0, 3.0, 3.0));
    assert!(summarize(&[]).is_none());
    assert!(summarize(&[1.0, f64::NAN]).is_none());
}

#[test]
fn gamma_and_beta_match_known_values() {
    close(ln_gamma(1.0), 0.0, 1e-14);
    close(ln_gamma(5.0), 24f64.ln(), 1e-13);
    close(ln_gamma(0.5), std::f64::consts::PI.sqrt().ln(), 1e-14);
    close(ln_gamma(100.0), 359.134_205_369_575_4, 1e-10);
    // I_x(1, 1) = x; I_x(2, 1) = x^2; I_0.5(a, a) = 0.5.
    close(inc_beta(1.0, 1.0, 0.3), 0.3, 1e-14);
    close(inc_beta(2.0, 1.0, 0.3), 0.09, 1e-14);
    close(inc_beta(7.5, 7.5, 0.5), 0.5, 1e-13);
    // Normal tail: Φ(-1.959964) = 0.025, Φ(-3) = 0.0013499.
    close(normal_sf(1.959_963_984_540_054), 0.025, 1e-12);
    close(normal_sf(3.0), 0.001_349_898_031_630_094_6, 1e-15);
    close(normal_sf(-1.0), 0.841_344_746_068_542_9, 1e-13);
    close(normal_sf(0.0), 0.5, 1e-15);
}

#[test]
fn t_distribution_matches_tables() {
    // Two-sided critical values from standard t tables.
    close(student_t_two_sided(2.228_138_851_986_274, 10.0), 0.05, 1e-9);
    close(student_t_two_sided(3.169_272_672_616_95, 10.0), 0.01, 1e-9);
    close(student_t_two_sided(12.706_204_736_174_694, 1.0), 0.05, 1e-9);
    close(
        student_t_two_sided(2.042_272_456_301_237_8, 30.0),
        0.05,
        1e-9,
    );
    // Non-integer degrees of freedom, as Welch gives.
    close(
        student_t_two_sided(2.0, 7.5),
        0.082_896_995_298_166_31,
        1e-9,
    );
    close(student_t_two_sided(0.0, 4.0), 1.0, 1e-14);
}

#[test]
fn welch_matches_the_textbook_example() {
    // The first example of Wikipedia's "Welch's t-test" article:
    // t = -2.46, df = 25.0, p = 0.021; the digits are SciPy 1.17's
    // ttest_ind(equal_var=False).
    let a1 = [
        27.5, 21.0, 19.0, 23.6, 17.0, 17.9, 16.9, 20.1, 21.9, 22.6, 23.1, 19.6, 19.0, 21.7, 21.4,
    ];
    let a2 = [
        27.1, 22.0, 20.8, 23.4, 23.4, 23.5, 25.8, 22.0, 24.8, 20.2, 21.9, 22.1, 22.9, 20.5, 24.4,
    ];
    let r = welch(&a1, &a2);
    close(r.statistic, -2.455_356_398_286_006, 1e-9);
    close(r.df.unwrap(), 24.988_529_290_231_416, 1e-9);
    close(r.p_value, 0.021_378_001_462_866_992, 1e-9);
    // The test is symmetric in its p-value.
    close(welch(&a2, &a1).p_value, r.p_value, 1e-15);
}

#[test]
fn welch_without_variance() {
    let same = welch(&[5.0, 5.0, 5.0], &[5.0, 5.0]);
    assert_eq!((same.p_value, same.method), (1.0, "no variance"));
    let differ = welch(&[5.0, 5.0, 5.0], &[6.0, 6.0]);
    assert_eq!(differ.p_value, 0.0);
    assert!(differ.statistic.is_infinite() && differ.statistic < 0.0);
    // One constant sample: df falls back to the other's n - 1.
    let r = welch(&[1.0, 1.0, 1.0], &[2.0, 3.0, 4.0]);
    close(r.df.unwrap(), 2.0, 1e-12);
}

#[test]
fn mann_whitney_matches_scipy_examples() {
    // scipy.stats.mannwhitneyu documentation example:
    // U1 = 17, exact p = 0.1111..., asymptotic p = 0.11134688653314041.
    // The other reference values below are SciPy 1.17's.
    let males = [19.0, 22.0, 16.0, 29.0, 24.0];
    let females = [20.0, 11.0, 17.0, 12.0];
    let r = mann_whitney(&males, &females);
    assert_eq!(r.method, "exact");
    close(r.statistic, 17.0, 0.0);
    close(r.p_value, 1.0 / 9.0, 1e-12);
    // Adding a tie forces the normal approximation.
    let r = mann_whitney(&[19.0, 22.0, 16.0, 29.0, 24.0, 20.0], &females);
    assert_eq!(r.method, "normal approximation");
    close(r.statistic, 20.5, 0.0);
    close(r.p_value, 0.087_118_437_447_147_81, 1e-9);
}

#[test]
fn mann_whitney_large_samples_use_the_normal_approximation() {
    // 10 vs 10 without overlap: U = 100 (or 0), z = (100-50-0.5)/sqrt(175).
    let a: Vec<f64> = (0..10).map(f64::from).collect();
    let b: Vec<f64> = (10..20).map(f64::from).collect();
    let r = mann_whitney(&a, &b);
    assert_eq!(r.method, "normal approximation");
    close(r.statistic, 0.0, 0.0);
    close(r.p_value, 2.0 * normal_sf(49.5 / 175f64.sqrt()), 1e-15);
    close(r.p_value, 0.000_182_671_791_109_550_02, 1e-12);
    // All values equal: nothing to rank.
    assert_eq!(mann_whitney(&[1.0; 12], &[1.0; 12]).p_value, 1.0);
}

#[test]
fn exact_u_distribution() {
    // Orderings of 2 and 2 values: U = 0,1,2,3,4 in 1,1,2,1,1 ways.
    assert_eq!(u_distribution(2, 2), vec![1.0, 1.0, 2.0, 1.0, 1.0]);
    let d = u_distribution(5, 4);
    assert_eq!(d.iter().sum::<f64>(), 126.0);
    assert_eq!(&d[..4], &[1.0, 1.0, 2.0, 3.0]);
    // The best possible p with 3 against 3 runs is 2/20.
    close(min_attainable_p(TestKind::MannWhitney, 3, 3), 0.1, 1e-15);
    let r = mann_whitney(&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]);
    close(r.p_value, 0.1, 1e-15);
    assert_eq!(min_attainable_p(TestKind::Welch, 2, 2), 0.0);
}

#[test]
fn wilcoxon_matches_scipy() {
    // scipy.stats.wilcoxon's documentation example (15 differences,
    // two negative): exact p = 0.041259765625; SciPy reports
    // min(W+, W-) = 24, here W+ = 120 - 24.
    let d = [
        6.0, 8.0, 14.0, 16.0, 23.0, 24.0, 28.0, 29.0, 41.0, -48.0, 49.0, 56.0, 60.0, -67.0, 75.0,
    ];
    let zero = [0.0; 15];
    let r = wilcoxon(&zero, &d);
    assert_eq!(r.method, "exact");
    close(r.statistic, 96.0, 0.0);
    close(r.p_value, 0.041_259_765_625, 1e-15);
    // Swapping the sides keeps the p-value.
    close(wilcoxon(&d, &zero).p_value, r.p_value, 1e-15);
    // A zero difference is dropped and tied sizes force the normal
    // approximation: SciPy 1.17's wilcoxon(method="approx").
    let x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
    let y = [1.5, 2.0, 3.5, 3.0, 6.0, 6.5, 9.0, 9.0];
    let r = wilcoxon(&x, &y);
    assert_eq!(r.method, "normal approximation");
    close(r.statistic, 23.0, 0.0);
    close(r.p_value, 0.144_912_780_746_718_68, 1e-9);
    // Nothing differs: nothing to rank.
    assert_eq!(wilcoxon(&x, &x).p_value, 1.0);
    // Each pair the same way: 2 / 2^n, the best n pairs can give.
    let up: Vec<f64> = x.iter().map(|v| v + 10.0 * v).collect();
    close(wilcoxon(&x, &up).p_value, 2.0 / 256.0, 1e-15);
    close(
        min_attainable_p(TestKind::Wilcoxon, 8, 8),
        2.0 / 256.0,
        1e-15,
    );
    assert_eq!(
        signed_rank_distribution(3),
        vec![1.0, 1.0, 1.0, 2.0, 1.0, 1.0, 1.0]
    );
}

#[test]
// The data hold a 3.14 that is a score, not pi.
#[allow(clippy::approx_constant)]
fn paired_interval_matches_r() {
    // R's wilcox.test(x, y, paired = TRUE, conf.int = TRUE) example
    // (its documentation's depression scores): differences' 95 %
    // interval 0.010..0.786, pseudo-median 0.46. Here the same order
    // statistics of the log ratios (checked with NumPy).
    let x = [1.83, 0.50, 1.62, 2.48, 1.68, 1.88, 1.55, 3.06, 1.30];
    let y = [0.878, 0.647, 0.598, 2.05, 1.06, 1.29, 1.06, 3.14, 1.29];
    let r = paired_ratio_interval(&y, &x, 0.95).unwrap();
    close(r.estimate, 1.384_683_821_924_851_4, 1e-12);
    close(r.low, 0.990_997_845_292_019_8, 1e-12);
    close(r.high, 1.986_968_511_867_785, 1e-12);
    // Too few pairs for 99 %: 2 / 2^5 > 0.01.
    assert!(paired_ratio_interval(&x[..5], &y[..5], 0.99).is_none());
    // Unpaired lengths, non-positive values.
    assert!(paired_ratio_interval(&x, &y[..8], 0.95).is_none());
    assert!(paired_ratio_interval(&[0.0; 9], &y, 0.95).is_none());
    // Many pairs (normal approximation): a constant ratio is the
    // estimate and both ends.
    let a: Vec<f64> = (1..=80).map(f64::from).collect();
    let b: Vec<f64> = a.iter().map(|v| v * 1.02).collect();
    let r = paired_ratio_interval(&a, &b, 0.99).unwrap();
    close(r.estimate, 1.02, 1e-12);
    close(r.low, 1.02, 1e-12);
    close(r.high, 1.02, 1e-12);
}

#[test]
fn sample_size_checks() {
    assert_eq!(
        test(TestKind::Welch, &[1.0], &[1.0, 2.0]),
        Err(TooFew {
            need: 2,
            a: 1,
            b: 2
        })
    );
    assert!(test(TestKind::MannWhitney, &[1.0], &[2.0]).is_ok());
    // Paired values come in pairs.
    assert!(test(TestKind::Wilcoxon, &[1.0, 2.0], &[2.0]).is_err());
    assert!(test(TestKind::Wilcoxon, &[1.0], &[2.0]).is_ok());
}
