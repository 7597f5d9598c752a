//! Mounting the kernel's pseudo filesystems the profiler reads (tracefs,
//! debugfs) when they are not mounted yet.

use std::ffi::CString;

/// True when `/proc/self/mounts` lists `fstype` at `target`.
pub fn is_mounted(target: &str, fstype: &str) -> bool {
    crate::pseudo::read("/proc/self/mounts")
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
    mount_flags(Some(source), target, Some(fstype), 0, None)
}

/// mount(2) with flags and options; `None` for an absent source, type or
/// options (as a propagation change needs).
pub fn mount_flags(
    source: Option<&str>,
    target: &str,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> std::io::Result<()> {
    let c = |s: &str| {
        CString::new(s).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))
    };
    let opt = |s: Option<&str>| s.map(c).transpose();
    let (src, tgt, ty, data) = (opt(source)?, c(target)?, opt(fstype)?, opt(data)?);
    let ptr = |s: &Option<CString>| s.as_ref().map_or(std::ptr::null(), |s| s.as_ptr());
    // SAFETY: every pointer is null or a NUL-terminated string that
    // outlives the call; mount(2) accepts null source, type and data.
    let rc = unsafe { libc::mount(ptr(&src), tgt.as_ptr(), ptr(&ty), flags, ptr(&data).cast()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
