#!/usr/bin/env python3
"""Profile against KVM against /proc, from scripts/lab-ch-restore-profile.

    python3 scripts/lab-ch-restore-profile.py DIR

DIR holds counts.tsv and MODE.prof.json per restore mode (copy, ondemand).
For each mode, one line per check, each comparing two counts of the same
interval, the VM's (and CH's) life:

    check MODE NAME profile=P reference=R diff=D% within_1pct=yes|no

(within 1 %, or within one event where the count is under 100: the copying
restore's guest faults number about 60; proc_faults may be under its
reference by up to 2 %, below)

  kvm_pf_fixed    the guest faults the profile counted
                  (`fault_tail.guest_faults_total`, KVM's MMU mapping a
                  page: kvmmmu:kvm_mmu_spte_requested) against KVM's own
                  pf_fixed of CH's VM (`fault_tail.kvm_pf_fixed`: debugfs
                  kvm/PID-FD/pf_fixed, read when CH ended, the VM kept
                  alive for that read)
  proc_faults     the host page faults of CH's threads the profile counted
                  (`page_faults.host_total`: page-fault exceptions, user and
                  kernel mode) against the kernel's count of CH's faults over
                  its life (`target.faults`: minflt + majflt of wait4's
                  rusage, the counters /proc/PID/stat shows) less those of
                  its start before the exec (`target.faults.held`, counted
                  before the profile's counts begin). The kernel also
                  counts there the faults it takes on a thread's behalf
                  with no exception (get_user_pages: KVM mapping guest
                  memory, a fault retried after userfaultfd served it),
                  which no exception tracepoint marks: the profile may be
                  under the reference by up to 2 % (a few faults of some
                  340 in the on-demand restore, more of them when the host
                  is loaded), over it by 1 % at most

then, per mode, the nested page faults (kvm:kvm_page_fault) beside KVM's
pf_taken, not compared: KVM does not count in pf_taken the faults on
emulated MMIO it answers before its page-fault handler (from its per-vCPU
MMIO cache, without an event; docs/benchmarks.md), and what each counted over the window and the counters the
script read itself while CH ran (KVM's debugfs totals, /proc/PID/stat and
/proc/PID/task/*/stat) at its launch, after the resume, before `go` and at
the guest's `after sum` line. Exit 1 when an input is missing.
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


def compare(mode, name, p, r, under_pct=1.0):
    if r is None or p is None:
        print(f"check {mode} {name} profile={p} reference=- diff=- within_1pct=no")
        return
    d = pct(p, r)
    # 1 % (under: under_pct), or one event where that is less than one (a
    # count under 100).
    over_ok = p - r <= max(r / 100.0, 1)
    under_ok = r - p <= max(r * under_pct / 100.0, 1)
    ok = "yes" if over_ok and under_ok else "no"
    print(f"check {mode} {name} profile={p} reference={r} diff={d:+.2f}% within_1pct={ok}")


def checks(mode, row, prof):
    ft = prof.get("fault_tail")
    if ft is None:
        print(f"check {mode} fault_tail missing from the profile")
        return
    pf = prof.get("page_faults", {})
    tf = prof.get("target", {}).get("faults")
    compare(mode, "kvm_pf_fixed", ft.get("guest_faults_total"), ft.get("kvm_pf_fixed"))
    taken = ft.get("kvm_pf_taken")
    npf = pf.get("guest_total", 0)
    print(f"  {mode}: not compared: nested page faults {npf} against KVM's pf_taken {taken} "
          f"({'-' if taken is None else npf - taken} more: faults on MMIO answered from "
          f"KVM's MMIO cache, which no tracepoint marks)")
    compare(mode, "proc_faults", pf.get("host_total"),
            None if tf is None else tf["minflt"] + tf["majflt"] - tf.get("held", 0),
            under_pct=2.0)
    host = ft.get("host", {})
    w = ft.get("window", {})
    span = ((w.get("end_ns") or 0) - (w.get("start_ns") or 0)) / 1e6
    print(f"  {mode}: life: guest faults {ft.get('guest_faults_total')} (spte), "
          f"{pf.get('guest_total')} (npf, {pf.get('guest_mmio')} mmio); KVM pf_fixed "
          f"{ft.get('kvm_pf_fixed')} pf_taken {ft.get('kvm_pf_taken')}; host faults "
          f"{pf.get('host_total')} (user {pf.get('host_user')}, kernel {pf.get('host_kernel')}); "
          f"kernel's minflt/majflt {tf}")
    print(f"  {mode}: window {span:.1f} ms to {w.get('end_mark')}: guest faults "
          f"{ft.get('guest_faults')}; host {json.dumps({k: v for k, v in host.items() if k != 'threads'})}")
    for a, b in (("launch", "resumed"), ("resumed", "go"), ("go", "end"), ("launch", "end")):
        print(f"  {mode}: read by the script, {a}->{b}: process minflt {delta(row, a, b, 'minflt')} "
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
