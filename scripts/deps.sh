#!/usr/bin/env bash
# Installs what bootscope needs on a Debian machine, skipping what is there.
# Sourced by scripts/demo and scripts/test.
set -euo pipefail

need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
[ -x /bin/busybox ] || need+=(busybox-static)
ls /boot/vmlinuz-* >/dev/null 2>&1 && ls -d /lib/modules/*/kernel/arch/x86/kvm >/dev/null 2>&1 \
    || need+=(linux-image-amd64)
command -v cc >/dev/null || need+=(gcc)
# The eBPF collectors (bpf/*.bpf.c) are compiled by profiler/build.rs.
command -v clang >/dev/null || need+=(clang)
[ -f /usr/include/bpf/bpf_helpers.h ] || need+=(libbpf-dev)
command -v bpftool >/dev/null || [ -x /usr/sbin/bpftool ] || need+=(bpftool)
# The virtio lab test makes its read-only disk with mkfs.ext4 (tests/lab_virtio.rs).
[ -x /usr/sbin/mkfs.ext4 ] || [ -x /sbin/mkfs.ext4 ] || need+=(e2fsprogs)
# The TUI's end-to-end tests drive it in tmux (tests/tui_tmux.rs).
command -v tmux >/dev/null || need+=(tmux)
# The package test reads the installed manual page (tests/package.rs).
command -v man >/dev/null || need+=(man-db)
# The exporter's end-to-end test scrapes it with the real Prometheus
# (tests/exporter_prometheus.rs); promtool comes with prometheus.
command -v prometheus >/dev/null || need+=(prometheus)
command -v prometheus-pushgateway >/dev/null || need+=(prometheus-pushgateway)
# The Debian guest image (bootscope guest build debian, tests/lab_debian_guest.rs).
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
# Firecracker, optional (BOOTSCOPE_FIRECRACKER=1): its lab test
# (tests/profile_fc_lab.rs) is skipped without it. Its build links libseccomp.
if [ "${BOOTSCOPE_FIRECRACKER:-0}" = 1 ] && [ ! -x /usr/local/bin/firecracker ]; then
    [ -f /usr/include/seccomp.h ] || need+=(libseccomp-dev)
    command -v git >/dev/null || need+=(git)
fi
if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "bootscope: missing Debian packages: ${need[*]}; run as root or: sudo apt-get install -y ${need[*]}" >&2
        exit 1
    fi
    echo "bootscope: installing ${need[*]}" >&2
    apt-get update -q >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >&2
fi
if ! command -v cargo >/dev/null; then
    if [ -x "$HOME/.cargo/bin/cargo" ]; then
        export PATH="$HOME/.cargo/bin:$PATH"
    else
        echo "bootscope: no Rust toolchain: install one with rustup (https://rustup.rs), Rust 1.85 or later" >&2
        exit 1
    fi
fi
# Firecracker built from its source outside this repository and installed
# as /usr/local/bin/firecracker (docs/lab.md): the gnu target with the
# stable toolchain (its rust-toolchain.toml names a newer one and the musl
# target); FIRECRACKER_DIR holds the source and the build.
if [ "${BOOTSCOPE_FIRECRACKER:-0}" = 1 ] && [ ! -x /usr/local/bin/firecracker ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "bootscope: BOOTSCOPE_FIRECRACKER=1 installs /usr/local/bin/firecracker: run as root" >&2
        exit 1
    fi
    fc_dir=${FIRECRACKER_DIR:-/work/fc}
    [ -d "$fc_dir/src" ] ||
        git clone -q https://github.com/firecracker-microvm/firecracker "$fc_dir/src" >&2
    echo "bootscope: building Firecracker in $fc_dir (about 15 minutes on 2 cores)" >&2
    (cd "$fc_dir/src" && RUSTUP_TOOLCHAIN=stable CARGO_TARGET_DIR="$fc_dir/target" \
        nice -n 10 cargo build --release -j2 -p firecracker >&2)
    install -m 755 "$fc_dir/target/release/firecracker" /usr/local/bin/firecracker
fi
