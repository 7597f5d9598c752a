#!/usr/bin/env python3
"""The tables of scripts/lab-restore-tail from the documents of its lab run.

    python3 scripts/lab-restore-tail.py DOCS_DIR ROUNDS

For each profiled restore: the profile's fault-tail window (its end mark and
length) beside the timeline's `restore_memory` window, the guest faults, the
time waiting for memory and the top faulting guest code; for the rounds:
recording / not recording lazy uffd restores, paired by round
(Hodges-Lehmann estimate, Wilcoxon interval: scripts/paired-ratios.py).
"""
import json
import math
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
pr = {}
exec(compile(open(os.path.join(HERE, "paired-ratios.py")).read(), "paired-ratios.py", "exec"), pr)
NEXT = "port 0x80: userspace 0x62"


def load(d, name):
    p = os.path.join(d, name)
    return json.load(open(p)) if os.path.exists(p) else None


def mark(doc, name):
    return next((m["t_ns"] for m in doc["marks"] if m["name"] == name), None)


def profiled(d):
    print("| restore | profile window end | profile window, ms | timeline window end "
          "| timeline window, ms | guest faults | waiting, ms | top site (faults) |")
    print("|---|---|---:|---|---:|---:|---:|---|")
    for name in ("uffd", "uffd-prefetch", "mmap"):
        p, t = load(d, f"{name}.prof.json"), load(d, f"{name}.timeline.json")
        if p is None or t is None:
            print(f"| {name} | (missing) | | | | | | |")
            continue
        ft = p.get("fault_tail") or {}
        w = ft.get("window", {})
        start = w.get("first_kvm_run_ns") or w.get("start_ns") or 0
        pw = (w.get("end_ns") or start) - start
        rm = t.get("restore_memory") or {}
        site = (ft.get("sites") or [{}])[0]
        top = site.get("label") or (hex(site["rip"]) if "rip" in site else "-")
        print(f"| {name} | {w.get('end_mark')} | {pw / 1e6:.1f} | {rm.get('window_end')} "
              f"| {rm.get('window_ns', 0) / 1e6:.1f} | {ft.get('guest_faults', 0)} "
              f"| {ft.get('wait_ns', 0) / 1e6:.1f} | {top} ({site.get('faults', 0)}) |")


def metrics(doc):
    if doc is None or not doc["outcome"].get("clean"):
        return None
    start, nxt = mark(doc, "vmm: process start"), mark(doc, NEXT)
    if start is None or nxt is None:
        return None
    return (nxt - start, (doc.get("restore_memory") or {}).get("window_ns", 0))


def rounds(d, n):
    rows = [{m: metrics(load(d, f"{m}-{r}.timeline.json")) for m in ("record", "no-record")}
            for r in range(1, n + 1)]
    pairs = [v for v in rows if v["record"] and v["no-record"]]
    print()
    print("| lazy uffd restore | to 0x62, ms (median) | window, ms (median) |")
    print("|---|---:|---:|")
    for m in ("record", "no-record"):
        xs = [v[m] for v in pairs]
        if xs:
            print(f"| {m} | {statistics.median(x[0] for x in xs) / 1e6:.0f} "
                  f"| {statistics.median(x[1] for x in xs) / 1e6:.0f} |")
    print()
    for i, what in enumerate(("to 0x62", "window")):
        if len(pairs) < 2:
            print(f"record / no-record, {what}: fewer than 2 pairs")
            continue
        logs = [math.log(max(v["record"][i], 1) / max(v["no-record"][i], 1)) for v in pairs]
        est, lo, hi, level = pr["hl_interval"](logs)
        print(f"record / no-record, {what}: {est:.3f} ({lo:.3f}-{hi:.3f}, "
              f"{level * 100:.1f} %), {len(pairs)} pairs")


def main():
    if len(sys.argv) != 3 or not sys.argv[2].isdigit():
        sys.exit("usage: lab-restore-tail.py DOCS_DIR ROUNDS")
    profiled(sys.argv[1])
    rounds(sys.argv[1], int(sys.argv[2]))


if __name__ == "__main__":
    main()
