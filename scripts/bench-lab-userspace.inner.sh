#!/bin/sh
# Runs inside the lab (busybox sh), started by scripts/bench-lab-userspace:
# boots the image once with `bootscope run --disk`, then takes the image's
# journal out of it with debugfs (carried in with its libraries), packed
# into a tar archive that comes back to the host with the run's files.
#
# Arguments: BOOTSCOPE KERNEL INITRD IMAGE CMDLINE OUT_DIR
set -u
if [ $# -ne 6 ]; then
    echo "usage: $0 BOOTSCOPE KERNEL INITRD IMAGE CMDLINE OUT_DIR" >&2
    exit 2
fi
bootscope=$1 kernel=$2 initrd=$3 image=$4 cmdline=$5 out=$6
work=/tmp/bench-lab-userspace
mkdir -p "$work" "$out"
export XDG_CACHE_HOME=$work/cache
status=0
"$bootscope" run --kernel "$kernel" --initrd "$initrd" --disk "$image" --memory 512M \
    --timeout 2400 --cmdline "$cmdline" --initcalls --exit-sites \
    --timeline "$out/timeline.json" --output "$out/profile.json" \
    --serial "$out/serial.log" >"$out/summary.txt" 2>&1 || status=$?
debugfs -R "rdump /var/log/journal $work" "$image" >/dev/null 2>&1 ||
    echo "debugfs could not read the journal of $image" >&2
tar -cf "$out/journal.tar" -C "$work" journal
exit "$status"
