"""Paired ratios for the benchmark scripts that pair their own figures
(scripts/bench-initcalls, scripts/bench-staged-attach load this file):
`hl_interval(logs)` gives, for the log ratios of the pairs, the
Hodges-Lehmann estimate (median of their Walsh averages) and the exact
Wilcoxon signed-rank confidence interval for it (the highest level up to
95 % that the number of pairs allows; 5 pairs allow at most 93.75 %), as
ratios. Bench files are paired by `bootscope compare --test wilcoxon`.
"""
import math
import statistics


def signed_rank_counts(n):
    """counts[w] = number of sign patterns whose positive-rank sum is w."""
    counts = [1]
    for k in range(1, n + 1):
        nxt = [0] * (len(counts) + k)
        for w, c in enumerate(counts):
            nxt[w] += c
            nxt[w + k] += c
        counts = nxt
    return counts


def hl_interval(logs, level=0.95):
    n = len(logs)
    walsh = sorted((logs[i] + logs[j]) / 2 for i in range(n) for j in range(i, n))
    est = statistics.median(walsh)
    counts = signed_rank_counts(n)
    total = 2 ** n
    # Largest k with P(W <= k-1) <= alpha/2, then CI = [walsh[k-1], walsh[-k]];
    # fall back to the widest interval (min..max) with its real level.
    best = None
    cum = 0
    for k in range(1, len(walsh) // 2 + 1):
        cum += counts[k - 1]
        tail = cum / total
        conf = 1 - 2 * tail
        if conf >= level:
            best = (k, conf)
        elif best is None:
            best = (k, conf)
            break
        else:
            break
    k, conf = best
    return math.exp(est), math.exp(walsh[k - 1]), math.exp(walsh[-k]), conf
