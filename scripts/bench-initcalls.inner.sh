#!/bin/sh
# Runs inside the lab (busybox sh), started by scripts/bench-initcalls (set
# `isolated`): one warm-up boot, then ROUNDS rounds of four boots: a plain
# boot (not measured), plain `run` (measured), a plain boot (not measured),
# `run --initcalls` (measured), the two measured ones in alternating order.
# Each measured boot follows the same plain boot, so neither side inherits
# what the boot before it left behind in the lab machine (its emulator keeps
# translated code across processes, its memory what they freed): the
# comparison is of the two boots alone. Each measured boot writes its
# timeline, all packed into TAR.
#
# Arguments: ROUNDS BOOTSCOPE KERNEL INITRD CMDLINE TAR [METHOD]
set -u
if [ $# -lt 6 ]; then
    echo "usage: $0 ROUNDS BOOTSCOPE KERNEL INITRD CMDLINE TAR [METHOD]" >&2
    exit 2
fi
rounds=$1 bootscope=$2 kernel=$3 initrd=$4 cmdline=$5 tar=$6 method=${7:-trace}
work=/tmp/bench-initcalls
mkdir -p "$work"
export XDG_CACHE_HOME=$work/cache

boot() { # [RUN ARGUMENTS]
    "$bootscope" run --kernel "$kernel" --initrd "$initrd" --cmdline "$cmdline" \
        --memory 256M --no-profile --serial null --no-summary "$@" >/dev/null 2>"$work/err" ||
        { echo "boot failed: $*" >&2; cat "$work/err" >&2; }
}

boot
i=1
while [ "$i" -le "$rounds" ]; do
    off=$work/off-$i.json ic=$work/initcalls-$i.json
    if [ $((i % 2)) = 1 ]; then
        boot; boot --timeline "$off"
        boot; boot --timeline "$ic" --initcalls --initcalls-method "$method"
    else
        boot; boot --timeline "$ic" --initcalls --initcalls-method "$method"
        boot; boot --timeline "$off"
    fi
    i=$((i + 1))
done
cd "$work" && tar cf "$tar" off-*.json initcalls-*.json
