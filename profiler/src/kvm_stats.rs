//! KVM's own exit statistics, the independent cross-check of the
//! tracepoint counts.
//!
//! Two ways to read them, tried in this order:
//!
//! 1. debugfs: `kvm/<pid>-<fd>/exits`, one directory per VM (debugfs is
//!    mounted at /sys/kernel/debug if needed). Kernels in lockdown mode
//!    refuse these reads (EPERM).
//! 2. KVM's binary statistics of each vCPU: the stats files
//!    (`KVM_GET_STATS_FD`) the target itself has open, copied with
//!    `pidfd_getfd(2)`. KVM answers vCPU ioctls only to the VM's own
//!    process, so the profiler cannot open them itself; bootscope's VMM
//!    keeps them open, QEMU does not. A copy keeps the VM's `struct kvm`
//!    alive, so the final count stays readable after the target closed its
//!    VM; it is closed as soon as the target's own descriptor is gone.
//!
//! A VM's debugfs directory disappears with the VM. So once a VM of a
//! followed process shows up there, its VM descriptor (the directory is
//! named `<pid>-<fd>`) is copied with `pidfd_getfd(2)` as well: the copy
//! keeps the VM, and its directory, until the profiler has read the final
//! count (when the process ends, or at the end of profiling). Until the
//! first VM is held, debugfs is looked at every tick; after that only at
//! samples, so a profiled guest does not pay for a read every 10 ms.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Where debugfs is normally mounted.
pub const DEBUGFS: &str = "/sys/kernel/debug";

/// The `exits` value of every VM of the given processes below `kvm_dir`
/// (`<debugfs>/kvm`), keyed `<tgid>-<fd>`. Unreadable files are skipped.
pub fn read_debugfs_exits(kvm_dir: &Path, pids: &[u32]) -> BTreeMap<String, u64> {
    read_debugfs_stat(kvm_dir, pids, "exits")
}

/// KVM's guest page-fault statistics, in this order: `pf_fixed` (faults
/// that mapped a page), `pf_taken` (every fault KVM's MMU handled).
pub const FAULT_STATS: [&str; 2] = ["pf_fixed", "pf_taken"];

/// One statistic (a file of a VM's directory, vCPUs summed) of every VM of
/// the given processes below `kvm_dir`, keyed `<tgid>-<fd>`. Unreadable
/// files are skipped.
pub fn read_debugfs_stat(kvm_dir: &Path, pids: &[u32], stat: &str) -> BTreeMap<String, u64> {
    read_stat_of(kvm_dir, pids, stat, &mut BTreeMap::new())
}

/// The process (tgid) of thread `tid`, from `/proc/TID/status`.
fn tgid_of(tid: u32) -> Option<u32> {
    let s = crate::pseudo::read(format!("/proc/{tid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
}

/// [`read_debugfs_stat`], with `owners` remembering the process of each
/// directory's thread. KVM names a VM's directory `<tid>-<fd>` after the
/// thread that created the VM, which is not the process's main thread in
/// every VMM (Cloud Hypervisor creates it on its `vmm` thread); the thread
/// may have ended by the final read, hence the memory.
fn read_stat_of(
    kvm_dir: &Path,
    pids: &[u32],
    stat: &str,
    owners: &mut BTreeMap<u32, u32>,
) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(kvm_dir).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some((tid, fd)) = name
            .split_once('-')
            .and_then(|(p, f)| Some((p.parse::<u32>().ok()?, f)))
        else {
            continue;
        };
        let tgid = if pids.contains(&tid) {
            tid
        } else if let Some(&t) = owners.get(&tid) {
            t
        } else {
            let Some(t) = tgid_of(tid) else { continue };
            owners.insert(tid, t);
            t
        };
        if !pids.contains(&tgid) {
            continue;
        }
        if let Some(v) = crate::pseudo::read(e.path().join(stat))
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            out.insert(format!("{tgid}-{fd}"), v);
        }
    }
    out
}

/// debugfs's `kvm` directory if its statistics can be read, mounting
/// debugfs at /sys/kernel/debug if it is not mounted. Err says why not.
pub fn debugfs_kvm_dir() -> Result<PathBuf, String> {
    let dir = Path::new(DEBUGFS).join("kvm");
    if !dir.is_dir() && !crate::mount::is_mounted(DEBUGFS, "debugfs") {
        crate::mount::mount_fs("debugfs", DEBUGFS, "debugfs").map_err(|e| {
            format!("debugfs is not mounted and mounting it failed ({e}); mount -t debugfs none {DEBUGFS}")
        })?;
    }
    if !dir.is_dir() {
        return Err(format!(
            "{} does not exist (KVM not loaded?)",
            dir.display()
        ));
    }
    // The all-VMs total tells whether reads are allowed at all.
    match crate::pseudo::read(dir.join("exits")) {
        Ok(_) => Ok(dir),
        Err(e) => Err(format!(
            "{} is not readable ({e}; a kernel in lockdown mode refuses debugfs reads)",
            dir.join("exits").display()
        )),
    }
}

/// Finds the `exits` statistic's data offset in a binary stats file.
fn exits_offset(file: &File) -> std::io::Result<Option<u64>> {
    Ok(bootscope_model::kvm_stats::offset_of(
        |off, buf| file.read_exact_at(buf, off),
        "exits",
    )?)
}

/// A VM of a followed process kept alive by a copy of its descriptor, so
/// that its debugfs directory outlives the process until its final count
/// has been read.
#[derive(Debug)]
struct HeldVm {
    tgid: u32,
    _file: File,
}

/// Copies the VM descriptor behind a debugfs directory `<pid>-<fd>`, if
/// that descriptor still is that VM.
fn hold_vm(name: &str) -> std::io::Result<HeldVm> {
    let bad = || std::io::Error::other(format!("{name} is not a <pid>-<fd> VM directory"));
    let (pid, fd) = name.split_once('-').ok_or_else(bad)?;
    let (tgid, fd): (u32, u32) = (
        pid.parse().map_err(|_| bad())?,
        fd.parse().map_err(|_| bad())?,
    );
    let link = std::fs::read_link(format!("/proc/{tgid}/fd/{fd}"))?;
    if !link.to_string_lossy().starts_with("anon_inode:kvm-vm") {
        return Err(std::io::Error::other(format!(
            "fd {fd} of pid {tgid} is {} now, not its VM",
            link.display()
        )));
    }
    Ok(HeldVm {
        tgid,
        _file: copy_fd(tgid, fd)?,
    })
}

/// One vCPU of a followed process, through its stats file.
#[derive(Debug)]
struct VcpuStats {
    tgid: u32,
    fd: u32,
    link: String,
    file: File,
    offset: u64,
    last: u64,
}

impl VcpuStats {
    fn read(&mut self) {
        let mut v = [0u8; 8];
        if self.file.read_exact_at(&mut v, self.offset).is_ok() {
            self.last = u64::from_le_bytes(v);
        }
    }
}

/// `pidfd_open` + `pidfd_getfd`: a copy of another process's descriptor.
fn copy_fd(tgid: u32, fd: u32) -> std::io::Result<File> {
    let pidfd = crate::launch::pidfd_open(tgid)?;
    // SAFETY: pidfd_getfd takes an open pidfd, a descriptor number in that
    // process, and flags; it returns a new fd or -1.
    let copy = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd as i32, 0) };
    if copy < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: pidfd_getfd succeeded: a fresh descriptor owned by nobody else.
    Ok(unsafe { File::from_raw_fd(copy as i32) })
}

/// The vCPU stats files a process has open: (fd number, link text).
fn vcpu_fds(tgid: u32) -> Vec<(u32, String)> {
    let dir = format!("/proc/{tgid}/fd");
    std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let fd: u32 = e.file_name().to_str()?.parse().ok()?;
            let link = std::fs::read_link(e.path()).ok()?;
            let link = link.to_string_lossy().into_owned();
            link.starts_with("anon_inode:kvm-vcpu-stats")
                .then_some((fd, link))
        })
        .collect()
}

/// Reads KVM's exit counts of the followed processes' VMs.
#[derive(Debug)]
pub struct KvmStatsReader {
    debugfs: Result<PathBuf, String>,
    debugfs_values: BTreeMap<String, u64>,
    /// [`FAULT_STATS`] of each VM, by directory name, read with `exits`.
    debugfs_faults: BTreeMap<String, [u64; 2]>,
    /// The process of each thread that named a VM directory.
    owners: BTreeMap<u32, u32>,
    vcpus: Vec<VcpuStats>,
    /// Counts of vCPUs whose stats file was closed.
    closed_total: u64,
    closed_count: usize,
    /// The same by process.
    closed_by_tgid: BTreeMap<u32, u64>,
    last_error: Option<String>,
    /// VMs kept alive for their final debugfs count.
    held_vms: Vec<HeldVm>,
    /// Every VM ever held (by directory name): a VM shows up in debugfs
    /// just before its descriptor is installed, so a first try can fail.
    ever_held: std::collections::BTreeSet<String>,
    /// Look for vCPU files only when told ([`Self::request_scan`]): a VMM
    /// profiling itself says when its vCPUs exist. A scan costs a readlink
    /// per open file (the profiler's own maps and programs included: about
    /// seventy), tens of milliseconds where every instruction is emulated.
    scan_on_request: bool,
    scan_requested: bool,
}

impl Default for KvmStatsReader {
    fn default() -> Self {
        Self::new()
    }
}

impl KvmStatsReader {
    pub fn new() -> Self {
        Self::with_debugfs(debugfs_kvm_dir())
    }

    fn with_debugfs(debugfs: Result<PathBuf, String>) -> Self {
        Self {
            debugfs,
            debugfs_values: BTreeMap::new(),
            debugfs_faults: BTreeMap::new(),
            owners: BTreeMap::new(),
            vcpus: Vec::new(),
            closed_total: 0,
            closed_count: 0,
            closed_by_tgid: BTreeMap::new(),
            last_error: None,
            held_vms: Vec::new(),
            ever_held: std::collections::BTreeSet::new(),
            scan_on_request: false,
            scan_requested: false,
        }
    }

    /// A reader of the statistics files only, for a VMM profiling itself:
    /// copies of its own files keep the final counts readable after the VM
    /// is gone, so nothing needs reading between samples (debugfs would
    /// have to be read every few milliseconds not to miss the last exits).
    /// Its files are looked for only when [`Self::request_scan`] says
    /// they exist.
    pub fn stats_fds_only() -> Self {
        let mut r = Self::with_debugfs(Err(
            "not used: the VMM's own statistics files are read".into()
        ));
        r.scan_on_request = true;
        r
    }

    /// The next poll looks for new vCPU files (a VMM profiling itself calls
    /// this once its vCPUs exist).
    pub fn request_scan(&mut self) {
        self.scan_requested = true;
    }

    /// Whether counts must be read often (not only at samples): debugfs
    /// loses a VM's counts when the VM goes, and until a VM shows up it is
    /// looked for often so a short-lived one is not missed.
    pub fn needs_frequent_reads(&self) -> bool {
        match &self.debugfs {
            // Until a VM is held: its counts would go with it.
            Ok(_) => self.held_vms.is_empty(),
            Err(_) => self.total().is_none() && !self.scan_on_request,
        }
    }

    /// `debugfs` or `stats_fd`.
    pub fn method(&self) -> &'static str {
        if self.debugfs.is_ok() {
            "debugfs"
        } else {
            "stats_fd"
        }
    }

    /// Reads current values. `rescan` looks for new (and closed) vCPUs in
    /// the processes' descriptor tables, which costs a readlink per open
    /// file: do it less often than plain reads.
    pub fn poll(&mut self, tgids: &[u32], rescan: bool) {
        if let Ok(dir) = &self.debugfs {
            for (k, v) in read_stat_of(dir, tgids, "exits", &mut self.owners) {
                if !self.ever_held.contains(&k) {
                    match hold_vm(&k) {
                        Ok(h) => {
                            self.ever_held.insert(k.clone());
                            self.held_vms.push(h);
                        }
                        // Tried again at the next read.
                        Err(e) => self.last_error = Some(format!("VM {k}: {e}")),
                    }
                }
                let e = self.debugfs_values.entry(k).or_default();
                *e = (*e).max(v);
            }
            self.read_debugfs_faults(tgids);
            return;
        }
        for v in &mut self.vcpus {
            v.read();
        }
        let rescan = if self.scan_on_request {
            std::mem::take(&mut self.scan_requested)
        } else {
            rescan
        };
        if !rescan {
            return;
        }
        let own = std::process::id();
        for &tgid in tgids {
            let mut live = vcpu_fds(tgid);
            if tgid == own {
                // Profiling ourselves: our copies are in the same table.
                live.retain(|(fd, _)| !self.vcpus.iter().any(|v| v.file.as_raw_fd() as u32 == *fd));
            }
            // Close what the target closed (after a last read above).
            let mut i = 0;
            while i < self.vcpus.len() {
                let v = &self.vcpus[i];
                if v.tgid == tgid && !live.iter().any(|(fd, l)| *fd == v.fd && *l == v.link) {
                    let gone = self.vcpus.swap_remove(i);
                    self.closed_total += gone.last;
                    self.closed_count += 1;
                    *self.closed_by_tgid.entry(tgid).or_default() += gone.last;
                } else {
                    i += 1;
                }
            }
            for (fd, link) in live {
                if self
                    .vcpus
                    .iter()
                    .any(|v| v.tgid == tgid && v.fd == fd && v.link == link)
                {
                    continue;
                }
                let opened = copy_fd(tgid, fd).and_then(|file| {
                    let offset = exits_offset(&file)?.ok_or_else(|| {
                        std::io::Error::other("KVM's statistics have no \"exits\" entry")
                    })?;
                    Ok((file, offset))
                });
                match opened {
                    Ok((file, offset)) => {
                        let mut v = VcpuStats {
                            tgid,
                            fd,
                            link,
                            file,
                            offset,
                            last: 0,
                        };
                        v.read();
                        self.vcpus.push(v);
                    }
                    Err(e) => {
                        self.last_error = Some(format!("vCPU fd {fd} of pid {tgid}: {e}"));
                    }
                }
            }
        }
    }

    /// Closes every vCPU stats file of a process that ended (after reading
    /// it one last time).
    pub fn release(&mut self, tgid: u32) {
        if let Ok(dir) = &self.debugfs {
            // The final counts, while the copies still keep the VMs.
            for (k, v) in read_stat_of(dir, &[tgid], "exits", &mut self.owners) {
                let e = self.debugfs_values.entry(k).or_default();
                *e = (*e).max(v);
            }
            self.read_debugfs_faults(&[tgid]);
            self.held_vms.retain(|h| h.tgid != tgid);
        }
        let mut i = 0;
        while i < self.vcpus.len() {
            if self.vcpus[i].tgid == tgid {
                let mut gone = self.vcpus.swap_remove(i);
                gone.read();
                self.closed_total += gone.last;
                self.closed_count += 1;
                *self.closed_by_tgid.entry(tgid).or_default() += gone.last;
            } else {
                i += 1;
            }
        }
    }

    /// Reads [`FAULT_STATS`] of the processes' VMs from debugfs (counts
    /// only grow: a VM already gone keeps its last values).
    fn read_debugfs_faults(&mut self, tgids: &[u32]) {
        let Ok(dir) = &self.debugfs else { return };
        for (i, stat) in FAULT_STATS.iter().enumerate() {
            for (k, v) in read_stat_of(dir, tgids, stat, &mut self.owners) {
                let e = &mut self.debugfs_faults.entry(k).or_default()[i];
                *e = (*e).max(v);
            }
        }
    }

    /// KVM's [`FAULT_STATS`] summed over the VMs of process `tgid` (every
    /// process: None), if any was read (debugfs only: the vCPU statistics
    /// files are read for `exits` alone).
    pub fn faults_of(&self, tgid: Option<u32>) -> Option<[u64; 2]> {
        let prefix = tgid.map(|t| format!("{t}-"));
        let mut mine = self
            .debugfs_faults
            .iter()
            .filter(|(k, _)| prefix.as_ref().is_none_or(|p| k.starts_with(p)))
            .map(|(_, v)| *v)
            .peekable();
        mine.peek()?;
        Some(mine.fold([0, 0], |a, v| [a[0] + v[0], a[1] + v[1]]))
    }

    /// KVM's exit count of one process's VMs, if any was seen.
    pub fn total_of(&self, tgid: u32) -> Option<u64> {
        match &self.debugfs {
            Ok(_) => {
                let prefix = format!("{tgid}-");
                let mine: Vec<u64> = self
                    .debugfs_values
                    .iter()
                    .filter(|(k, _)| k.starts_with(&prefix))
                    .map(|(_, &v)| v)
                    .collect();
                (!mine.is_empty()).then(|| mine.iter().sum())
            }
            Err(_) => {
                let mut mine: Vec<u64> = self
                    .vcpus
                    .iter()
                    .filter(|v| v.tgid == tgid)
                    .map(|v| v.last)
                    .collect();
                mine.extend(self.closed_by_tgid.get(&tgid));
                (!mine.is_empty()).then(|| mine.iter().sum())
            }
        }
    }

    /// Whether a VM (or a vCPU statistics file) of process `tgid` is held,
    /// so that its final counts stay readable.
    pub fn holds(&self, tgid: u32) -> bool {
        match &self.debugfs {
            Ok(_) => self.held_vms.iter().any(|h| h.tgid == tgid),
            Err(_) => self.vcpus.iter().any(|v| v.tgid == tgid),
        }
    }

    /// Drops what was read of one process's VMs (it ended and its final
    /// counts were taken).
    pub fn forget(&mut self, tgid: u32) {
        let prefix = format!("{tgid}-");
        self.debugfs_values.retain(|k, _| !k.starts_with(&prefix));
        self.debugfs_faults.retain(|k, _| !k.starts_with(&prefix));
        self.ever_held.retain(|k| !k.starts_with(&prefix));
        self.held_vms.retain(|h| h.tgid != tgid);
        self.vcpus.retain(|v| v.tgid != tgid);
        self.closed_by_tgid.remove(&tgid);
        self.owners.retain(|_, t| *t != tgid);
    }

    /// KVM's exit count over everything seen, if anything was seen.
    pub fn total(&self) -> Option<u64> {
        match &self.debugfs {
            Ok(_) => (!self.debugfs_values.is_empty()).then(|| self.debugfs_values.values().sum()),
            Err(_) => (self.closed_count > 0 || !self.vcpus.is_empty())
                .then(|| self.closed_total + self.vcpus.iter().map(|v| v.last).sum::<u64>()),
        }
    }

    /// What was read and how, for `sources[]`: (status, detail).
    pub fn describe(&self) -> (&'static str, String) {
        match &self.debugfs {
            Ok(dir) if self.debugfs_values.is_empty() => (
                "missing",
                format!(
                    "no VM of the target's processes seen under {}",
                    dir.display()
                ),
            ),
            Ok(dir) => (
                "attached",
                format!(
                    "exits of VM(s) {} under {}{}",
                    self.debugfs_values
                        .keys()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", "),
                    dir.display(),
                    if self
                        .debugfs_values
                        .keys()
                        .all(|k| self.ever_held.contains(k))
                    {
                        "; each VM held (pidfd_getfd) until its final count was read".into()
                    } else {
                        format!(
                            "; a VM could not be held for its final count, which may miss \
                             its last exits ({})",
                            self.last_error.as_deref().unwrap_or("no error recorded")
                        )
                    }
                ),
            ),
            Err(why) => {
                let n = self.vcpus.len() + self.closed_count;
                if n > 0 {
                    (
                        "fallback",
                        format!(
                            "debugfs unusable ({why}); read the target's own KVM_GET_STATS_FD files of {n} vCPU(s) through pidfd_getfd"
                        ),
                    )
                } else {
                    (
                        "missing",
                        format!(
                            "debugfs unusable ({why}), and the target keeps no vCPU statistics file (KVM_GET_STATS_FD) open to copy (KVM opens them only for the VM's own process){}",
                            self.last_error
                                .as_ref()
                                .map(|e| format!(" (last error: {e})"))
                                .unwrap_or_default()
                        ),
                    )
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vm_held_on_a_later_try_counts_as_held() {
        let mut r = KvmStatsReader::with_debugfs(Ok(PathBuf::from("/nonexistent/kvm")));
        r.debugfs_values.insert("96-4".into(), 1163);
        // The first try fell in the window before the descriptor existed.
        r.last_error = Some("VM 96-4: No such file or directory".into());
        let (_, detail) = r.describe();
        assert!(detail.contains("could not be held"), "{detail}");
        assert!(detail.contains("No such file"), "{detail}");
        r.ever_held.insert("96-4".into());
        let (status, detail) = r.describe();
        assert_eq!(status, "attached");
        assert!(detail.contains("each VM held"), "{detail}");
        // Until a VM is held, debugfs is read every tick.
        let fresh = KvmStatsReader::with_debugfs(Ok(PathBuf::from("/nonexistent/kvm")));
        assert!(fresh.needs_frequent_reads());
    }

    #[test]
    fn fault_statistics_are_summed_per_process_and_kept_at_their_last_read() {
        let d = std::env::temp_dir().join(format!("bootscope-kvmfaults-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let write = |name: &str, fixed: u64, taken: u64| {
            std::fs::create_dir_all(d.join(name)).unwrap();
            std::fs::write(d.join(name).join("exits"), "9\n").unwrap();
            std::fs::write(d.join(name).join("pf_fixed"), format!("{fixed}\n")).unwrap();
            std::fs::write(d.join(name).join("pf_taken"), format!("{taken}\n")).unwrap();
        };
        write("100-11", 30, 35);
        write("100-12", 4, 5);
        write("200-11", 1000, 1001);
        let mut r = KvmStatsReader::with_debugfs(Ok(d.clone()));
        r.poll(&[100], false);
        assert_eq!(r.faults_of(Some(100)), Some([34, 40]));
        // Only the followed processes' VMs were read.
        assert_eq!(r.faults_of(Some(200)), None);
        assert_eq!(r.faults_of(None), Some([34, 40]));
        // The final read at the process's end; a VM gone by then keeps
        // what was read of it.
        write("100-11", 50, 56);
        std::fs::remove_dir_all(d.join("100-12")).unwrap();
        r.release(100);
        assert_eq!(r.faults_of(Some(100)), Some([54, 61]));
        r.forget(100);
        assert_eq!(r.faults_of(None), None);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn sums_only_the_target_vms() {
        let d = std::env::temp_dir().join(format!("bootscope-kvmstats-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        for (name, exits) in [("100-11", "5\n"), ("100-12", "7\n"), ("200-11", "1000\n")] {
            std::fs::create_dir_all(d.join(name)).unwrap();
            std::fs::write(d.join(name).join("exits"), exits).unwrap();
        }
        std::fs::create_dir_all(d.join("not-a-vm")).unwrap();
        let got = read_debugfs_exits(&d, &[100]);
        assert_eq!(got.values().sum::<u64>(), 12);
        assert_eq!(got.len(), 2);
        assert!(read_debugfs_exits(&d, &[300]).is_empty());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_vm_named_after_another_thread_counts_for_its_process() {
        let d = std::env::temp_dir().join(format!("bootscope-kvmtid-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let own = std::process::id();
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() } as u32).unwrap();
            done_rx.recv().unwrap();
        });
        let tid = rx.recv().unwrap();
        let name = format!("{tid}-9");
        std::fs::create_dir_all(d.join(&name)).unwrap();
        std::fs::write(d.join(&name).join("exits"), "5\n").unwrap();
        std::fs::write(d.join(&name).join("pf_fixed"), "3\n").unwrap();
        std::fs::write(d.join(&name).join("pf_taken"), "4\n").unwrap();
        let got = read_debugfs_exits(&d, &[own]);
        assert_eq!(got.get(&format!("{own}-9")), Some(&5), "{got:?}");
        let mut r = KvmStatsReader::with_debugfs(Ok(d.clone()));
        r.poll(&[own], false);
        assert_eq!(r.faults_of(Some(own)), Some([3, 4]));
        // The thread ends; the final read still finds its VM's process.
        done_tx.send(()).unwrap();
        t.join().unwrap();
        std::fs::write(d.join(&name).join("pf_fixed"), "8\n").unwrap();
        r.release(own);
        assert_eq!(r.faults_of(Some(own)), Some([8, 4]));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn finds_exits_in_a_stats_layout() {
        // Header: flags, name_size 8, 2 descriptors, id at 24, descriptors
        // at 24, data at 72.
        let mut b = vec![0u8; 24];
        for (off, v) in [(4, 8u32), (8, 2), (12, 24), (16, 24), (20, 72)] {
            b[off..off + 4].copy_from_slice(&v.to_le_bytes());
        }
        for (name, offset) in [(&b"halt\0\0\0\0"[..], 0u32), (&b"exits\0\0\0"[..], 8)] {
            let mut d = vec![0u8; 16];
            d[6..8].copy_from_slice(&1u16.to_le_bytes());
            d[8..12].copy_from_slice(&offset.to_le_bytes());
            b.extend_from_slice(&d);
            b.extend_from_slice(name);
        }
        b.extend_from_slice(&3u64.to_le_bytes());
        b.extend_from_slice(&1161u64.to_le_bytes());
        let path = std::env::temp_dir().join(format!("bootscope-stats-{}", std::process::id()));
        std::fs::write(&path, &b).unwrap();
        let f = File::open(&path).unwrap();
        let off = exits_offset(&f).unwrap().unwrap();
        assert_eq!(off, 80);
        let mut v = [0u8; 8];
        f.read_exact_at(&mut v, off).unwrap();
        assert_eq!(u64::from_le_bytes(v), 1161);
        std::fs::remove_file(&path).unwrap();
    }
}
