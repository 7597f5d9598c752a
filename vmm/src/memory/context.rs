//! Thread contexts: a long-lived thread that restricts itself to a set of
//! host CPUs once, when it starts, and from then on creates threads on
//! request. Threads created through it inherit its CPU affinity (clone(2)
//! copies the creating thread's mask), so they run on the right CPUs without
//! ever calling sched_setaffinity(2) themselves: a seccomp sandbox installed
//! after set-up can forbid that call and preallocation still lands where it
//! should. (QEMU's `thread-context` object works the same way.)
//!
//! Only [`ThreadContext::new`] sets affinity, on the context thread itself;
//! the setter is private to this file, so code that builds thread bodies
//! elsewhere cannot reach it.

use std::io;
use std::sync::mpsc;
use std::thread::{self, JoinHandle};

use super::cpulist::CpuSet;
use super::sys::{gettid, thread_affinity};
use super::MemoryError;

type Job = Box<dyn FnOnce() + Send + 'static>;

/// A thread that creates threads with its own CPU affinity.
pub struct ThreadContext {
    name: String,
    tid: i32,
    allowed_cpus: CpuSet,
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for ThreadContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadContext")
            .field("name", &self.name)
            .field("tid", &self.tid)
            .field("allowed_cpus", &self.allowed_cpus.to_string())
            .finish()
    }
}

/// Restricts the calling thread to `cpus`. Called only by the context
/// thread, on itself, before it serves any request.
fn set_own_affinity(cpus: &CpuSet) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain bits; all-zero is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for cpu in cpus.iter() {
        if cpu as usize >= libc::CPU_SETSIZE as usize {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: CPU_SET sets bit `cpu` of `set`, cpu < CPU_SETSIZE.
        unsafe { libc::CPU_SET(cpu as usize, &mut set) };
    }
    // SAFETY: pid 0 is the calling thread; the kernel reads
    // size_of::<cpu_set_t>() bytes from `set`, which lives for the call.
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

enum SetupError {
    Affinity(io::Error),
    Query(io::Error),
}

impl ThreadContext {
    /// Starts a context thread called `name` restricted to `cpus` (None:
    /// it keeps the caller's CPU set). Returns once the thread runs with its
    /// final affinity.
    pub fn new(name: &str, cpus: Option<&CpuSet>) -> Result<Self, MemoryError> {
        let (jobs_tx, jobs_rx) = mpsc::channel::<Job>();
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(i32, CpuSet), SetupError>>();
        let wanted = cpus.cloned();
        let thread = thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                let setup = match &wanted {
                    Some(cpus) => set_own_affinity(cpus).map_err(SetupError::Affinity),
                    None => Ok(()),
                }
                .and_then(|()| thread_affinity(0).map_err(SetupError::Query))
                .map(|allowed| (gettid(), allowed));
                let ok = setup.is_ok();
                if ready_tx.send(setup).is_err() || !ok {
                    return;
                }
                for job in jobs_rx {
                    job();
                }
            })
            .map_err(|source| MemoryError::ContextStart {
                name: name.to_string(),
                source,
            })?;
        let error = match ready_rx.recv() {
            Ok(Ok((tid, allowed_cpus))) => {
                return Ok(ThreadContext {
                    name: name.to_string(),
                    tid,
                    allowed_cpus,
                    jobs: Some(jobs_tx),
                    thread: Some(thread),
                })
            }
            Ok(Err(SetupError::Affinity(source))) => MemoryError::SetAffinity {
                name: name.to_string(),
                cpus: cpus.cloned().unwrap_or_default(),
                source,
            },
            Ok(Err(SetupError::Query(source))) => MemoryError::Syscall {
                call: "sched_getaffinity",
                source,
            },
            Err(_) => MemoryError::ContextGone {
                name: name.to_string(),
            },
        };
        let _ = thread.join();
        Err(error)
    }

    /// The context thread's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The context thread's kernel thread id (for external tools that pin
    /// or inspect it).
    pub fn tid(&self) -> i32 {
        self.tid
    }

    /// The CPUs the context thread, and every thread it creates, may run on.
    pub fn allowed_cpus(&self) -> &CpuSet {
        &self.allowed_cpus
    }

    /// Runs `f` on the context thread itself and returns its result. This is
    /// how a sandbox is installed on the context after set-up (seccomp
    /// filters apply to the calling thread and the threads it creates later).
    pub fn run<F, R>(&self, f: F) -> Result<R, MemoryError>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        let gone = || MemoryError::ContextGone {
            name: self.name.clone(),
        };
        let (tx, rx) = mpsc::sync_channel(1);
        let job: Job = Box::new(move || {
            let _ = tx.send(f());
        });
        self.jobs
            .as_ref()
            .ok_or_else(gone)?
            .send(job)
            .map_err(|_| gone())?;
        rx.recv().map_err(|_| gone())
    }

    /// Creates a thread called `name` running `f`, through the context
    /// thread: it inherits the context's CPU affinity.
    pub fn spawn<F, T>(&self, name: String, f: F) -> Result<JoinHandle<T>, MemoryError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let thread_name = name.clone();
        self.run(move || thread::Builder::new().name(thread_name).spawn(f))?
            .map_err(|source| MemoryError::Spawn {
                context: self.name.clone(),
                name,
                source,
            })
    }
}

impl Drop for ThreadContext {
    fn drop(&mut self) {
        // Closing the channel ends the context thread's loop.
        self.jobs.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The CPUs this test process may use.
    fn own_cpus() -> CpuSet {
        thread_affinity(0).unwrap()
    }

    /// Installs, on the calling thread only, a seccomp filter that makes
    /// sched_setaffinity fail with EPERM: the sandbox a VMM installs after
    /// set-up. Threads created afterwards by this thread inherit it.
    pub(crate) fn forbid_setaffinity() -> io::Result<()> {
        const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
        let stmt = |code: u32, k: u32| libc::sock_filter {
            code: code as u16,
            jt: 0,
            jf: 0,
            k,
        };
        let jeq = |k: u32, jt: u8, jf: u8| libc::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            jt,
            jf,
            k,
        };
        let ld = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
        let ret = libc::BPF_RET | libc::BPF_K;
        // seccomp_data: nr at offset 0, arch at offset 4.
        let mut prog = [
            stmt(ld, 4),
            jeq(AUDIT_ARCH_X86_64, 1, 0),
            stmt(ret, libc::SECCOMP_RET_ALLOW),
            stmt(ld, 0),
            jeq(libc::SYS_sched_setaffinity as u32, 0, 1),
            stmt(ret, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
            stmt(ret, libc::SECCOMP_RET_ALLOW),
        ];
        let fprog = libc::sock_fprog {
            len: prog.len() as u16,
            filter: prog.as_mut_ptr(),
        };
        // SAFETY: PR_SET_NO_NEW_PRIVS takes integer arguments only.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fprog` points at `prog`, both live for the call; the
        // kernel copies the program. No TSYNC flag: only this thread.
        let r = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                0,
                &fprog as *const libc::sock_fprog,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// A sched_setaffinity(2) of the calling thread, as a misbehaving
    /// worker would do it.
    pub(crate) fn try_setaffinity(cpus: &CpuSet) -> io::Result<()> {
        set_own_affinity(cpus)
    }

    #[test]
    fn context_restricts_itself_and_reports() {
        for cpu in own_cpus().iter() {
            let want = CpuSet::from_iter([cpu]);
            let ctx = ThreadContext::new("memctx-test", Some(&want)).unwrap();
            assert_eq!(ctx.allowed_cpus(), &want);
            assert_eq!(ctx.name(), "memctx-test");
            assert!(ctx.tid() > 0);
            let (tid, cpus) = ctx.run(|| (gettid(), thread_affinity(0).unwrap())).unwrap();
            assert_eq!((tid, cpus), (ctx.tid(), want));
        }
        // The creating thread is untouched.
        assert_eq!(own_cpus(), thread_affinity(0).unwrap());
    }

    #[test]
    fn workers_inherit_the_context_mask() {
        let all = own_cpus();
        let last = all.highest().unwrap();
        let want = CpuSet::from_iter([last]);
        let ctx = ThreadContext::new("memctx-inherit", Some(&want)).unwrap();
        let handles: Vec<_> = (0..3)
            .map(|i| {
                ctx.spawn(format!("prealloc-t-{i}"), || {
                    (
                        thread::current().name().map(str::to_string),
                        thread_affinity(0).unwrap(),
                        super::super::sys::current_cpu(),
                    )
                })
                .unwrap()
            })
            .collect();
        for (i, h) in handles.into_iter().enumerate() {
            let (name, cpus, cpu) = h.join().unwrap();
            assert_eq!(name.as_deref(), Some(format!("prealloc-t-{i}").as_str()));
            assert_eq!(cpus, want, "worker {i} did not inherit the context's CPUs");
            assert_eq!(cpu, Some(last));
        }
        // A context without CPUs keeps the process's set.
        let ctx = ThreadContext::new("memctx-any", None).unwrap();
        assert_eq!(ctx.allowed_cpus(), &all);
    }

    #[test]
    fn workers_run_pinned_under_a_sandbox_that_forbids_setaffinity() {
        let want = CpuSet::from_iter([own_cpus().highest().unwrap()]);
        let ctx = ThreadContext::new("memctx-sandbox", Some(&want)).unwrap();
        ctx.run(forbid_setaffinity).unwrap().unwrap();
        let h = ctx
            .spawn("prealloc-sb-0".into(), || {
                let cpus = thread_affinity(0).unwrap();
                let attempt =
                    try_setaffinity(&CpuSet::from_iter([0])).map_err(|e| e.raw_os_error());
                (cpus, attempt)
            })
            .unwrap();
        let (cpus, attempt) = h.join().unwrap();
        assert_eq!(cpus, want);
        assert_eq!(
            attempt,
            Err(Some(libc::EPERM)),
            "the sandbox must reach threads created through the context"
        );
        // The context itself is sandboxed too, and still creates threads.
        let own = own_cpus();
        let again = own.clone();
        assert_eq!(
            ctx.run(move || try_setaffinity(&again).map_err(|e| e.raw_os_error()))
                .unwrap(),
            Err(Some(libc::EPERM))
        );
        // The test thread is not (setting its own mask again changes nothing).
        try_setaffinity(&own).unwrap();
    }

    #[test]
    fn impossible_cpus_are_a_typed_error() {
        let e = ThreadContext::new("memctx-bad", Some(&CpuSet::from_iter([1000]))).unwrap_err();
        assert!(matches!(e, MemoryError::SetAffinity { .. }), "{e}");
        assert!(
            e.to_string().contains("memctx-bad cannot run on CPUs 1000"),
            "{e}"
        );
        let e = ThreadContext::new("memctx-bad", Some(&CpuSet::from_iter([5000]))).unwrap_err();
        assert!(matches!(e, MemoryError::SetAffinity { .. }), "{e}");
    }
}
