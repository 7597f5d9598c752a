#!/bin/sh
# Runs inside the lab (busybox sh), started by scripts/bench-lab-direct-boot:
# warm-up round 0, then ROUNDS rounds of three boots (bootscope bzImage,
# bootscope vmlinux, QEMU microvm bzImage), order rotating per round; each
# boot timed by boot_bench, one CSV row each.
#
# Arguments: ROUNDS KERNEL VMLINUX INITRD BOOTSCOPE BOOT_BENCH QEMU CSV TAR
set -u
if [ $# -ne 9 ]; then
    echo "usage: $0 ROUNDS KERNEL VMLINUX INITRD BOOTSCOPE BOOT_BENCH QEMU CSV TAR" >&2
    exit 2
fi
rounds=$1 kernel=$2 vmlinux=$3 initrd=$4 bootscope=$5 bench=$6 qemu=$7 csv=$8 tar=$9
cmdline='console=ttyS0 quiet panic=-1'
marker='bootscope-guest: hello from userspace'
work=/tmp/bench
mkdir -p "$work/logs" "$work/timelines"
# bootscope's kernel cache lives here for the whole session.
export XDG_CACHE_HOME=$work/cache
rm -f "$csv"

boot() { # VMM ROUND
    t=$work/timelines/$2-$1.json
    case $1 in
    bootscope-bz | bootscope-vmlinux)
        k=$kernel
        [ "$1" = bootscope-vmlinux ] && k=$vmlinux
        "$bench" run --csv "$csv" --vmm "$1" --variant quiet --round "$2" \
            --marker "$marker" --timeline "$t" --log-dir "$work/logs" -- \
            "$bootscope" run --kernel "$k" --initrd "$initrd" --cmdline "$cmdline" \
            --memory 256M --serial stdout --timeline "$t" \
            --serial-pattern "hello=$marker" --timeout 600 --no-profile --no-summary
        ;;
    qemu)
        "$bench" run --csv "$csv" --vmm qemu --variant quiet --round "$2" \
            --marker "$marker" --log-dir "$work/logs" -- \
            "$qemu" -enable-kvm -M microvm -cpu host -m 256M -smp 1 \
            -nodefaults -no-user-config -display none -no-reboot -serial stdio \
            -kernel "$kernel" -initrd "$initrd" -append "$cmdline"
        ;;
    esac
}

status=0
for round in $(seq 0 "$rounds"); do
    case $((round % 3)) in
    0) order="bootscope-bz bootscope-vmlinux qemu" ;;
    1) order="bootscope-vmlinux qemu bootscope-bz" ;;
    2) order="qemu bootscope-bz bootscope-vmlinux" ;;
    esac
    for vmm in $order; do
        boot "$vmm" "$round" || status=1
    done
done
(cd "$work" && tar cf "$tar" timelines)
exit "$status"
