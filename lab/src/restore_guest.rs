//! The restore guest: a busybox initramfs for Debian's kernel that checks
//! itself across a snapshot and restore (docs/snapshot-schema.md, "The
//! lab's restore guest").
//!
//! Its `/init` fills a 64 MiB file on a tmpfs (its page cache) from
//! `/dev/urandom`, prints the file's SHA-256, `/proc/uptime` and 16 random
//! bytes, writes a line to its virtio disk when it has one, then writes
//! [`SNAPSHOT_MARK`] to I/O port 0x80: the snapshot point
//! (`run --snapshot-at 0x61`; the VMM stops the vCPU at that port write).
//! When the guest runs on (restored, or a boot that takes no snapshot) it
//! writes [`RESUMED_MARK`] at once (what a restore costs before the guest
//! does anything), prints the uptime again, reads the 64 MiB back (every
//! page of the buffer touched, nothing computed) and writes [`NEXT_MARK`]:
//! the window
//! from the restore to that mark is the memory's, not a checksum's (under
//! the lab's emulation a SHA-256 of 64 MiB takes seconds). Then it prints
//! the buffer's SHA-256 again, 16 new random bytes, writes a second disk
//! line and powers off. Every line it prints starts with
//! [`LINE_PREFIX`]; [`GuestReport::parse`] reads them from a console log.
//!
//! Given [`WAIT_FLAG`] on its kernel command line, the guest prints
//! `waiting for a line` right after the snapshot mark and reads a line
//! from its console before it goes on: a VMM that cannot stop a guest at a
//! port write (Cloud Hypervisor, paused from outside) snapshots it there,
//! and the restored guest goes on when that line is written; it also waits
//! a second before it powers off, for a console read from a pty.

use std::path::Path;

use crate::cpio::Builder;
use crate::guest::{static_busybox, DebianKernel};
use crate::outer::modules::modules_with_deps;
use crate::Result;
use bootscope_model::output::OutputFile;

/// The port 0x80 byte the guest writes once its buffer is filled: the
/// snapshot point.
pub const SNAPSHOT_MARK: u8 = 0x61;

/// The port 0x80 byte the guest writes once it read its buffer back: the
/// restore's next mark (its checksum, random bytes and disk line follow,
/// then it powers off).
pub const NEXT_MARK: u8 = 0x62;

/// The port 0x80 byte the guest writes first after the snapshot mark
/// (after the console line it waits for under [`WAIT_FLAG`]), before it
/// reads anything back: VMM start to this mark is the restore's own cost,
/// this mark to [`NEXT_MARK`] the guest's work.
pub const RESUMED_MARK: u8 = 0x63;

/// The kernel command line word that makes the guest wait for a console
/// line after the snapshot mark.
pub const WAIT_FLAG: &str = "bootscope.restore_wait";

/// The size of the buffer the guest fills before the mark and reads back
/// after it, in MiB.
pub const BUFFER_MIB: u32 = 64;

/// The start of every line the guest prints.
pub const LINE_PREFIX: &str = "bootscope-restore:";

/// The kernel modules the guest loads for its virtio disk (with what they
/// need, from `modules.dep`).
const DISK_MODULES: [&str; 2] = ["virtio_mmio", "virtio_blk"];

/// Where the disk lines go on the guest's first virtio disk (`/dev/vda`),
/// as byte offsets: the line written before the mark, the one after.
pub const DISK_LINE_OFFSETS: [u64; 2] = [0, 4096];

/// The `/init` script.
///
/// Every command goes through `/bin/busybox` explicitly, so the archive
/// needs no applet links. With modules in `/modules` it loads them in name
/// order and waits up to 10 s for `/dev/vda`.
fn init_script() -> String {
    let bb = "/bin/busybox";
    let p = LINE_PREFIX;
    let [before_at, after_at] = DISK_LINE_OFFSETS;
    format!(
        r#"#!/bin/sh
# bootscope's restore guest: fill a buffer, mark the snapshot point, read
# the buffer back, mark again, power off.
{bb} mount -t proc proc /proc
{bb} mount -t sysfs sysfs /sys
{bb} mount -t devtmpfs devtmpfs /dev
{bb} mount -t tmpfs -o size={tmpfs}m tmpfs /tmp
[ -c /dev/port ] || {bb} mknod /dev/port c 1 4
mark() {{ printf "$1" | {bb} dd of=/dev/port bs=1 seek=128 count=1 conv=notrunc 2>/dev/null; }}
random() {{ {bb} head -c 16 /dev/urandom | {bb} od -An -tx1 | {bb} tr -d ' \n'; }}
uptime() {{ {bb} cut -d' ' -f1 /proc/uptime; }}
disk=
if [ -d /modules ]; then
  for m in /modules/*.ko; do {bb} insmod "$m" || echo "{p} insmod $m failed"; done
  i=0
  while [ ! -b /dev/vda ] && [ $i -lt 100 ]; do {bb} sleep 0.1; i=$((i+1)); done
  [ -b /dev/vda ] && disk=/dev/vda
  echo "{p} disk ${{disk:-none}}"
fi
wait_line=
{bb} grep -qw '{wait_flag}' /proc/cmdline && wait_line=1
disk_line() {{ [ -n "$disk" ] && printf '{p} %s\n' "$2" | {bb} dd of=$disk bs=512 seek=$(($1 / 512)) conv=notrunc,fsync 2>/dev/null; }}
echo "{p} vmgenid $({bb} ls /sys/bus/acpi/drivers/vmgenid 2>/dev/null | {bb} grep -c :)"
{bb} dd if=/dev/urandom of=/tmp/buffer bs=1048576 count={mib} 2>/dev/null
echo "{p} before sum $({bb} sha256sum /tmp/buffer | {bb} cut -c1-64)"
echo "{p} before uptime $(uptime)"
r=$(random)
echo "{p} before random $r"
disk_line {before_at} "before $r"
echo "{p} mark {snap:#04x}"
mark '\{snap:03o}'
if [ -n "$wait_line" ]; then
  echo "{p} waiting for a line"
  read -r line
fi
mark '\{resumed:03o}'
echo "{p} after uptime $(uptime)"
{bb} dd if=/tmp/buffer of=/dev/null bs=1048576 2>/dev/null
echo "{p} mark {next:#04x}"
mark '\{next:03o}'
echo "{p} after sum $({bb} sha256sum /tmp/buffer | {bb} cut -c1-64)"
r=$(random)
echo "{p} after random $r"
disk_line {after_at} "after $r"
# A pty that hangs up when its VMM ends drops what was not read yet.
[ -n "$wait_line" ] && {bb} sleep 1
{bb} poweroff -f
"#,
        tmpfs = BUFFER_MIB + 16,
        mib = BUFFER_MIB,
        snap = SNAPSHOT_MARK,
        next = NEXT_MARK,
        resumed = RESUMED_MARK,
        wait_flag = WAIT_FLAG,
    )
}

/// Builds the restore guest's initramfs at `out` (no disk driver: the
/// guest writes no disk lines).
///
/// The archive is uncompressed and written atomically (temporary file and
/// rename).
pub fn build_restore_initramfs(out: &Path) -> Result<()> {
    write_archive(out, &[])
}

/// [`build_restore_initramfs`] with the virtio-mmio and virtio-blk modules
/// of `kernel` (the kernel the guest boots): with a disk (`run --disk`) the
/// guest writes a line at each of [`DISK_LINE_OFFSETS`] of it, before the
/// mark and after it.
pub fn build_restore_initramfs_with_disk(out: &Path, kernel: &DebianKernel) -> Result<()> {
    let mut modules = Vec::new();
    for root in DISK_MODULES {
        for m in modules_with_deps(kernel, root)? {
            if !modules.iter().any(|(name, _)| *name == m.name) {
                modules.push((m.name, m.contents));
            }
        }
    }
    write_archive(out, &modules)
}

/// The archive: busybox, `/init`, and `modules` (name, contents) in load
/// order under `/modules`.
fn write_archive(out: &Path, modules: &[(String, Vec<u8>)]) -> Result<()> {
    let busybox = static_busybox()?;
    let mut file = OutputFile::create_with_mode(out, 0o644)?;
    {
        let writer = std::io::BufWriter::new(file.file_mut());
        let mut cpio = Builder::new(writer);
        for dir in ["dev", "proc", "sys", "bin", "root", "tmp"] {
            cpio.add_dir(dir, 0o755)?;
        }
        cpio.add_char_device("dev/console", 5, 1, 0o600)?;
        cpio.add_file_from_host("bin/busybox", &busybox, 0o755)?;
        cpio.add_symlink("bin/sh", "busybox")?;
        if !modules.is_empty() {
            cpio.add_dir("modules", 0o755)?;
        }
        for (i, (name, contents)) in modules.iter().enumerate() {
            cpio.add_file_bytes(format!("modules/{i:02}-{name}.ko"), contents, 0o644)?;
        }
        cpio.add_file_bytes("init", init_script().as_bytes(), 0o755)?;
        cpio.finish()?;
    }
    Ok(file.commit()?)
}

/// What the guest printed on its console, line by line (`None`: not
/// printed, e.g. the run stopped at the snapshot before the `after` lines).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GuestReport {
    /// Whether the guest's vmgenid driver bound to the VM generation ID
    /// device.
    pub vmgenid: Option<bool>,
    /// `/dev/vda` when the guest found its disk, `none` when it looked and
    /// found none; `None` when it had no disk driver.
    pub disk: Option<String>,
    /// The buffer's SHA-256 (hex) after it was filled.
    pub before_sum: Option<String>,
    /// `/proc/uptime`'s first field just before the mark, in seconds.
    pub before_uptime: Option<f64>,
    /// 16 random bytes (hex) read just before the mark.
    pub before_random: Option<String>,
    /// The uptime right after the mark.
    pub after_uptime: Option<f64>,
    /// The buffer's SHA-256 read back after the mark.
    pub after_sum: Option<String>,
    /// 16 random bytes read after the buffer was read back.
    pub after_random: Option<String>,
    /// The marks the guest said it writes, in order (`0x61`, `0x62`).
    pub marks: Vec<u8>,
}

impl GuestReport {
    /// Reads the guest's lines from a console log (a boot's, a restore's,
    /// or both one after the other); other lines are ignored, and a later
    /// line replaces an earlier one of the same kind.
    pub fn parse(console: &str) -> GuestReport {
        let mut r = GuestReport::default();
        for line in console.lines() {
            let Some((_, rest)) = line.split_once(LINE_PREFIX) else {
                continue;
            };
            let rest = rest.trim();
            let (key, value) = match rest.split_once(' ') {
                Some((k, v)) if k == "before" || k == "after" => match v.split_once(' ') {
                    Some((what, value)) => (format!("{k} {what}"), value.trim()),
                    None => continue,
                },
                Some((k, v)) => (k.to_string(), v.trim()),
                None => continue,
            };
            let text = || Some(value.to_string());
            match key.as_str() {
                "vmgenid" => r.vmgenid = value.parse::<u32>().ok().map(|n| n > 0),
                "disk" => r.disk = text(),
                "before sum" => r.before_sum = text(),
                "before uptime" => r.before_uptime = value.parse().ok(),
                "before random" => r.before_random = text(),
                "after uptime" => r.after_uptime = value.parse().ok(),
                "after sum" => r.after_sum = text(),
                "after random" => r.after_random = text(),
                "mark" => {
                    if let Some(m) = value
                        .strip_prefix("0x")
                        .and_then(|h| u8::from_str_radix(h, 16).ok())
                    {
                        r.marks.push(m);
                    }
                }
                _ => {}
            }
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpio::read_entries;
    use crate::util;
    use std::fs;

    #[test]
    fn init_marks_fills_and_reads_back() {
        let s = init_script();
        assert!(s.starts_with("#!/bin/sh\n"));
        // 0x61 and 0x62 are octal 141 and 142, port 0x80 is offset 128.
        assert!(s.contains(r"mark '\141'"), "{s}");
        assert!(s.contains(r"mark '\142'"), "{s}");
        assert!(s.contains("seek=128"));
        assert!(s.contains("of=/tmp/buffer bs=1048576 count=64"));
        assert!(s.contains("mount -t tmpfs -o size=80m tmpfs /tmp"));
        // The buffer is read back between the two marks, its checksum
        // after them.
        let snap = s.find(r"mark '\141'").unwrap();
        let next = s.find(r"mark '\142'").unwrap();
        let resumed = s.find(r"mark '\143'").unwrap();
        let read_back = s.find("if=/tmp/buffer of=/dev/null").unwrap();
        let after = s.find("after sum").unwrap();
        assert!(snap < resumed && resumed < read_back, "{s}");
        assert!(read_back < next && next < after, "{s}");
        // The console line is waited for only under the flag, between the
        // snapshot mark and the resumed one.
        let wait = s.find("read -r line").unwrap();
        assert!(snap < wait && wait < resumed, "{s}");
        assert!(s.contains("grep -qw 'bootscope.restore_wait' /proc/cmdline"));
        assert!(s.trim_end().ends_with("poweroff -f"));
    }

    #[test]
    fn report_reads_the_guest_lines() {
        let console = "\
[    1.0] Run /init as init process\r
bootscope-restore: vmgenid 1\r
bootscope-restore: disk /dev/vda\r
bootscope-restore: before sum abc123\r
bootscope-restore: before uptime 3.51\r
bootscope-restore: before random 00ff\r
bootscope-restore: mark 0x61\r
bootscope-restore: after uptime 3.70
bootscope-restore: after sum abc123
[    4.0] random: crng reseeded due to virtual machine fork
bootscope-restore: after random 1234
bootscope-restore: mark 0x62
";
        let r = GuestReport::parse(console);
        assert_eq!(r.vmgenid, Some(true));
        assert_eq!(r.disk.as_deref(), Some("/dev/vda"));
        assert_eq!(r.before_sum.as_deref(), Some("abc123"));
        assert_eq!(r.after_sum.as_deref(), Some("abc123"));
        assert_eq!(r.before_uptime, Some(3.51));
        assert_eq!(r.after_uptime, Some(3.70));
        assert_eq!(r.before_random.as_deref(), Some("00ff"));
        assert_eq!(r.after_random.as_deref(), Some("1234"));
        assert_eq!(r.marks, vec![0x61, 0x62]);
        let cut =
            GuestReport::parse("bootscope-restore: before sum x\nbootscope-restore: vmgenid 0\n");
        assert_eq!(cut.vmgenid, Some(false));
        assert_eq!(cut.after_sum, None);
        assert!(cut.marks.is_empty());
    }

    #[test]
    fn restore_initramfs_contents() {
        if let Err(e) = static_busybox() {
            println!("SKIP restore_initramfs_contents: {e}");
            return;
        }
        let dir = util::temp_dir("restore-guest").unwrap();
        let out = dir.path().join("restore.cpio");
        build_restore_initramfs(&out).unwrap();
        let bytes = fs::read(&out).unwrap();
        let entries = read_entries(&bytes).unwrap();
        let get = |n: &str| entries.iter().find(|e| e.name == Path::new(n));
        assert_eq!(get("init").unwrap().data, init_script().as_bytes());
        assert_eq!(get("init").unwrap().mode, 0o100755);
        assert!(get("dev/console").is_some());
        assert!(get("modules").is_none(), "no disk driver without a disk");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn restore_initramfs_with_disk_carries_the_drivers_in_load_order() {
        if let Err(e) = static_busybox() {
            println!("SKIP restore_initramfs_with_disk: {e}");
            return;
        }
        let kernel = match crate::guest::find_debian_kernel() {
            Ok(k) => k,
            Err(e) => {
                println!("SKIP restore_initramfs_with_disk: {e}");
                return;
            }
        };
        let dir = util::temp_dir("restore-guest").unwrap();
        let out = dir.path().join("restore.cpio");
        build_restore_initramfs_with_disk(&out, &kernel).unwrap();
        let bytes = fs::read(&out).unwrap();
        let names: Vec<String> = read_entries(&bytes)
            .unwrap()
            .iter()
            .filter_map(|e| e.name.to_str()?.strip_prefix("modules/").map(String::from))
            .collect();
        let at = |m: &str| names.iter().position(|n| n.ends_with(&format!("-{m}.ko")));
        // Debian builds them as modules; a kernel with one built in has
        // none to carry.
        if let (Some(mmio), Some(blk), Some(core)) =
            (at("virtio_mmio"), at("virtio_blk"), at("virtio"))
        {
            assert!(core < mmio && core < blk, "{names:?}");
        }
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(sorted, names, "the guest loads them in name order");
    }
}
