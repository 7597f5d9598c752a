# Sourced by scripts/bench-lab-boot and scripts/bench-lab-direct-boot.
#
# lab_vs_qemu FILE LABEL KERNEL RUNS WARMUP [BENCH OPTIONS...]
#   One `bootscope bench` in one lab machine, written to FILE: bootscope
#   (labelled LABEL) booting KERNEL against QEMU `-M microvm` booting the
#   bzImage, interleaved, both with $initrd, $cmdline, 256 MiB and 1 vCPU,
#   each timed to the guest's hello line (console pattern `hello`).
#   Uses $bootscope, $qemu, $kernel (the bzImage), $initrd and $cmdline.
lab_vs_qemu() {
    local file=$1 label=$2 k=$3 runs=$4 warmup=$5
    shift 5
    rm -f "$file"
    "$bootscope" lab --timeout $((600 + (runs + warmup) * 1200)) --retries 3 \
        --program "$qemu" --input /usr/share/qemu -- \
        bench --runs "$runs" --warmup "$warmup" --label "$label" --label qemu \
        --console-pattern "hello=bootscope-guest: hello from userspace" \
        --output "$file" "$@" -- \
        run --kernel "$k" --initrd "$initrd" --cmdline "$cmdline" --memory 256M --timeout 600 \
        --vs-command "$qemu" -enable-kvm -M microvm -cpu host -m 256M -smp 1 \
        -nodefaults -no-user-config -display none -no-reboot -serial stdio \
        -kernel "$kernel" -initrd "$initrd" -append "$cmdline"
}
