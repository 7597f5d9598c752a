#!/bin/sh
# Runs inside the lab (busybox sh), started by `scripts/bench-storm --lab`:
# for each N, one `bootscope bench --parallel N` of the default guest,
# bootscope against QEMU `-M microvm` (--vs-command), on the same kernel,
# initramfs, command line, memory (128 MiB) and one vCPU each.
#
# Arguments: NS RUNS OUT BOOTSCOPE QEMU KERNEL INITRD
#   NS   comma-separated storm sizes; each N's bench file is OUT/storm-N.json
set -u
if [ $# -ne 7 ]; then
    echo "usage: $0 NS RUNS OUT BOOTSCOPE QEMU KERNEL INITRD" >&2
    exit 2
fi
ns=$1 runs=$2 out=$3 bs=$4 qemu=$5 kernel=$6 initrd=$7
# bootscope's default command line (DEFAULT_CMDLINE in src/common.rs), quiet.
cmdline='console=ttyS0 reboot=k panic=-1 pci=off io_delay=none i8042.noaux i8042.nomux i8042.dumbkbd quiet'
status=0
for n in $(echo "$ns" | tr , ' '); do
    echo "bench-storm (lab): N=$n" >&2
    # Both VMMs: time to the guest's hello line (`console:userspace`), at
    # which bench reads each VMM's memory.
    "$bs" bench --parallel "$n" --runs "$runs" --warmup 1 --output "$out/storm-$n.json" \
        --label bootscope --label qemu-microvm \
        --console-pattern 'userspace=bootscope-guest: hello from userspace' \
        -- run --kernel "$kernel" --initrd "$initrd" --cmdline "$cmdline" --memory 128M \
        --timeout 600 \
        --vs-command "$qemu" -enable-kvm -M microvm -cpu host -m 128M -smp 1 \
        -nodefaults -no-user-config -display none -no-reboot -serial stdio \
        -kernel "$kernel" -initrd "$initrd" -append "$cmdline" >/dev/null || status=$?
    # 1: a VM failed (kept in the file); anything else: stop.
    [ "$status" -le 1 ] || exit "$status"
done
exit "$status"
