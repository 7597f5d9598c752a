#!/usr/bin/env python3
"""Profile against KVM against /proc, from scripts/lab-ch-restore-profile.

    python3 scripts/lab-ch-restore-profile.py DIR

DIR holds counts.tsv and MODE.prof.json per restore mode (copy, ondemand).
For each mode, one line per check:

    check MODE NAME profile=P reference=R diff=D% within_1pct=yes|no

  kvm_pf_fixed    the profile's guest faults over the VM's life
                  (`fault_tail.guest_faults_total`) against KVM's pf_fixed
                  from CH's launch to the guest's `after sum` line
  kvm_pf_taken    the same against pf_taken
  proc_minflt     the host minor faults the profile counted in its window
                  (`fault_tail.host`: in guest faults + other) against the
                  CH process's minflt (/proc/PID/task/*/stat summed) from
                  `resumed` to `go` (the window's span: the guest's first
                  fault after the resume to its next mark, 0x63, written
                  right after `go`)
  proc_majflt     the same for major faults

then the lines of the interval table (every /proc interval read), for the
reader to see where the counts fall. Exit 1 when an input is missing.
"""
import csv
import json
import os
import sys


def pct(p, r):
    if r == 0:
        return 0.0 if p == 0 else float("inf")
    return 100.0 * (p - r) / r


def num(row, key):
    v = row.get(key, "-")
    return None if v in ("-", "", None) else int(v)


def delta(row, a, b, c):
    x, y = num(row, f"{a}_{c}"), num(row, f"{b}_{c}")
    return None if x is None or y is None else y - x


def checks(mode, row, prof):
    ft = prof.get("fault_tail")
    if ft is None:
        print(f"check {mode} fault_tail missing from the profile")
        return
    host = ft.get("host", {})
    pairs = [
        ("kvm_pf_fixed", ft.get("guest_faults_total", 0), delta(row, "launch", "end", "pf_fixed")),
        ("kvm_pf_taken", ft.get("guest_faults_total", 0), delta(row, "launch", "end", "pf_taken")),
        ("proc_minflt", host.get("minor_in_guest_faults", 0) + host.get("minor_other", 0),
         delta(row, "resumed", "go", "task_minflt")),
        ("proc_majflt", host.get("major_in_guest_faults", 0) + host.get("major_other", 0),
         delta(row, "resumed", "go", "task_majflt")),
    ]
    for name, p, r in pairs:
        if r is None:
            print(f"check {mode} {name} profile={p} reference=- diff=- within_1pct=no")
            continue
        d = pct(p, r)
        ok = "yes" if abs(d) <= 1.0 else "no"
        print(f"check {mode} {name} profile={p} reference={r} diff={d:+.2f}% within_1pct={ok}")
    w = ft.get("window", {})
    span = ((w.get("end_ns") or 0) - (w.get("start_ns") or 0)) / 1e6
    threads = host.get("threads", [])
    print(f"  {mode}: window {span:.1f} ms to {w.get('end_mark')}; guest faults "
          f"{ft.get('guest_faults')} in window, {ft.get('guest_faults_total')} in all; host "
          f"threads' window counters minflt {sum(t['minflt'] for t in threads)} "
          f"majflt {sum(t['majflt'] for t in threads)}; host {json.dumps({k: v for k, v in host.items() if k != 'threads'})}")
    for a, b in (("launch", "resumed"), ("resumed", "go"), ("go", "end"), ("resumed", "end")):
        print(f"  {mode}: /proc {a}->{b}: process minflt {delta(row, a, b, 'minflt')} "
              f"majflt {delta(row, a, b, 'majflt')}; threads minflt "
              f"{delta(row, a, b, 'task_minflt')} majflt {delta(row, a, b, 'task_majflt')}; "
              f"kvm pf_fixed {delta(row, a, b, 'pf_fixed')} pf_taken {delta(row, a, b, 'pf_taken')}")


def main():
    if len(sys.argv) != 2:
        print("usage: lab-ch-restore-profile.py DIR", file=sys.stderr)
        return 2
    d = sys.argv[1]
    path = os.path.join(d, "counts.tsv")
    if not os.path.exists(path):
        print(f"lab-ch-restore-profile.py: {path} is missing", file=sys.stderr)
        return 1
    rows = list(csv.DictReader(open(path), delimiter="\t"))
    status = 0
    for mode in ("copy", "ondemand"):
        row = next((r for r in rows if r["mode"] == mode), None)
        p = os.path.join(d, f"{mode}.prof.json")
        if row is None or not os.path.exists(p):
            print(f"check {mode} missing (no counts row or no profile)")
            status = 1
            continue
        checks(mode, row, json.load(open(p)))
    return status


if __name__ == "__main__":
    sys.exit(main())
