#!/bin/sh
# Runs inside the lab (busybox sh), started by scripts/bench-lab-boot: boots
# the default guest once with one VMM, timed by boot_bench, which also counts
# the run's KVM exits and writes one CSV row.
#
# Arguments: VMM VARIANT ROUND KERNEL INITRD BOOTSCOPE BOOT_BENCH QEMU
#            --output CSV --serial CONSOLE --timeline TIMELINE
#   VMM       bootscope or qemu
#   VARIANT   plain (bootscope's default kernel command line) or quiet (plus `quiet`)
#   CSV       where the run's CSV row goes
#   CONSOLE   where a copy of the guest console goes
#   TIMELINE  where bootscope's timeline goes (bootscope runs only)
# scripts/bench-lab-boot names CSV, CONSOLE and TIMELINE with `lab --output`
# too, so the lab copies them back to the host.
set -u
if [ $# -ne 14 ] || [ "$9" != --output ] || [ "${11}" != --serial ] || [ "${13}" != --timeline ]; then
    echo "usage: $0 VMM VARIANT ROUND KERNEL INITRD BOOTSCOPE BOOT_BENCH QEMU --output CSV --serial CONSOLE --timeline TIMELINE" >&2
    exit 2
fi
vmm=$1 variant=$2 round=$3 kernel=$4 initrd=$5 bootscope=$6 bench=$7 qemu=$8
csv=${10} console_copy=${12} timeline=${14}
# bootscope's default command line (DEFAULT_CMDLINE in src/common.rs).
cmdline='console=ttyS0 reboot=k panic=-1 pci=off io_delay=none i8042.noaux i8042.nomux i8042.dumbkbd'
case $variant in
plain) ;;
quiet) cmdline="$cmdline quiet" ;;
*)
    echo "bench: unknown variant '$variant' (plain or quiet)" >&2
    exit 2
    ;;
esac
marker='bootscope-guest: hello from userspace'
logs=/tmp/bench/logs
mkdir -p /tmp/bench "$logs"

case $vmm in
bootscope)
    # --no-profile: the VMMs are compared as they are; bootscope's eBPF
    # profiler (on by default) has its own overhead benchmark.
    "$bench" run --csv "$csv" --vmm bootscope --variant "$variant" --round "$round" \
        --marker "$marker" --timeline "$timeline" --log-dir "$logs" -- \
        "$bootscope" run --kernel "$kernel" --initrd "$initrd" --cmdline "$cmdline" \
        --memory 256M --serial stdout --timeline "$timeline" \
        --serial-pattern "hello=$marker" --timeout 600 --no-profile
    status=$?
    ;;
qemu)
    "$bench" run --csv "$csv" --vmm qemu --variant "$variant" --round "$round" \
        --marker "$marker" --log-dir "$logs" -- \
        "$qemu" -enable-kvm -M microvm -cpu host -m 256M -smp 1 \
        -nodefaults -no-user-config -display none -no-reboot -serial stdio \
        -kernel "$kernel" -initrd "$initrd" -append "$cmdline"
    status=$?
    ;;
*)
    echo "bench: unknown VMM '$vmm' (bootscope or qemu)" >&2
    exit 2
    ;;
esac
cp "$logs/$variant-$round-$vmm.console" "$console_copy"
exit "$status"
