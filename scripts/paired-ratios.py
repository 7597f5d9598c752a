#!/usr/bin/env python3
"""Paired ratios of boot_bench rows: for each VMM against a reference VMM,
the ratio VMM/reference of every round (rows with the same round; round 0,
the warm-up, and failed runs are left out), their Hodges-Lehmann estimate
(median of the Walsh averages of the log ratios) and the exact Wilcoxon
signed-rank confidence interval for it (the highest level up to 95 % that
the number of rounds allows; 5 rounds allow at most 93.75 %).

    paired-ratios.py CSV REFERENCE_VMM
"""
import csv
import math
import statistics
import sys


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


def main():
    path, ref = sys.argv[1], sys.argv[2]
    rows = [r for r in csv.DictReader(open(path)) if r["round"] != "0" and r["status"] == "ok"]
    by = {}
    for r in rows:
        by.setdefault(r["vmm"], {})[r["round"]] = r
    if ref not in by:
        sys.exit(f"paired-ratios: no successful {ref} rows in {path}")
    print(f"### Paired ratios against {ref} (per round, then Hodges-Lehmann estimate and exact signed-rank interval)\n")
    print("| VMM | metric | rounds | per-round ratios | estimate | interval (level) |")
    print("|---|---|---:|---|---:|---|")
    for vmm, rounds in by.items():
        if vmm == ref:
            continue
        for metric in ("wall_ms", "hello_ms", "exits"):
            pairs = [
                (float(rounds[k][metric]), float(by[ref][k][metric]))
                for k in sorted(rounds, key=int)
                if k in by[ref] and rounds[k][metric] and by[ref][k][metric]
            ]
            if len(pairs) < 2:
                continue
            ratios = [a / b for a, b in pairs]
            est, lo, hi, conf = hl_interval([math.log(x) for x in ratios])
            print(
                f"| {vmm} | {metric} | {len(ratios)} | "
                + ", ".join(f"{x:.3f}" for x in ratios)
                + f" | {est:.3f} | {lo:.3f}-{hi:.3f} ({conf * 100:.2f} %) |"
            )


main()
