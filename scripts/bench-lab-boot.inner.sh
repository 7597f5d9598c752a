#!/bin/sh
# Runs inside the lab (busybox sh), started by scripts/bench-lab-boot.
# Boots the default guest ROUNDS + 1 times per variant with each VMM,
# bootscope then QEMU in every round, one VM at a time; round 0 is a warm-up.
# boot_bench times each run and counts its KVM exits, one CSV row per run.
#
# Arguments: ROUNDS VARIANTS KERNEL INITRD BOOTSCOPE BOOT_BENCH QEMU --output CSV
set -u
if [ $# -ne 9 ] || [ "$8" != --output ]; then
    echo "usage: $0 ROUNDS VARIANTS KERNEL INITRD BOOTSCOPE BOOT_BENCH QEMU --output CSV" >&2
    exit 2
fi
rounds=$1 variants=$2 kernel=$3 initrd=$4 bootscope=$5 bench=$6 qemu=$7 csv=$9
# bootscope's default command line (src/cli.rs DEFAULT_CMDLINE).
base_cmdline='console=ttyS0 reboot=k panic=-1 pci=off io_delay=none i8042.noaux i8042.nomux i8042.dumbkbd'
marker='bootscope-guest: hello from userspace'
timeline=/tmp/bench/timeline.json
logs=/tmp/bench/logs
mkdir -p /tmp/bench "$logs"

echo "bench: lab machine: $(grep -c ^processor /proc/cpuinfo) vCPU(s),$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), kernel $(uname -r), kvm_amd npt=$(cat /sys/module/kvm_amd/parameters/npt)"
echo "bench: $("$qemu" --version | head -n 1)"
failed=0
for variant in $(echo "$variants" | tr , ' '); do
    case $variant in
    plain) cmdline=$base_cmdline ;;
    quiet) cmdline="$base_cmdline quiet" ;;
    *)
        echo "bench: unknown variant '$variant' (plain or quiet)" >&2
        exit 2
        ;;
    esac
    echo "bench: variant $variant: kernel command line: $cmdline"
    round=0
    while [ "$round" -le "$rounds" ]; do
        "$bench" run --csv "$csv" --vmm bootscope --variant "$variant" --round "$round" \
            --marker "$marker" --timeline "$timeline" --log-dir "$logs" -- \
            "$bootscope" run --kernel "$kernel" --initrd "$initrd" --cmdline "$cmdline" \
            --memory 256M --serial stdout --timeline "$timeline" \
            --serial-pattern "hello=$marker" --timeout 600 ||
            failed=$((failed + 1))
        "$bench" run --csv "$csv" --vmm qemu --variant "$variant" --round "$round" \
            --marker "$marker" --log-dir "$logs" -- \
            "$qemu" -enable-kvm -M microvm -cpu host -m 256M -smp 1 \
            -nodefaults -no-user-config -display none -no-reboot -serial stdio \
            -kernel "$kernel" -initrd "$initrd" -append "$cmdline" ||
            failed=$((failed + 1))
        round=$((round + 1))
    done
done
if [ "$failed" -ne 0 ]; then
    echo "bench: $failed run(s) failed; their logs were in $logs"
    exit 1
fi
