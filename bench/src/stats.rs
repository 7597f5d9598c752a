//! Descriptive statistics and the significance tests `compare` and `check`
//! use: Welch's t-test (unequal variances), the Mann-Whitney U test (rank
//! based, robust to the outliers a noisy machine produces) and, for the
//! interleaved runs of one bench file, the Wilcoxon signed-rank test on the
//! runs paired by round (each round's two runs share the machine's state of
//! that moment, so its slow drift cancels out).
//!
//! The special functions (log-gamma, regularized incomplete beta and gamma)
//! are the classic Lanczos and continued-fraction forms; the unit tests
//! compare them with published values.

pub use bootscope_model::bench::Summary;
use serde::{Deserialize, Serialize};

/// Summarizes `values`; `None` when there are none (or any is not finite).
pub fn summarize(values: &[f64]) -> Option<Summary> {
    if values.is_empty() || values.iter().any(|v| !v.is_finite()) {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let mean = sorted.iter().sum::<f64>() / n as f64;
    Some(Summary {
        n,
        mean,
        sd: variance(&sorted, mean).sqrt(),
        min: sorted[0],
        q1: quantile_sorted(&sorted, 0.25),
        median: quantile_sorted(&sorted, 0.5),
        q3: quantile_sorted(&sorted, 0.75),
        max: sorted[n - 1],
    })
}

/// Sample variance around `mean`; 0 for fewer than two values.
fn variance(values: &[f64], mean: f64) -> f64 {
    if values.len() < 2 {
        return 0.0;
    }
    values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / (values.len() - 1) as f64
}

/// The `p` quantile of sorted values, interpolating linearly between order
/// statistics (the default of R, NumPy and spreadsheets).
pub fn quantile_sorted(sorted: &[f64], p: f64) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        1 => sorted[0],
        n => {
            let h = (n - 1) as f64 * p.clamp(0.0, 1.0);
            let lo = h.floor() as usize;
            let hi = (lo + 1).min(n - 1);
            sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo])
        }
    }
}

/// Median of unsorted values (NaN when empty).
pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    quantile_sorted(&sorted, 0.5)
}

/// Which significance test to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TestKind {
    /// Welch's unequal-variances t-test on the means.
    Welch,
    /// Mann-Whitney U (Wilcoxon rank-sum) test.
    MannWhitney,
    /// Wilcoxon signed-rank test on paired values (the runs of one round).
    Wilcoxon,
}

impl TestKind {
    /// The names of the tests on two independent samples (`check`, whose
    /// baseline was recorded apart).
    pub const NAMES: [&'static str; 2] = ["welch", "mann-whitney"];
    /// Every test's name (`compare`).
    pub const ALL_NAMES: [&'static str; 3] = ["welch", "mann-whitney", "wilcoxon"];

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "welch" | "t" | "t-test" => Some(Self::Welch),
            "mann-whitney" | "mwu" | "u" => Some(Self::MannWhitney),
            "wilcoxon" | "signed-rank" | "paired" => Some(Self::Wilcoxon),
            _ => None,
        }
    }

    /// How the test is named in reports.
    pub fn title(self) -> &'static str {
        match self {
            Self::Welch => "Welch's t-test",
            Self::MannWhitney => "Mann-Whitney U",
            Self::Wilcoxon => "Wilcoxon signed-rank (runs paired by round)",
        }
    }

    /// The fewest values per side the test accepts.
    pub fn min_runs(self) -> usize {
        match self {
            Self::Welch => 2,
            Self::MannWhitney | Self::Wilcoxon => 1,
        }
    }

    /// Whether the test takes paired values (`a[i]` with `b[i]`).
    pub fn paired(self) -> bool {
        self == Self::Wilcoxon
    }
}

/// A test's statistic and two-sided p-value.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TestResult {
    pub test: TestKind,
    /// t for Welch, U of the first sample for Mann-Whitney, the sum of the
    /// ranks of the pairs where the second value is larger (W+) for
    /// Wilcoxon.
    pub statistic: f64,
    /// Welch-Satterthwaite degrees of freedom (Welch only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub df: Option<f64>,
    /// Two-sided p-value.
    pub p_value: f64,
    /// How the p-value was found: `t distribution`, `exact`, `normal
    /// approximation`, or `no variance` (every value equal within each
    /// sample, so the samples either are or are not the same).
    pub method: &'static str,
}

/// Runs `kind` on two samples (for a paired test, `a[i]` pairs with
/// `b[i]`). Errors when a sample is smaller than [`TestKind::min_runs`] or
/// paired samples differ in length.
pub fn test(kind: TestKind, a: &[f64], b: &[f64]) -> Result<TestResult, TooFew> {
    let need = kind.min_runs();
    if a.len() < need || b.len() < need || (kind.paired() && a.len() != b.len()) {
        return Err(TooFew {
            need,
            a: a.len(),
            b: b.len(),
        });
    }
    Ok(match kind {
        TestKind::Welch => welch(a, b),
        TestKind::MannWhitney => mann_whitney(a, b),
        TestKind::Wilcoxon => wilcoxon(a, b),
    })
}

/// A sample was too small for the test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooFew {
    pub need: usize,
    pub a: usize,
    pub b: usize,
}

/// Welch's t-test, two-sided. Both samples need two or more values.
pub fn welch(a: &[f64], b: &[f64]) -> TestResult {
    let (na, nb) = (a.len() as f64, b.len() as f64);
    let ma = a.iter().sum::<f64>() / na;
    let mb = b.iter().sum::<f64>() / nb;
    let va = variance(a, ma) / na;
    let vb = variance(b, mb) / nb;
    let se2 = va + vb;
    if se2 <= 0.0 {
        // Two constant samples: identical, or different beyond doubt.
        let same = ma == mb;
        return TestResult {
            test: TestKind::Welch,
            statistic: if same {
                0.0
            } else {
                f64::INFINITY.copysign(ma - mb)
            },
            df: None,
            p_value: if same { 1.0 } else { 0.0 },
            method: "no variance",
        };
    }
    let t = (ma - mb) / se2.sqrt();
    let df = se2 * se2 / (va * va / (na - 1.0) + vb * vb / (nb - 1.0));
    TestResult {
        test: TestKind::Welch,
        statistic: t,
        df: Some(df),
        p_value: student_t_two_sided(t, df),
        method: "t distribution",
    }
}

/// Largest `n1 * n2` for which the exact U distribution is computed.
const EXACT_MAX_PRODUCT: usize = 2500;

/// Mann-Whitney U test, two-sided. Exact when there are no ties and one
/// sample has at most 8 values (as SciPy's `method="auto"`), else the
/// normal approximation with tie and continuity corrections.
pub fn mann_whitney(a: &[f64], b: &[f64]) -> TestResult {
    let (n1, n2) = (a.len(), b.len());
    let mut all: Vec<(f64, usize)> = a
        .iter()
        .map(|&v| (v, 0))
        .chain(b.iter().map(|&v| (v, 1)))
        .collect();
    all.sort_by(|x, y| x.0.total_cmp(&y.0));
    let n = all.len();
    // Average ranks over ties; collect the tie-group sizes.
    let mut rank_sum_a = 0.0;
    let mut tie_term = 0.0;
    let mut i = 0;
    while i < n {
        let mut j = i + 1;
        while j < n && all[j].0 == all[i].0 {
            j += 1;
        }
        let rank = (i + 1 + j) as f64 / 2.0;
        rank_sum_a += rank * all[i..j].iter().filter(|x| x.1 == 0).count() as f64;
        let t = (j - i) as f64;
        tie_term += t * t * t - t;
        i = j;
    }
    let u1 = rank_sum_a - (n1 * (n1 + 1)) as f64 / 2.0;
    let u2 = (n1 * n2) as f64 - u1;
    let u_big = u1.max(u2);
    let exact = tie_term == 0.0 && n1.min(n2) <= 8 && n1 * n2 <= EXACT_MAX_PRODUCT;
    let (p, method) = if exact {
        let counts = u_distribution(n1, n2);
        let total: f64 = counts.iter().sum();
        // P(U >= u_big), doubled for two sides.
        let tail: f64 = counts[u_big as usize..].iter().sum();
        ((2.0 * tail / total).min(1.0), "exact")
    } else {
        let mu = (n1 * n2) as f64 / 2.0;
        let nf = n as f64;
        let var = (n1 * n2) as f64 / 12.0 * ((nf + 1.0) - tie_term / (nf * (nf - 1.0)));
        if var <= 0.0 {
            (1.0, "no variance")
        } else {
            let z = (u_big - mu - 0.5) / var.sqrt();
            ((2.0 * normal_sf(z)).min(1.0), "normal approximation")
        }
    };
    TestResult {
        test: TestKind::MannWhitney,
        statistic: u1,
        df: None,
        p_value: p,
        method,
    }
}

/// Number of orderings of `m` and `n` distinct values giving each U (index
/// = U), by the recurrence f(m, n, u) = f(m-1, n, u-n) + f(m, n-1, u).
fn u_distribution(m: usize, n: usize) -> Vec<f64> {
    let size = m * n + 1;
    // prev[j] holds f(i-1, j, .), cur[j] holds f(i, j, .).
    let mut prev: Vec<Vec<f64>> = (0..=n)
        .map(|_| {
            let mut v = vec![0.0; size];
            v[0] = 1.0;
            v
        })
        .collect();
    for _i in 1..=m {
        let mut cur: Vec<Vec<f64>> = Vec::with_capacity(n + 1);
        let mut first = vec![0.0; size];
        first[0] = 1.0;
        cur.push(first);
        for j in 1..=n {
            let mut v = cur[j - 1].clone();
            for (u, slot) in v.iter_mut().enumerate().skip(j) {
                *slot += prev[j][u - j];
            }
            cur.push(v);
        }
        prev = cur;
    }
    prev.swap_remove(n)
}

/// Most pairs for which the exact signed-rank distribution is used (its
/// counts stay exact in an f64 up to 2^53).
const EXACT_MAX_PAIRS: usize = 50;

/// Wilcoxon signed-rank test, two-sided, on the differences `b[i] - a[i]`
/// (pairs beyond the shorter slice are ignored). Zero differences are
/// dropped (Wilcoxon's own rule, SciPy's `zero_method="wilcox"`); exact
/// when no two differences tie in size and at most 50 pairs remain, else
/// the normal approximation with tie and continuity corrections.
pub fn wilcoxon(a: &[f64], b: &[f64]) -> TestResult {
    let mut d: Vec<f64> = a
        .iter()
        .zip(b)
        .map(|(x, y)| y - x)
        .filter(|v| *v != 0.0)
        .collect();
    d.sort_by(|x, y| x.abs().total_cmp(&y.abs()));
    let n = d.len();
    if n == 0 {
        return TestResult {
            test: TestKind::Wilcoxon,
            statistic: 0.0,
            df: None,
            p_value: 1.0,
            method: "no variance",
        };
    }
    // Average ranks of |d| over ties; W+ sums the positive ones.
    let mut w_plus = 0.0;
    let mut tie_term = 0.0;
    let mut i = 0;
    while i < n {
        let mut j = i + 1;
        while j < n && d[j].abs() == d[i].abs() {
            j += 1;
        }
        let rank = (i + 1 + j) as f64 / 2.0;
        w_plus += rank * d[i..j].iter().filter(|v| **v > 0.0).count() as f64;
        let t = (j - i) as f64;
        tie_term += t * t * t - t;
        i = j;
    }
    let nf = n as f64;
    let mu = nf * (nf + 1.0) / 4.0;
    let (p, method) = if tie_term == 0.0 && n <= EXACT_MAX_PAIRS {
        let counts = signed_rank_distribution(n);
        let total: f64 = counts.iter().sum();
        // W+ is a whole number here; P(W <= min) doubled by symmetry.
        let low = w_plus.min(nf * (nf + 1.0) / 2.0 - w_plus) as usize;
        let tail: f64 = counts[..=low].iter().sum();
        ((2.0 * tail / total).min(1.0), "exact")
    } else {
        let var = nf * (nf + 1.0) * (2.0 * nf + 1.0) / 24.0 - tie_term / 48.0;
        if var <= 0.0 {
            (1.0, "no variance")
        } else {
            let z = ((w_plus - mu).abs() - 0.5).max(0.0) / var.sqrt();
            ((2.0 * normal_sf(z)).min(1.0), "normal approximation")
        }
    };
    TestResult {
        test: TestKind::Wilcoxon,
        statistic: w_plus,
        df: None,
        p_value: p,
        method,
    }
}

/// Number of subsets of the ranks 1..=n with each sum (index = sum): the
/// distribution of W+ without ties, by adding one rank at a time.
fn signed_rank_distribution(n: usize) -> Vec<f64> {
    let max = n * (n + 1) / 2;
    let mut counts = vec![0.0; max + 1];
    counts[0] = 1.0;
    for rank in 1..=n {
        for sum in (rank..=rank * (rank + 1) / 2).rev() {
            counts[sum] += counts[sum - rank];
        }
    }
    counts
}

/// The smallest two-sided p-value a test can give for these sample sizes
/// (0 when any p is reachable). With few runs the exact Mann-Whitney test
/// can never reach a small alpha: 3 against 3 runs gives at least 0.1.
pub fn min_attainable_p(kind: TestKind, n1: usize, n2: usize) -> f64 {
    match kind {
        TestKind::Welch => 0.0,
        TestKind::MannWhitney if n1.min(n2) <= 8 && n1 * n2 <= EXACT_MAX_PRODUCT => {
            // Only the two extreme orderings: 2 / C(n1 + n2, n1).
            2.0 / binomial(n1 + n2, n1)
        }
        TestKind::MannWhitney => 0.0,
        // Every pair on the same side: 2 / 2^n.
        TestKind::Wilcoxon if n1.min(n2) <= EXACT_MAX_PAIRS => 2.0 / 2f64.powi(n1.min(n2) as i32),
        TestKind::Wilcoxon => 0.0,
    }
}

fn binomial(n: usize, k: usize) -> f64 {
    (0..k).fold(1.0, |acc, i| acc * (n - i) as f64 / (i + 1) as f64)
}

/// The ratio new/base of two samples of positive values, with a
/// distribution-free confidence interval: the Hodges-Lehmann estimate of
/// the shift between the logarithms (the median of all pairwise
/// differences ln b - ln a) and the interval the Mann-Whitney statistic
/// gives it (order statistics of those differences; normal approximation
/// to U's distribution, without a tie correction). The interval is what
/// `compare` quotes as "the change is at most ...": it holds at
/// `confidence` under the test's own assumption that the two sides differ
/// by a factor.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RatioInterval {
    pub estimate: f64,
    pub low: f64,
    pub high: f64,
    /// e.g. 0.99.
    pub confidence: f64,
}

/// [`RatioInterval`] of `b` over `a`; `None` when a value is not positive
/// and finite, or the samples are too small for that confidence (3 against
/// 3 runs cannot give a 95 % interval).
pub fn ratio_interval(a: &[f64], b: &[f64], confidence: f64) -> Option<RatioInterval> {
    let positive = |v: &f64| v.is_finite() && *v > 0.0;
    if a.is_empty()
        || b.is_empty()
        || !a.iter().all(positive)
        || !b.iter().all(positive)
        || !(confidence > 0.0 && confidence < 1.0)
    {
        return None;
    }
    let (n, m) = (a.len() as f64, b.len() as f64);
    let mut d: Vec<f64> = a
        .iter()
        .flat_map(|x| b.iter().map(move |y| y.ln() - x.ln()))
        .collect();
    d.sort_by(f64::total_cmp);
    let total = d.len();
    let estimate = quantile_sorted(&d, 0.5).exp();
    let z = normal_quantile_upper((1.0 - confidence) / 2.0);
    let c = (n * m / 2.0 - z * (n * m * (n + m + 1.0) / 12.0).sqrt()).floor();
    if c < 1.0 {
        return None;
    }
    let c = c as usize;
    Some(RatioInterval {
        estimate,
        low: d[c - 1].exp(),
        high: d[total - c].exp(),
        confidence,
    })
}

/// [`RatioInterval`] of paired values, `b[i]` over `a[i]` (the runs of one
/// round): the Hodges-Lehmann estimate of the pairs' log ratios (the median
/// of their Walsh averages, (r_i + r_j) / 2 for i <= j) and the interval
/// the signed-rank statistic gives it (order statistics of the Walsh
/// averages; exact distribution up to 50 pairs, the normal approximation
/// beyond). `None` as [`ratio_interval`], or when the slices differ in
/// length.
pub fn paired_ratio_interval(a: &[f64], b: &[f64], confidence: f64) -> Option<RatioInterval> {
    let positive = |v: &f64| v.is_finite() && *v > 0.0;
    if a.is_empty()
        || a.len() != b.len()
        || !a.iter().all(positive)
        || !b.iter().all(positive)
        || !(confidence > 0.0 && confidence < 1.0)
    {
        return None;
    }
    let r: Vec<f64> = a.iter().zip(b).map(|(x, y)| y.ln() - x.ln()).collect();
    let n = r.len();
    let r = &r;
    let mut walsh: Vec<f64> = (0..n)
        .flat_map(|i| r[i..].iter().map(move |&y| (r[i] + y) / 2.0))
        .collect();
    walsh.sort_by(f64::total_cmp);
    let total = walsh.len();
    let tail = (1.0 - confidence) / 2.0;
    // c: the number of Walsh averages left out at each end, the largest
    // with P(W+ < c) <= tail.
    let c = if n <= EXACT_MAX_PAIRS {
        let counts = signed_rank_distribution(n);
        let all: f64 = counts.iter().sum();
        let mut below = 0.0;
        let mut c = 0;
        for count in &counts {
            if (below + count) / all > tail {
                break;
            }
            below += count;
            c += 1;
        }
        c
    } else {
        let nf = n as f64;
        let z = normal_quantile_upper(tail);
        let c = nf * (nf + 1.0) / 4.0 - z * (nf * (nf + 1.0) * (2.0 * nf + 1.0) / 24.0).sqrt();
        c.floor().max(0.0) as usize
    };
    if c < 1 {
        return None;
    }
    Some(RatioInterval {
        estimate: quantile_sorted(&walsh, 0.5).exp(),
        low: walsh[c - 1].exp(),
        high: walsh[total - c].exp(),
        confidence,
    })
}

/// z with P(Z > z) = `tail`, for 0 < tail < 1 (bisection on [`normal_sf`]).
pub fn normal_quantile_upper(tail: f64) -> f64 {
    let (mut lo, mut hi) = (-40.0_f64, 40.0_f64);
    for _ in 0..200 {
        let mid = (lo + hi) / 2.0;
        if normal_sf(mid) > tail {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (lo + hi) / 2.0
}

/// Two-sided tail of Student's t distribution: P(|T| >= |t|) with `df`
/// degrees of freedom, = I_{df/(df+t^2)}(df/2, 1/2).
pub fn student_t_two_sided(t: f64, df: f64) -> f64 {
    if !t.is_finite() {
        return 0.0;
    }
    inc_beta(df / 2.0, 0.5, df / (df + t * t))
}

/// Upper tail of the standard normal distribution, P(Z > z).
pub fn normal_sf(z: f64) -> f64 {
    // erfc(x) = Q(1/2, x^2) for x >= 0.
    let x = z / std::f64::consts::SQRT_2;
    if x >= 0.0 {
        0.5 * gamma_q(0.5, x * x)
    } else {
        1.0 - 0.5 * gamma_q(0.5, x * x)
    }
}

/// ln Γ(x) for x > 0 (Lanczos, g = 7, nine coefficients: about 15 digits).
pub fn ln_gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection: Γ(x)Γ(1-x) = π / sin(πx).
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = C[0];
    let t = x + G + 0.5;
    for (i, c) in C.iter().enumerate().skip(1) {
        a += c / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

const EPS: f64 = 1e-15;
const TINY: f64 = 1e-300;
const MAX_ITER: usize = 500;

/// Regularized incomplete beta function I_x(a, b).
pub fn inc_beta(a: f64, b: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let ln_front = ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln();
    let front = ln_front.exp();
    // The continued fraction converges fast for x < (a+1)/(a+b+2); use the
    // symmetry I_x(a,b) = 1 - I_{1-x}(b,a) on the other side.
    if x < (a + 1.0) / (a + b + 2.0) {
        front * beta_cf(a, b, x) / a
    } else {
        1.0 - front * beta_cf(b, a, 1.0 - x) / b
    }
}

/// Continued fraction for the incomplete beta (modified Lentz).
fn beta_cf(a: f64, b: f64, x: f64) -> f64 {
    let qab = a + b;
    let qap = a + 1.0;
    let qam = a - 1.0;
    let mut c = 1.0;
    let mut d = 1.0 - qab * x / qap;
    if d.abs() < TINY {
        d = TINY;
    }
    d = 1.0 / d;
    let mut h = d;
    for m in 1..=MAX_ITER {
        let m = m as f64;
        let m2 = 2.0 * m;
        let aa = m * (b - m) * x / ((qam + m2) * (a + m2));
        d = 1.0 + aa * d;
        if d.abs() < TINY {
            d = TINY;
        }
        c = 1.0 + aa / c;
        if c.abs() < TINY {
            c = TINY;
        }
        d = 1.0 / d;
        h *= d * c;
        let aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
        d = 1.0 + aa * d;
        if d.abs() < TINY {
            d = TINY;
        }
        c = 1.0 + aa / c;
        if c.abs() < TINY {
            c = TINY;
        }
        d = 1.0 / d;
        let del = d * c;
        h *= del;
        if (del - 1.0).abs() < EPS {
            break;
        }
    }
    h
}

/// Regularized upper incomplete gamma function Q(a, x) = Γ(a, x) / Γ(a).
pub fn gamma_q(a: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 1.0;
    }
    let ln_front = -x + a * x.ln() - ln_gamma(a);
    if x < a + 1.0 {
        // Series for P(a, x).
        let mut ap = a;
        let mut sum = 1.0 / a;
        let mut del = sum;
        for _ in 0..MAX_ITER {
            ap += 1.0;
            del *= x / ap;
            sum += del;
            if del.abs() < sum.abs() * EPS {
                break;
            }
        }
        1.0 - sum * ln_front.exp()
    } else {
        // Continued fraction for Q(a, x) (modified Lentz).
        let mut b = x + 1.0 - a;
        let mut c = 1.0 / TINY;
        let mut d = 1.0 / b;
        let mut h = d;
        for i in 1..=MAX_ITER {
            let an = -(i as f64) * (i as f64 - a);
            b += 2.0;
            d = an * d + b;
            if d.abs() < TINY {
                d = TINY;
            }
            c = b + an / c;
            if c.abs() < TINY {
                c = TINY;
            }
            d = 1.0 / d;
            let del = d * c;
            h *= del;
            if (del - 1.0).abs() < EPS {
                break;
            }
        }
        ln_front.exp() * h
    }
}

#[cfg(test)]
mod tests;
