//! Launching a command held before `exec`, so the collector follows it from
//! its very first instruction: the child forks, waits on a pipe, and only
//! execs once [`HeldCommand::release`] is called (after the collector has
//! put its pid in the followed set).
//!
//! `std::process::Command` cannot do this: its `spawn` waits until the child
//! has exec'd. So this forks by hand, with everything the child needs
//! (program path, argv, envp) prepared before the fork, and only
//! async-signal-safe calls after it.
//!
//! The child leads a process group of its own (as `CommandExt::
//! process_group(0)` would make it), so that whatever it starts (a script's
//! QEMU) can be signalled and ended with it: [`HeldCommand::signal_group`],
//! [`bootscope_model::proc::end_group`].

use std::ffi::{CString, OsString};
use std::io::{Error, ErrorKind, Result};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitStatus;

/// Exit status of a child whose exec failed.
pub const EXEC_FAILED: i32 = 127;

/// A started child that has not exec'd yet (or has, once released).
pub struct HeldCommand {
    pid: libc::pid_t,
    release: Option<OwnedFd>,
    status: Option<ExitStatus>,
    /// The kernel's fault counts of the ended child (see [`Self::faults`]).
    faults: Option<ChildFaults>,
    /// Its counts when it was released (see [`Self::held_faults`]).
    held_faults: Option<ChildFaults>,
}

/// The kernel's page-fault counts of an ended child, every thread's summed
/// (`wait4`'s rusage: the `min_flt`/`maj_flt` that `/proc/PID/stat` shows
/// while the process lives).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChildFaults {
    pub minflt: u64,
    pub majflt: u64,
}

/// `program` as exec would find it: a path with a slash as is, else the
/// first executable file of that name in $PATH.
pub fn resolve_program(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        return Some(PathBuf::from(program));
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| OsString::from("/usr/bin:/bin"));
    bootscope_model::proc::find_in_path(program, &path)
}

/// `min_flt` and `maj_flt` of process `pid` (fields 10 and 12 of
/// `/proc/PID/stat`).
fn stat_faults(pid: u32) -> Option<ChildFaults> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name, which may hold spaces: state first.
    let rest: Vec<&str> = s.rsplit_once(") ")?.1.split_whitespace().collect();
    Some(ChildFaults {
        minflt: rest.get(7)?.parse().ok()?,
        majflt: rest.get(9)?.parse().ok()?,
    })
}

fn cstring(b: &[u8]) -> Result<CString> {
    CString::new(b).map_err(|e| Error::new(ErrorKind::InvalidInput, e))
}

impl HeldCommand {
    /// Forks `argv[0]` with arguments `argv[1..]`, stdio and environment
    /// inherited, held before exec.
    pub fn spawn(argv: &[String]) -> Result<Self> {
        let program = argv
            .first()
            .ok_or_else(|| Error::new(ErrorKind::InvalidInput, "no command given"))?;
        let path = resolve_program(program).ok_or_else(|| {
            Error::new(
                ErrorKind::NotFound,
                format!("{program}: command not found in PATH"),
            )
        })?;
        let c_path = cstring(path.as_os_str().as_bytes())?;
        let c_args: Vec<CString> = argv
            .iter()
            .map(|a| cstring(a.as_bytes()))
            .collect::<Result<_>>()?;
        let c_env: Vec<CString> = std::env::vars_os()
            .map(|(k, v)| {
                let mut kv = k.as_bytes().to_vec();
                kv.push(b'=');
                kv.extend_from_slice(v.as_bytes());
                cstring(&kv)
            })
            .collect::<Result<_>>()?;
        let mut arg_ptrs: Vec<*const libc::c_char> = c_args.iter().map(|c| c.as_ptr()).collect();
        arg_ptrs.push(std::ptr::null());
        let mut env_ptrs: Vec<*const libc::c_char> = c_env.iter().map(|c| c.as_ptr()).collect();
        env_ptrs.push(std::ptr::null());

        let mut fds = [0i32; 2];
        // SAFETY: fds is a valid array of two ints for pipe2 to fill.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(Error::last_os_error());
        }
        // SAFETY: pipe2 succeeded, so both descriptors are open and owned by
        // nobody else.
        let (read_end, write_end) =
            unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let (r, w) = (read_end.as_raw_fd(), write_end.as_raw_fd());

        // SAFETY: fork(2) has no memory preconditions; the child below only
        // makes async-signal-safe calls (close, read, execve, _exit) on data
        // prepared before the fork, as required in a multithreaded process.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: in the child: w and r are open descriptors, byte is a
            // valid one-byte buffer, c_path/arg_ptrs/env_ptrs are
            // NUL-terminated strings and NULL-terminated arrays that live
            // until execve replaces the process; _exit never returns.
            // setpgid and signal are async-signal-safe.
            unsafe {
                // A process group of its own (the parent does the same, so
                // that it holds whichever runs first).
                libc::setpgid(0, 0);
                // The parent's handlers (which write to its signal pipe) are
                // not this process's: until exec, SIGINT and SIGTERM kill it.
                libc::signal(libc::SIGINT, libc::SIG_DFL);
                libc::signal(libc::SIGTERM, libc::SIG_DFL);
                libc::close(w);
                let mut byte = 0u8;
                loop {
                    let n = libc::read(r, (&mut byte as *mut u8).cast(), 1);
                    if n == 1 {
                        break;
                    }
                    if n == 0 || *libc::__errno_location() != libc::EINTR {
                        // The profiler went away without releasing us.
                        libc::_exit(EXEC_FAILED);
                    }
                }
                libc::close(r);
                libc::execve(c_path.as_ptr(), arg_ptrs.as_ptr(), env_ptrs.as_ptr());
                libc::_exit(EXEC_FAILED);
            }
        }
        drop(read_end);
        // SAFETY: setpgid on our own child, which has not exec'd (it waits
        // for the release), with plain integers.
        unsafe {
            libc::setpgid(pid, pid);
        }
        Ok(Self {
            pid,
            release: Some(write_end),
            status: None,
            faults: None,
            held_faults: None,
        })
    }

    /// The child's pid (already valid before release).
    pub fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// Lets the child exec.
    pub fn release(&mut self) -> Result<()> {
        if let Some(fd) = self.release.take() {
            // What it took between the fork and now, waiting on the pipe.
            self.held_faults = stat_faults(self.pid as u32);
            let byte = 1u8;
            // SAFETY: fd is open (owned here) and byte is a valid one-byte
            // buffer.
            let n = unsafe { libc::write(fd.as_raw_fd(), (&byte as *const u8).cast(), 1) };
            if n != 1 {
                return Err(Error::last_os_error());
            }
        }
        Ok(())
    }

    fn wait_flags(&mut self, flags: i32) -> Result<Option<ExitStatus>> {
        if let Some(s) = self.status {
            return Ok(Some(s));
        }
        let mut status = 0i32;
        // SAFETY: rusage is plain old data; all zeroes is a valid value.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        loop {
            // SAFETY: wait4 on our own child with valid out pointers.
            let rc = unsafe { libc::wait4(self.pid, &mut status, flags, &mut usage) };
            if rc == self.pid {
                let s = ExitStatus::from_raw(status);
                self.status = Some(s);
                self.faults = Some(ChildFaults {
                    minflt: usage.ru_minflt as u64,
                    majflt: usage.ru_majflt as u64,
                });
                return Ok(Some(s));
            }
            if rc == 0 {
                return Ok(None);
            }
            let e = Error::last_os_error();
            if e.kind() != ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// The exit status if the child has ended; None while it runs.
    pub fn try_wait(&mut self) -> Result<Option<ExitStatus>> {
        self.wait_flags(libc::WNOHANG)
    }

    /// Releases the child if needed and waits for it to end.
    pub fn wait(&mut self) -> Result<ExitStatus> {
        self.release()?;
        self.wait_flags(0)?
            .ok_or_else(|| Error::other("waitpid returned no status"))
    }

    /// The kernel's fault counts of the child over its life, once it was
    /// reaped (its children's too, if it waited for any).
    pub fn faults(&self) -> Option<ChildFaults> {
        self.faults
    }

    /// The kernel's fault counts of the child at its release, before its
    /// exec: the faults of its start after the fork, taken while the
    /// profiler was setting up to follow it, so not in its counts. None if
    /// `/proc/PID/stat` could not be read or it was never released.
    pub fn held_faults(&self) -> Option<ChildFaults> {
        self.held_faults
    }

    /// The child's process group: its own pid.
    pub fn pgid(&self) -> u32 {
        self.pid as u32
    }

    /// Sends a signal to every process of the child's group; false when
    /// none is left.
    pub fn signal_group(&self, sig: i32) -> bool {
        bootscope_model::proc::signal_group(self.pgid(), sig)
    }

    /// Sends a signal to the child (if it has not been reaped).
    pub fn signal(&self, sig: i32) -> Result<()> {
        if self.status.is_some() {
            return Ok(());
        }
        // SAFETY: kill(2) with the pid of our own, not yet reaped, child.
        if unsafe { libc::kill(self.pid, sig) } == 0 {
            Ok(())
        } else {
            Err(Error::last_os_error())
        }
    }
}

impl Drop for HeldCommand {
    fn drop(&mut self) {
        // Closing the write end without writing makes a still-held child
        // exit (it reads EOF) instead of exec'ing; reap it if it did.
        if self.release.take().is_some() {
            let _ = self.wait_flags(0);
        }
    }
}

/// A pidfd for `pid` (Linux 5.3+): it becomes readable once the process
/// has ended (a zombie included), and no later process with the same pid
/// is mistaken for it.
pub fn pidfd_open(pid: u32) -> Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags; it returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return Err(Error::last_os_error());
    }
    // SAFETY: pidfd_open succeeded: a fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Waits up to `timeout` (zero: only looks) for the process behind `pidfd`
/// to end; true when it has.
pub fn pidfd_ended(pidfd: &OwnedFd, timeout: std::time::Duration) -> bool {
    let mut p = libc::pollfd {
        fd: pidfd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = if timeout.is_zero() {
        0
    } else {
        i32::try_from(timeout.as_millis())
            .unwrap_or(i32::MAX)
            .max(1)
    };
    // SAFETY: one valid pollfd for a descriptor open for the whole call.
    let n = unsafe { libc::poll(&mut p, 1, ms) };
    n > 0 && p.revents & (libc::POLLIN | libc::POLLHUP) != 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("bootscope-held-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn held_until_released() {
        let dir = scratch("release");
        let flag = dir.join("ran");
        let mut h = HeldCommand::spawn(&["touch".into(), flag.display().to_string()]).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        assert!(!flag.exists(), "the command ran before release");
        assert!(h.try_wait().unwrap().is_none());
        h.release().unwrap();
        assert!(h.wait().unwrap().success());
        assert!(flag.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn dropped_without_release_never_runs() {
        let dir = scratch("drop");
        let flag = dir.join("ran");
        let h = HeldCommand::spawn(&["touch".into(), flag.display().to_string()]).unwrap();
        drop(h);
        assert!(!flag.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_command_leads_a_group_of_its_own() {
        let mut h = HeldCommand::spawn(&["sleep".into(), "1000".into()]).unwrap();
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", h.pid())).unwrap();
        let pgrp: u32 = stat
            .rsplit_once(')')
            .unwrap()
            .1
            .split_whitespace()
            .nth(2)
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(pgrp, h.pid());
        assert_eq!(h.pgid(), h.pid());
        h.release().unwrap();
        // Its start after the fork (setpgid, the read it waited in) was
        // counted before the exec, and is part of its life's count.
        let held = h.held_faults().expect("read at the release");
        assert!(h.signal_group(libc::SIGKILL));
        let s = h.wait().unwrap();
        assert_eq!(s.signal(), Some(libc::SIGKILL));
        let life = h.faults().unwrap();
        assert!(life.minflt >= held.minflt && life.majflt >= held.majflt);
        assert!(bootscope_model::proc::group_members(h.pgid()).is_empty());
    }

    #[test]
    fn exit_codes_and_missing_programs() {
        let mut h = HeldCommand::spawn(&["sh".into(), "-c".into(), "exit 3".into()]).unwrap();
        assert_eq!(h.wait().unwrap().code(), Some(3));
        assert!(HeldCommand::spawn(&[]).is_err());
        let e = HeldCommand::spawn(&["no-such-program-here".into()])
            .err()
            .unwrap();
        assert_eq!(e.kind(), ErrorKind::NotFound);
        assert_eq!(resolve_program("/bin/sh"), Some(PathBuf::from("/bin/sh")));
        assert!(resolve_program("sh").is_some());
    }
}
