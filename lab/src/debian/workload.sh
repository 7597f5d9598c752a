#!/bin/sh
# bootscope's workload for the Debian guest image (docs/guest.md).
#
# Started by bootscope-workload.service once multi-user.target is reached:
# writes the userspace-ready marker to I/O port 0x80 (the VMM timestamps
# it), waits until systemd's start-up has finished, records what the host
# needs to place systemd's units on the VMM's clock into
# /var/lib/bootscope/units.txt, syncs and (unless the image was built with
# --keep-running) powers off.
set -u
dir=/var/lib/bootscope
out=$dir/units.txt
mkdir -p "$dir"
rm -f "$out"

# CLOCK_MONOTONIC (clock id 1, syscall 228 on x86-64) read right before and
# right after the one-byte write to port 0x80: the host aligns the guest's
# clock with the VMM's from this pair.
marker=$(perl -e '
    use strict;
    use Fcntl;
    sub mono {
        my $ts = pack("q2", 0, 0);
        syscall(228, 1, $ts) == 0 or die "clock_gettime: $!\n";
        my ($s, $ns) = unpack("q2", $ts);
        return $s * 1000000000 + $ns;
    }
    sysopen(my $port, "/dev/port", O_WRONLY) or die "cannot open /dev/port: $!\n";
    sysseek($port, 0x80, 0) or die "cannot seek /dev/port: $!\n";
    my $before = mono();
    syswrite($port, chr(@MARKER@), 1) == 1 or die "cannot write port 0x80: $!\n";
    my $after = mono();
    print "$before $after\n";
') || marker="error"

# Start-up finishes once no job is left (this unit's own start included).
systemctl is-system-running --wait >/dev/null 2>&1

tmp=$out.tmp
{
    echo "bootscope-units 1"
    echo "marker_value=@MARKER@"
    echo "marker_monotonic_ns=$marker"
    echo "[manager]"
    systemctl show -p @MANAGER_PROPERTIES@
    echo "[units]"
    systemctl list-units --all --plain --no-legend --no-pager | awk '{ print $1 }' |
        grep -v "^●" | xargs -r systemctl show -p @UNIT_PROPERTIES@ --
    echo "[analyze]"
    systemd-analyze time --no-pager 2>&1
    systemd-analyze critical-chain --no-pager bootscope-workload.service 2>&1
    echo "[end]"
} > "$tmp" 2>&1
sync "$tmp" 2>/dev/null || sync
mv "$tmp" "$out"
sync
@FINISH@
