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

MODES = ("ch-copy", "ch-ondemand", "copy", "mmap", "uffd", "uffd-prefetch", "uffd-prefetch-2m",
         "uffd-prefetch-bg", "uffd-prefetch-bg-2m", "boot")
NEXT = "port 0x80: userspace 0x62"
RESUMED = "port 0x80: userspace 0x63"
COLUMNS = ("round", "mode", "to_next_ms", "resume_ms", "work_ms", "readback_ms", "to_resumed_ms",
           "uffd_faults", "misses", "late", "pf_fixed", "sum_ok")
# The medians' columns: (key, heading).
MEDIANS = (("to_next_ms", "to 0x62 ms"), ("resume_ms", "resume ms"), ("work_ms", "work ms"),
           ("readback_ms", "0x63 to 0x62 ms"), ("to_resumed_ms", "to 0x63 ms"),
           ("uffd_faults", "uffd faults"), ("misses", "misses"), ("late", "late faults"),
           ("pf_fixed", "KVM pf_fixed"))
BEST_CH = "the round's faster CH mode"
# Paired ratios: (a, b, key); b BEST_CH is the round's faster CH mode.
RATIOS = (
    ("uffd-prefetch", BEST_CH, "to_next_ms"),
    ("uffd-prefetch-2m", BEST_CH, "to_next_ms"),
    ("uffd-prefetch-bg", BEST_CH, "to_next_ms"),
    ("uffd-prefetch-bg-2m", BEST_CH, "to_next_ms"),
    ("uffd-prefetch", "ch-copy", "to_next_ms"),
    ("uffd-prefetch", "ch-ondemand", "to_next_ms"),
    ("uffd-prefetch", "ch-ondemand", "resume_ms"),
    ("uffd-prefetch-2m", "ch-ondemand", "resume_ms"),
    ("uffd-prefetch-bg", "ch-ondemand", "resume_ms"),
    ("uffd-prefetch-bg-2m", "ch-ondemand", "resume_ms"),
    ("uffd-prefetch", "ch-copy", "work_ms"),
    ("uffd-prefetch-2m", "ch-copy", "work_ms"),
    ("uffd-prefetch-bg", "ch-copy", "work_ms"),
    ("uffd-prefetch-bg-2m", "ch-copy", "work_ms"),
    ("uffd-prefetch-bg-2m", "uffd-prefetch-2m", "to_next_ms"),
    ("ch-ondemand", "ch-copy", "to_next_ms"),
    ("copy", "boot", "to_next_ms"),
    ("mmap", "boot", "to_next_ms"),
    ("uffd-prefetch", "boot", "to_next_ms"),
    ("uffd-prefetch-2m", "boot", "to_next_ms"),
    ("copy", "boot", "to_resumed_ms"),
    ("mmap", "boot", "to_resumed_ms"),
    ("uffd-prefetch-2m", "boot", "to_resumed_ms"),
)


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


def row(sum_ok, **figures):
    """A run's row: `figures` by column, "-" where the run has none."""
    out = {c: "-" for c in COLUMNS[2:]}
    out.update(figures, sum_ok="yes" if sum_ok else "no")
    return out


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
    resumed = marks.get(RESUMED, float("nan"))
    mem = d.get("restore_memory") or {}
    faults, prefetch = mem.get("faults") or {}, mem.get("prefetch") or {}
    after = sums(f"{t}/{mode}-{r}.console")
    want = after.get("before sum") if mode == "boot" else before
    return row(
        bool(want) and after.get("after sum") == want,
        to_next_ms=marks[NEXT] - start,
        resume_ms=first - start,
        work_ms=marks[NEXT] - first,
        readback_ms=marks[NEXT] - resumed,
        to_resumed_ms=resumed - start,
        uffd_faults=faults.get("count", "-"),
        misses=prefetch.get("misses", "-"),
        late=prefetch.get("late", "-") if prefetch.get("background") else "-",
        pf_fixed=(d.get("kvm_stats") or {}).get("pf_fixed", "-"),
    )


def ch_rows(t, before):
    rows = {}
    path = f"{t}/ch.tsv"
    if not os.path.exists(path):
        return rows
    for r in csv.DictReader(open(path), delimiter="\t"):
        after = sums(f"{t}/{r['mode']}-{r['round']}.console").get("after sum")
        rows[(int(r["round"]), r["mode"])] = row(
            bool(before) and after == before,
            **{k: float(r[k]) for k in ("to_next_ms", "resume_ms", "work_ms")},
            pf_fixed=r["pf_fixed"],
        )
    return rows


def value(x, mode, key):
    """`key` of `mode`'s run in round `x` (the faster CH mode's for
    BEST_CH), a positive float, else None."""
    if mode == BEST_CH:
        v = min((x[m][key] for m in ("ch-copy", "ch-ondemand") if x.get(m)), default=None)
    else:
        v = (x.get(mode) or {}).get(key)
    return v if isinstance(v, float) and v > 0 else None


def ratio(runs, a, b, key):
    """Paired ratio a/b of `key` over the rounds having both."""
    logs = []
    for x in runs.values():
        av, bv = value(x, a, key), value(x, b, key)
        if av and bv:
            logs.append(math.log(av / bv))
    if len(logs) < 2:
        return f"{a} / {b}, {key}: fewer than 2 pairs"
    est, lo, hi, conf = PR["hl_interval"](logs)
    return f"{a} / {b}, {key}: {est:.3f} ({lo:.3f}-{hi:.3f}, {conf * 100:.1f} %, {len(logs)} pairs)"


def med(rows, key):
    v = [r[key] for r in rows if isinstance(r[key], (int, float)) and not math.isnan(r[key])]
    return f"{statistics.median(v):,.0f}" if v else "-"


def main():
    out, rounds = sys.argv[1], int(sys.argv[2])
    # The modes run (argv[3], separated by spaces; default: all).
    modes = tuple(m for m in MODES if len(sys.argv) < 4 or m in sys.argv[3].split())
    t = f"{out}/t"
    bs_before = sums(f"{t}/bs-snapshot.console").get("before sum")
    ch_before = sums(f"{t}/ch-snapshot.console").get("before sum")
    chs = ch_rows(t, ch_before)
    runs = {}
    for r in range(1, rounds + 1):
        runs[r] = {m: (chs.get((r, m)) if m.startswith("ch-") else bootscope_row(t, m, r, bs_before))
                   for m in modes}
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
    print("| mode | runs | " + " | ".join(h for _, h in MEDIANS) + " |")
    print("|---|---:|" + "---:|" * len(MEDIANS))
    missing = 0
    for m in modes:
        got = [x[m] for x in runs.values() if x[m]]
        missing += rounds - len(got)
        num = [{k: (float(v) if isinstance(v, (int, float)) or str(v).isdigit() else v)
                for k, v in g.items()} for g in got]
        print(f"| {m} | {len(got)} | " + " | ".join(med(num, k) for k, _ in MEDIANS) + " |")
    print("\npaired ratios (Hodges-Lehmann estimate, Wilcoxon interval):")
    for a, b, key in RATIOS:
        if not all(m in modes or (m == BEST_CH and {"ch-copy", "ch-ondemand"} & set(modes)) for m in (a, b)):
            continue
        print("  " + ratio(runs, a, b, key))
    bad = [(r, m) for r, x in runs.items() for m, row in x.items() if row and row["sum_ok"] != "yes"]
    print(f"\nruns missing: {missing}; checksums differing after a restore: {len(bad)} {bad or ''}")
    return 1 if bad or missing else 0


if __name__ == "__main__":
    sys.exit(main())
