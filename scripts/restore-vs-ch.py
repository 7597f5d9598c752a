"""The figures of scripts/bench-lab-restore-vs-ch from what its lab run
brought back (OUT/t: bootscope's timelines and consoles, CH's rows and
consoles): OUT/restore-vs-ch.tsv, one row per run, and a summary of
medians and paired ratios on stdout. Exit 1 when a run is missing or the
guest's buffer came back with another checksum.

  python3 scripts/restore-vs-ch.py OUT ROUNDS
"""
import csv
import json
import math
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PR = {}
exec(compile(open(os.path.join(HERE, "paired-ratios.py")).read(), "paired-ratios.py", "exec"), PR)

MODES = ("ch-copy", "ch-ondemand", "copy", "mmap", "uffd", "uffd-prefetch", "uffd-prefetch-2m", "boot")
NEXT = "port 0x80: userspace 0x62"
RESUMED = "port 0x80: userspace 0x63"
COLUMNS = ("round", "mode", "to_next_ms", "resume_ms", "work_ms", "readback_ms", "to_resumed_ms",
           "uffd_faults", "misses", "pf_fixed", "sum_ok")


def sums(path):
    """The guest's `before sum` and `after sum` in a console log."""
    got = {}
    if os.path.exists(path):
        for line in open(path, errors="replace"):
            for key in ("before sum", "after sum"):
                tag = f"bootscope-restore: {key} "
                if tag in line:
                    got[key] = line.split(tag, 1)[1].strip()[:64]
    return got


def bootscope_row(t, mode, r, before):
    path = f"{t}/{mode}-{r}.json"
    if not os.path.exists(path):
        return None
    d = json.load(open(path))
    marks = {m["name"]: m["t_ns"] / 1e6 for m in d["marks"]}
    if NEXT not in marks or not d["outcome"].get("clean"):
        return None
    start = marks.get("vmm: process start", 0.0)
    first = marks.get("vmm: first KVM_RUN", float("nan"))
    mem = d.get("restore_memory") or {}
    after = sums(f"{t}/{mode}-{r}.console")
    want = after.get("before sum") if mode == "boot" else before
    return {
        "to_next_ms": marks[NEXT] - start,
        "resume_ms": first - start,
        "work_ms": marks[NEXT] - first,
        "readback_ms": marks[NEXT] - marks.get(RESUMED, float("nan")),
        "to_resumed_ms": marks.get(RESUMED, float("nan")) - start,
        "uffd_faults": (mem.get("faults") or {}).get("count", "-") if mode.startswith("uffd") else "-",
        "misses": (mem.get("prefetch") or {}).get("misses", "-") if "prefetch" in mode else "-",
        "pf_fixed": (d.get("kvm_stats") or {}).get("pf_fixed", "-"),
        "sum_ok": "yes" if want and after.get("after sum") == want else "no",
    }


def ch_rows(t, before):
    rows = {}
    path = f"{t}/ch.tsv"
    if not os.path.exists(path):
        return rows
    for row in csv.DictReader(open(path), delimiter="\t"):
        after = sums(f"{t}/{row['mode']}-{row['round']}.console").get("after sum")
        rows[(int(row["round"]), row["mode"])] = {
            "to_next_ms": float(row["to_next_ms"]),
            "resume_ms": float(row["resume_ms"]),
            "work_ms": float(row["work_ms"]),
            "readback_ms": "-",
            "to_resumed_ms": "-",
            "uffd_faults": "-",
            "misses": "-",
            "pf_fixed": row["pf_fixed"],
            "sum_ok": "yes" if before and after == before else "no",
        }
    return rows


def ratio(runs, a, b, key, pick=None):
    """Paired ratio a/b of `key` over the rounds having both (b may be a
    function of the round's runs)."""
    logs = []
    for x in runs.values():
        bv = pick(x) if pick else (x.get(b) or {}).get(key)
        av = (x.get(a) or {}).get(key)
        if isinstance(av, float) and isinstance(bv, float) and av > 0 and bv > 0:
            logs.append(math.log(av / bv))
    if len(logs) < 2:
        return f"{a} / {b}: fewer than 2 pairs"
    est, lo, hi, conf = PR["hl_interval"](logs)
    return f"{a} / {b}, {key}: {est:.3f} ({lo:.3f}-{hi:.3f}, {conf * 100:.1f} %, {len(logs)} pairs)"


def med(rows, key):
    v = [r[key] for r in rows if isinstance(r[key], (int, float)) and not math.isnan(r[key])]
    return f"{statistics.median(v):,.0f}" if v else "-"


def main():
    out, rounds = sys.argv[1], int(sys.argv[2])
    t = f"{out}/t"
    bs_before = sums(f"{t}/bs-snapshot.console").get("before sum")
    ch_before = sums(f"{t}/ch-snapshot.console").get("before sum")
    chs = ch_rows(t, ch_before)
    runs = {}
    for r in range(1, rounds + 1):
        runs[r] = {m: (chs.get((r, m)) if m.startswith("ch-") else bootscope_row(t, m, r, bs_before))
                   for m in MODES}
    tmp = f"{out}/restore-vs-ch.tsv.tmp"
    with open(tmp, "w") as f:
        f.write("\t".join(COLUMNS) + "\n")
        for r, x in runs.items():
            for m, row in x.items():
                if row:
                    vals = [r, m] + [row[c] for c in COLUMNS[2:]]
                    f.write("\t".join(f"{v:.1f}" if isinstance(v, float) else str(v) for v in vals) + "\n")
    os.replace(tmp, f"{out}/restore-vs-ch.tsv")
    rec = json.load(open(f"{t}/record.json"))["restore_memory"]["working_set"]["pages"]
    print(f"restore guest, 256 MiB, 1 vCPU; working set recorded: {rec:,} pages; {rounds} rounds")
    print("| mode | runs | to 0x62 ms | resume ms | work ms | 0x63 to 0x62 ms | to 0x63 ms "
          "| uffd faults | misses | KVM pf_fixed |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    missing = 0
    for m in MODES:
        got = [x[m] for x in runs.values() if x[m]]
        missing += rounds - len(got)
        num = [{k: (float(v) if isinstance(v, (int, float)) or str(v).isdigit() else v)
                for k, v in g.items()} for g in got]
        cells = [med(num, k) for k in ("to_next_ms", "resume_ms", "work_ms", "readback_ms",
                                      "to_resumed_ms", "uffd_faults", "misses", "pf_fixed")]
        print(f"| {m} | {len(got)} | " + " | ".join(cells) + " |")
    best_ch = lambda x: min((x[m]["to_next_ms"] for m in ("ch-copy", "ch-ondemand") if x.get(m)),
                            default=None)
    print("\npaired ratios (Hodges-Lehmann estimate, Wilcoxon interval):")
    for line in (
        ratio(runs, "uffd-prefetch", "the round's faster CH mode", "to_next_ms", best_ch),
        ratio(runs, "uffd-prefetch-2m", "the round's faster CH mode", "to_next_ms", best_ch),
        ratio(runs, "uffd-prefetch", "ch-copy", "to_next_ms"),
        ratio(runs, "uffd-prefetch", "ch-ondemand", "to_next_ms"),
        ratio(runs, "uffd-prefetch", "ch-ondemand", "resume_ms"),
        ratio(runs, "uffd-prefetch", "ch-copy", "work_ms"),
        ratio(runs, "uffd-prefetch-2m", "ch-copy", "work_ms"),
        ratio(runs, "ch-ondemand", "ch-copy", "to_next_ms"),
        ratio(runs, "copy", "boot", "to_next_ms"),
        ratio(runs, "mmap", "boot", "to_next_ms"),
        ratio(runs, "uffd-prefetch", "boot", "to_next_ms"),
        ratio(runs, "uffd-prefetch-2m", "boot", "to_next_ms"),
        ratio(runs, "copy", "boot", "to_resumed_ms"),
        ratio(runs, "mmap", "boot", "to_resumed_ms"),
        ratio(runs, "uffd-prefetch-2m", "boot", "to_resumed_ms"),
    ):
        print("  " + line)
    bad = [(r, m) for r, x in runs.items() for m, row in x.items() if row and row["sum_ok"] != "yes"]
    print(f"\nruns missing: {missing}; checksums differing after a restore: {len(bad)} {bad or ''}")
    return 1 if bad or missing else 0


if __name__ == "__main__":
    sys.exit(main())
