//! Mounting the kernel's pseudo filesystems the profiler reads (tracefs,
//! debugfs) when they are not mounted yet.

use std::ffi::CString;

/// True when `/proc/self/mounts` lists `fstype` at `target`.
pub fn is_mounted(target: &str, fstype: &str) -> bool {
    std::fs::read_to_string("/proc/self/mounts")
        .map(|m| {
            m.lines().any(|l| {
                let mut f = l.split_whitespace();
                let (_, t, ty) = (f.next(), f.next(), f.next());
                t == Some(target) && ty == Some(fstype)
            })
        })
        .unwrap_or(false)
}

/// `mount -t fstype source target`.
pub fn mount_fs(source: &str, target: &str, fstype: &str) -> std::io::Result<()> {
    let c = |s: &str| {
        CString::new(s).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))
    };
    let (src, tgt, ty) = (c(source)?, c(target)?, c(fstype)?);
    // SAFETY: three valid NUL-terminated strings that outlive the call, no
    // flags, and a null data pointer, which mount(2) accepts.
    let rc = unsafe { libc::mount(src.as_ptr(), tgt.as_ptr(), ty.as_ptr(), 0, std::ptr::null()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
