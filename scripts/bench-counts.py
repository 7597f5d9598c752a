#!/usr/bin/env python3
"""The counts of one or more bench files side by side: one Markdown row per
count metric matching a prefix, one column per configuration (the median of
its measured runs, from the file's summary). A metric a configuration lacks
from a profile (`exit-reason:*`, `pio:*`) is 0 where the configuration was
profiled (a profile lists only the exit reasons and ports that occurred);
any other missing metric is "-".

    bench-counts.py BENCH.json... [--prefix exit-reason: --prefix pio: ...]
"""
import json
import sys


def die(message):
    """Bad input: the message, exit status 2."""
    print(message, file=sys.stderr)
    sys.exit(2)


def main():
    args = sys.argv[1:]
    prefixes = []
    files = []
    i = 0
    while i < len(args):
        if args[i] == "--prefix" and i + 1 < len(args):
            prefixes.append(args[i + 1])
            i += 2
        elif args[i].startswith("--"):
            die(f"bench-counts: unknown option {args[i]} (--prefix TEXT)")
        else:
            files.append(args[i])
            i += 1
    if not files:
        die("usage: bench-counts.py BENCH.json... [--prefix METRIC_PREFIX]...")
    prefixes = prefixes or ["exits:total", "exit-reason:", "pio:"]
    columns = []
    for path in files:
        try:
            doc = json.load(open(path))
        except (OSError, ValueError) as e:
            die(f"bench-counts: cannot read {path}: {e}")
        if doc.get("schema") != "bootscope.bench":
            die(f"bench-counts: {path} is not a bench file (bootscope bench --output)")
        for c in doc["configs"]:
            columns.append((c["label"], c.get("summary", {})))
    names = sorted(
        {m for _, s in columns for m, v in s.items()
         if v.get("kind") == "count" and any(m.startswith(p) for p in prefixes)},
        key=lambda m: ([m.startswith(p) for p in prefixes].index(True), m),
    )

    def cell(summary, metric):
        if metric in summary:
            return f"{summary[metric]['median']:,.0f}"
        profiled = "exit-reason:total" in summary
        from_profile = metric.startswith(("exit-reason:", "pio:"))
        return "0" if profiled and from_profile else "-"

    print("| metric | " + " | ".join(label for label, _ in columns) + " |")
    print("|---|" + "---:|" * len(columns))
    for m in names:
        print(f"| {m} | " + " | ".join(cell(s, m) for _, s in columns) + " |")


main()
