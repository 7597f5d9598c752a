# Cloud Hypervisor in the lab: boot, snapshot and restore, with times.
# POSIX sh for the lab's busybox (`bootscope lab --exe /bin/busybox`);
# sourced by scripts/bench-lab-ch-restore and scripts/bench-lab-restore-vs-ch
# (run by tests/lab_ch.rs). docs/lab.md says how Cloud Hypervisor is built
# and carried in.
#
# Set before calling, or take the defaults:
#   CH            cloud-hypervisor binary   (/usr/local/bin/cloud-hypervisor)
#   CH_REMOTE     ch-remote binary          (/usr/local/bin/ch-remote)
#   CH_WORK       scratch directory: API socket, logs (/tmp/lab-ch)
#   CH_MEMORY     guest memory, CH syntax   (256M)
#   CH_CPUS       guest vCPUs               (1)
#   CH_TIMEOUT    seconds any one wait may take (300)
#
# Functions (each returns non-zero with a line on stderr on failure):
#   ch_boot KERNEL INITRD CMDLINE PATTERN
#       Boots KERNEL (an uncompressed ELF vmlinux: CH enters it through its
#       PVH note) with INITRD under CH, serial on a pty, API socket on, and
#       waits for a console line containing PATTERN. Sets CH_T_LAUNCH and
#       CH_T_LINE (ms on the lab's clock, /proc/uptime).
#   ch_snapshot DIR
#       Pauses the running VM, `ch-remote snapshot file://DIR`, and stops
#       CH. Sets CH_T_PAUSED, CH_T_SNAPSHOT (ms).
#   ch_restore MODE DIR
#       `cloud-hypervisor --restore source_url=file://DIR` (MODE copy: CH's
#       default, the memory file copied into guest RAM before the restore
#       completes; MODE ondemand: `memory_restore_mode=ondemand`, pages
#       served by userfaultfd on first touch), then `ch-remote resume` as
#       soon as CH answers. Sets CH_T_LAUNCH, CH_T_RESUMED (ms).
#   ch_send TEXT        writes TEXT and a newline to the guest's serial input
#   ch_wait_line PATTERN
#       Waits for a console line containing PATTERN (fixed string) seen
#       after the last ch_boot/ch_restore; sets CH_T_LINE, the moment the
#       line was read from the pty, and CH_LINE, the line itself.
#   ch_wait_exit        waits for CH to end (the guest powered off)
#   ch_stop             kills CH if it still runs
#   ch_vmlinux BZIMAGE OUT
#       On the host (needs xz): writes the ELF vmlinux inside BZIMAGE (a
#       Debian kernel, CONFIG_KERNEL_XZ) to OUT, unless OUT is newer.
#
# Every console line is stamped as it is read (a reader on the pty,
# `read` builtins only), so a stamp does not depend on how often a wait
# polls; the lab's clock ticks in 10 ms.

CH=${CH:-/usr/local/bin/cloud-hypervisor}
CH_REMOTE=${CH_REMOTE:-/usr/local/bin/ch-remote}
CH_WORK=${CH_WORK:-/tmp/lab-ch}
CH_MEMORY=${CH_MEMORY:-256M}
CH_CPUS=${CH_CPUS:-1}
CH_TIMEOUT=${CH_TIMEOUT:-300}
CH_PID=
CH_READER=
CH_PTY=
CH_CR=$(printf '\r')

# CH_NOW: the lab's uptime in ms (a builtin read: no process started).
ch_now() {
    read -r _ch_up _ch_idle </proc/uptime
    CH_NOW=$((${_ch_up%.*} * 1000 + 10 * 1${_ch_up#*.} - 1000))
}

ch_fail() {
    echo "lab-ch: $*" >&2
    [ -s "$CH_WORK/ch.log" ] && sed 's/^/lab-ch: ch.log: /' "$CH_WORK/ch.log" >&2
    ch_stop
    return 1
}

# A pty needs devpts; the lab's init mounts only what its programs need.
# Opening the pty may make it this session's terminal, whose hang-up (CH
# closing it) must not end the script: SIGHUP is ignored.
ch_prepare() {
    trap '' HUP
    mkdir -p "$CH_WORK" || return 1
    [ -c /dev/ptmx ] || mknod /dev/ptmx c 5 2
    if [ ! -e /dev/pts/ptmx ]; then
        mkdir -p /dev/pts
        mount -t devpts -o ptmxmode=0666 devpts /dev/pts || {
            echo "lab-ch: cannot mount devpts on /dev/pts (CH's serial pty needs it)" >&2
            return 1
        }
    fi
    for f in "$CH" "$CH_REMOTE"; do
        [ -x "$f" ] || {
            echo "lab-ch: $f is not an executable (build Cloud Hypervisor: docs/lab.md)" >&2
            return 1
        }
    done
}

ch_api() {
    "$CH_REMOTE" --api-socket "$CH_WORK/api.sock" "$@"
}

# A child that ended stays a zombie until waited for: read its state.
ch_alive() {
    [ -n "$CH_PID" ] &&
        read -r _ch_p _ch_c _ch_s _ch_r 2>/dev/null <"/proc/$CH_PID/stat" &&
        [ "$_ch_s" != Z ]
}

ch_api_quiet() {
    ch_api "$@" >/dev/null 2>&1
}

# ch_launch ARGS...: starts CH in the background with the API socket.
# A restore takes its devices (the serial port on a pty, no virtio
# console) from the snapshot's config.json: CH refuses them beside
# --restore.
ch_launch() {
    ch_prepare || return 1
    rm -f "$CH_WORK/api.sock" "$CH_WORK/console.log"
    : >"$CH_WORK/console.log"
    ch_now
    CH_T_LAUNCH=$CH_NOW
    "$CH" --api-socket "path=$CH_WORK/api.sock" "$@" >"$CH_WORK/ch.log" 2>&1 &
    CH_PID=$!
}

# Reads every console line from the pty and stamps it (ms, then the line).
ch_reader() {
    while IFS= read -r _ch_l; do
        ch_now
        printf '%s %s\n' "$CH_NOW" "${_ch_l%"$CH_CR"}"
    done <"$CH_PTY" >>"$CH_WORK/console.log" 2>/dev/null
}

# Finds the serial pty in `ch-remote info` and starts the reader on it.
ch_attach() {
    _ch_info=$(ch_api info 2>/dev/null) || return 1
    CH_PTY=$(printf '%s\n' "$_ch_info" | grep -o '/dev/pts/[0-9]*' | head -n 1)
    [ -n "$CH_PTY" ] || return 1
    ch_reader &
    CH_READER=$!
}

# ch_until DESCRIPTION COMMAND...: runs COMMAND until it succeeds, while CH
# runs, for at most CH_TIMEOUT seconds.
ch_until() {
    _ch_what=$1
    shift
    ch_now
    _ch_end=$((CH_NOW + CH_TIMEOUT * 1000))
    until "$@"; do
        if ! ch_alive; then
            # The reader may still hold CH's last lines: one more look.
            usleep 300000
            "$@" && return 0
            ch_fail "cloud-hypervisor ended while waiting for $_ch_what"
            return 1
        fi
        ch_now
        [ "$CH_NOW" -lt "$_ch_end" ] || {
            ch_fail "no $_ch_what after ${CH_TIMEOUT}s"
            return 1
        }
        usleep 20000
    done
}

ch_line_seen() {
    CH_LINE=$(grep -F -m 1 -- "$1" "$CH_WORK/console.log") || return 1
    CH_T_LINE=${CH_LINE%% *}
    CH_LINE=${CH_LINE#* }
}

ch_wait_line() {
    ch_until "console line '$1'" ch_line_seen "$1"
}

ch_boot() {
    [ $# -eq 4 ] || {
        echo "lab-ch: ch_boot KERNEL INITRD CMDLINE PATTERN" >&2
        return 1
    }
    ch_launch --kernel "$1" --initramfs "$2" --cmdline "$3" --serial pty --console off \
        --memory "size=$CH_MEMORY" --cpus "boot=$CH_CPUS" || return 1
    ch_until "API socket" ch_attach || return 1
    ch_wait_line "$4"
}

ch_snapshot() {
    [ $# -eq 1 ] || {
        echo "lab-ch: ch_snapshot DIR" >&2
        return 1
    }
    rm -rf "$1" && mkdir -p "$1" || return 1
    ch_api pause || {
        ch_fail "ch-remote pause failed"
        return 1
    }
    ch_now
    CH_T_PAUSED=$CH_NOW
    ch_api snapshot "file://$1" || {
        ch_fail "ch-remote snapshot file://$1 failed"
        return 1
    }
    ch_now
    CH_T_SNAPSHOT=$CH_NOW
    ch_stop
    [ -s "$1/state.json" ] && [ -s "$1/memory-ranges" ] || {
        echo "lab-ch: snapshot $1 lacks state.json or memory-ranges" >&2
        return 1
    }
}

ch_restore() {
    [ $# -eq 2 ] || {
        echo "lab-ch: ch_restore MODE DIR" >&2
        return 1
    }
    case $1 in
    copy) _ch_src="source_url=file://$2" ;;
    ondemand) _ch_src="source_url=file://$2,memory_restore_mode=ondemand" ;;
    *)
        echo "lab-ch: restore mode '$1' is neither copy nor ondemand" >&2
        return 1
        ;;
    esac
    ch_launch --restore "$_ch_src" || return 1
    # The resume is queued behind the restore by CH's API thread, so it
    # returns as soon as the VM can run.
    ch_until "resume after restore" ch_api_quiet resume || return 1
    ch_now
    CH_T_RESUMED=$CH_NOW
    ch_until "API socket" ch_attach
}

ch_send() {
    [ -n "$CH_PTY" ] || {
        echo "lab-ch: no guest console to write to" >&2
        return 1
    }
    printf '%s\n' "$1" >"$CH_PTY"
}

ch_wait_exit() {
    ch_now
    _ch_end=$((CH_NOW + CH_TIMEOUT * 1000))
    while ch_alive; do
        ch_now
        [ "$CH_NOW" -lt "$_ch_end" ] || {
            ch_fail "cloud-hypervisor still runs ${CH_TIMEOUT}s after the guest's last line"
            return 1
        }
        usleep 20000
    done
    wait "$CH_PID" 2>/dev/null
    CH_PID=
    ch_stop
}

# SIGTERM first (CH puts its terminal back), SIGKILL after 5 s.
ch_stop() {
    if ch_alive; then
        kill "$CH_PID" 2>/dev/null
        _ch_n=0
        while ch_alive && [ "$_ch_n" -lt 250 ]; do
            usleep 20000
            _ch_n=$((_ch_n + 1))
        done
        ch_alive && kill -9 "$CH_PID" 2>/dev/null
    fi
    [ -n "$CH_PID" ] && wait "$CH_PID" 2>/dev/null
    CH_PID=
    if [ -n "$CH_READER" ]; then
        kill "$CH_READER" 2>/dev/null
        wait "$CH_READER" 2>/dev/null
    fi
    CH_READER=
    CH_PTY=
}

# The vmlinux inside a bzImage: its payload is one xz stream (Debian's
# CONFIG_KERNEL_XZ), found by its magic, as the kernel's
# scripts/extract-vmlinux does.
ch_vmlinux() {
    if [ -s "$2" ] && [ ! "$1" -nt "$2" ]; then
        return 0
    fi
    _ch_off=$(LC_ALL=C grep -abo "$(printf '\3757zXZ\000')" "$1" | head -n 1 | cut -d: -f1)
    [ -n "$_ch_off" ] || {
        echo "lab-ch: $1 has no xz payload (not a Debian CONFIG_KERNEL_XZ kernel?)" >&2
        return 1
    }
    tail -c +$((_ch_off + 1)) "$1" | xz -dc --single-stream >"$2.tmp"
    [ "$(head -c 4 "$2.tmp" | od -An -tx1 | tr -d ' ')" = 7f454c46 ] || {
        echo "lab-ch: the xz payload of $1 is not an ELF vmlinux" >&2
        rm -f "$2.tmp"
        return 1
    }
    mv "$2.tmp" "$2"
}
