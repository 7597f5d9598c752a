#!/bin/sh
# Runs inside the lab (busybox sh), started by scripts/bench-lab-userspace.
#
#   boot BOOTSCOPE KERNEL INITRD IMAGE CMDLINE OUT_DIR
#       boots the image once with `bootscope run --disk` (timeline, profile
#       with exit sites, initcalls, console), then takes the image's journal
#       out of it with debugfs (carried in with its libraries), packed into
#       OUT_DIR/journal.tar, which comes back to the host with the run's
#       files.
#   prove BOOTSCOPE KERNEL INITRD IMAGE CMDLINE OUT_DIR RUNS LEVEL FIXES BUDGET TIMELINE PROFILE [RULES [TOGETHER [KINDS [UNSAFE]]]]
#       (TOGETHER 1: advise --together-first; KINDS: advise --kinds, default kernel;
#       UNSAFE 1: advise --allow-unsafe)
#       boots the image twice first, unmeasured: the first boots of a lab
#       session are the slowest (the emulator translates the code anew, and
#       the image's first boots do one-time work), which would weigh on
#       the first round of the first A/B bench only; then `advise --prove`
#       with the boot step's TIMELINE and PROFILE as evidence (with RULES,
#       `--rules RULES`: only those rules' fixes).
set -u
if [ $# -lt 7 ]; then
    echo "usage: $0 boot|prove BOOTSCOPE KERNEL INITRD IMAGE CMDLINE OUT_DIR [...]" >&2
    exit 2
fi
mode=$1 bootscope=$2 kernel=$3 initrd=$4 image=$5 cmdline=$6 out=$7
work=/tmp/bench-lab-userspace
mkdir -p "$work" "$out"
export XDG_CACHE_HOME=$work/cache
status=0
case $mode in
boot)
    "$bootscope" run --kernel "$kernel" --initrd "$initrd" --disk "$image" --memory 512M \
        --timeout 2400 --cmdline "$cmdline" --initcalls --exit-sites \
        --timeline "$out/timeline.json" --output "$out/profile.json" \
        --serial "$out/serial.log" >"$out/summary.txt" 2>&1 || status=$?
    debugfs -R "rdump /var/log/journal $work" "$image" >/dev/null 2>&1 ||
        echo "debugfs could not read the journal of $image" >&2
    tar -cf "$out/journal.tar" -C "$work" journal
    debugfs -R "dump /var/log/critical-chain.txt $out/critical-chain.txt" "$image" >/dev/null 2>&1 ||
        echo "debugfs could not read systemd-analyze's chains in $image" >&2
    ;;
prove)
    if [ $# -lt 13 ] || [ $# -gt 17 ]; then
        echo "usage: $0 prove BOOTSCOPE KERNEL INITRD IMAGE CMDLINE OUT_DIR RUNS LEVEL FIXES BUDGET TIMELINE PROFILE [RULES [TOGETHER [KINDS [UNSAFE]]]]" >&2
        exit 2
    fi
    runs=$8 level=$9 fixes=${10} budget=${11} timeline=${12} profile=${13} rules=${14:-} together=${15:-0} kinds=${16:-kernel} unsafe=${17:-0}
    set --
    [ -n "$rules" ] && set -- --rules "$rules"
    [ "$together" = 1 ] && set -- "$@" --together-first
    [ "$unsafe" = 1 ] && set -- "$@" --allow-unsafe
    for i in 1 2; do
        "$bootscope" run --kernel "$kernel" --initrd "$initrd" --disk "$image" --memory 512M \
            --timeout 1800 --cmdline "$cmdline" --serial null --no-profile --no-summary \
            >/dev/null 2>"$work/warm-up.err" ||
            { echo "warm-up boot $i failed:" >&2; cat "$work/warm-up.err" >&2; }
        echo "warm-up boot $i done" >&2
    done
    "$bootscope" advise "$timeline" "$profile" --prove --runs "$runs" --level "$level" \
        --max-fixes "$fixes" --budget "$budget" --kinds "$kinds" "$@" --run-timeout 1800 \
        --output "$out/prove.json" --svg "$out/prove.svg" \
        -- run --kernel "$kernel" --initrd "$initrd" --disk "$image" --memory 512M \
        --timeout 1800 --cmdline "$cmdline" --serial null >"$out/prove.txt" 2>&1 || status=$?
    ;;
*)
    echo "$0: the mode is boot or prove, not '$mode'" >&2
    exit 2
    ;;
esac
exit "$status"
