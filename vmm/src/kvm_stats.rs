//! KVM's own statistics through the binary stats interface
//! (`KVM_GET_STATS_FD`, Linux 5.14+): the independent source bootscope's
//! counts are checked against. The format is read by
//! `bootscope_model::kvm_stats`; this module opens the files.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::FileExt;

pub use bootscope_model::kvm_stats::accumulate;

/// `_IO(KVMIO, 0xce)`.
const KVM_GET_STATS_FD: libc::c_ulong = 0xaece;

/// An open stats file of a VM or vCPU.
#[derive(Debug)]
pub struct StatsFd {
    file: File,
}

impl StatsFd {
    /// Opens the stats of a KVM VM or vCPU file descriptor.
    pub fn open(fd: &impl AsRawFd) -> std::io::Result<Self> {
        // SAFETY: KVM_GET_STATS_FD takes no argument and returns a new fd or
        // -1; the fd we pass is valid for the duration of the call.
        let ret = unsafe { libc::ioctl(fd.as_raw_fd(), KVM_GET_STATS_FD as _, 0) };
        if ret < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: ret is a fresh descriptor owned by nobody else.
        let file = unsafe { File::from_raw_fd(ret) };
        Ok(Self { file })
    }

    /// Reads every scalar statistic (first element of arrays) by name.
    pub fn read(&self) -> std::io::Result<BTreeMap<String, u64>> {
        Ok(bootscope_model::kvm_stats::read_all(|off, buf| {
            self.file.read_exact_at(buf, off)
        })?)
    }
}
