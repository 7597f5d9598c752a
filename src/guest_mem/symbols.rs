//! The guest kernel's symbols and types (for the initcalls in its trace
//! ring, its modules, the boot parameters at their symbol), loaded on a
//! thread of their own in the background while the watcher looks for holds: a
//! VMM held at its guest's end never waits for the load (what is read
//! then is a copy of its memory, decoded once the load has ended). What
//! needs the symbols waits for them, at most a bounded time
//! ([`KernelSymbols::wait_for`]); past it, each part not read names why.

use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bootscope_vmm::kernel_log::GuestKernel;

type Loaded = Result<Box<dyn GuestKernel>, String>;

enum State {
    /// Not started yet: the VMM is setting up ([`KernelSymbols::begin`]).
    Waiting(PathBuf),
    /// The load's result comes on the channel; the thread's id, for its
    /// priority.
    Loading {
        result: Receiver<Loaded>,
        tid: Arc<AtomicI32>,
        started: Instant,
        /// How long a wait was given up after, if one was.
        gave_up: Option<Duration>,
    },
    Done(Loaded),
}

/// The guest kernel's symbols: being loaded, or loaded (or why not).
pub(super) struct KernelSymbols {
    state: State,
}

const PANICKED: &str = "loading the guest kernel's symbols failed (its thread panicked)";

impl KernelSymbols {
    /// The symbols of `kernel` (None: there is no image), to be loaded
    /// from [`Self::begin`] on: the load reads and verifies the same
    /// kernel cache files the VMM reads while it sets up, and waits until
    /// that set-up is over.
    pub(super) fn deferred(kernel: Option<PathBuf>) -> Self {
        match kernel {
            Some(path) => Self {
                state: State::Waiting(path),
            },
            None => Self::done(Err(
                "no guest kernel image to name symbols from (give --guest-symbols, or launch \
                 the VMM with its -kernel/--kernel)"
                    .into(),
            )),
        }
    }

    /// Starts the load if it waits (the guest runs, or it is needed now).
    pub(super) fn begin(&mut self) {
        if let State::Waiting(path) = &self.state {
            let path = path.clone();
            *self = Self::spawn(move || load(path));
        }
    }

    /// True while the load waits to start.
    pub(super) fn waiting(&self) -> bool {
        matches!(self.state, State::Waiting(_))
    }

    /// Loads with `load` on a thread of its own, in the background.
    pub(super) fn spawn(load: impl FnOnce() -> Loaded + Send + 'static) -> Self {
        let (send, result) = mpsc::channel();
        let tid = Arc::new(AtomicI32::new(0));
        let own = tid.clone();
        let thread = std::thread::Builder::new()
            .name("bootscope-guest-symbols".into())
            .spawn(move || {
                // SAFETY: a plain system call.
                own.store(unsafe { libc::gettid() }, Ordering::SeqCst);
                super::set_background(true);
                // The receiver may be gone (a wait given up): nothing to do.
                let _ = send.send(load());
            });
        match thread {
            Ok(_) => Self {
                state: State::Loading {
                    result,
                    tid,
                    started: Instant::now(),
                    gave_up: None,
                },
            },
            Err(e) => Self::done(Err(format!(
                "cannot start a thread to load the guest kernel's symbols: {e}"
            ))),
        }
    }

    fn done(loaded: Loaded) -> Self {
        Self {
            state: State::Done(loaded),
        }
    }

    /// True once the load has ended (never waits).
    pub(super) fn ready(&mut self) -> bool {
        let result = match &self.state {
            State::Waiting(_) => return false,
            State::Loading { result, .. } => result,
            State::Done(_) => return true,
        };
        match result.try_recv() {
            Ok(loaded) => self.state = State::Done(loaded),
            Err(TryRecvError::Disconnected) => self.state = State::Done(Err(PANICKED.into())),
            Err(TryRecvError::Empty) => return false,
        }
        true
    }

    /// Lets the load go on at the process's own priority (the guest it
    /// would take CPU time from has ended), starting it if it waits.
    pub(super) fn hurry(&mut self) {
        self.begin();
        if let State::Loading { tid, .. } = &self.state {
            super::set_background_of(tid.load(Ordering::SeqCst), false);
        }
    }

    /// Waits until the load has ended, at most `limit`; the load goes on
    /// at the process's own priority meanwhile (the wait is for it). True
    /// when it has ended.
    pub(super) fn wait_for(&mut self, limit: Duration) -> bool {
        self.begin();
        let State::Loading {
            result,
            tid,
            gave_up,
            ..
        } = &mut self.state
        else {
            return true;
        };
        super::set_background_of(tid.load(Ordering::SeqCst), false);
        match result.recv_timeout(limit) {
            Ok(loaded) => self.state = State::Done(loaded),
            Err(RecvTimeoutError::Disconnected) => self.state = State::Done(Err(PANICKED.into())),
            Err(RecvTimeoutError::Timeout) => {
                *gave_up = Some(limit);
                return false;
            }
        }
        true
    }

    /// The symbols, if loaded; Err says why not (or that they are still
    /// being loaded).
    pub(super) fn get(&self) -> Result<&dyn GuestKernel, String> {
        match &self.state {
            State::Done(Ok(k)) => Ok(k.as_ref()),
            State::Done(Err(e)) => Err(e.clone()),
            State::Waiting(_) => Err("the guest kernel's symbols were not loaded yet: their \
                 load starts once the guest runs"
                .into()),
            State::Loading {
                started,
                gave_up: Some(limit),
                ..
            } => Err(format!(
                "the guest kernel's symbols were still being loaded {} ms after the load \
                 started (waited {:?} for them, the limit): a first profile of a kernel \
                 recovers its symbol table, later ones load it from the kernel cache",
                started.elapsed().as_millis(),
                limit
            )),
            State::Loading { started, .. } => Err(format!(
                "the guest kernel's symbols were still being loaded ({} ms in) when guest \
                 memory was read",
                started.elapsed().as_millis()
            )),
        }
    }

    /// True while the load is in progress or waits to start (as last seen
    /// by [`Self::ready`]).
    pub(super) fn loading(&self) -> bool {
        matches!(self.state, State::Loading { .. } | State::Waiting(_))
    }
}

/// The symbols of `path`: a bzImage's from the kernel cache's copy and the
/// table kept beside it (recovered once, read in milliseconds after).
fn load(path: PathBuf) -> Loaded {
    let loader = crate::guest_symbols::kernel_loader(path.clone());
    let image = crate::guest_symbols::cached_image(&path).unwrap_or(path);
    loader(&image)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    struct Named;

    impl GuestKernel for Named {
        fn address_of(&self, name: &str) -> Option<u64> {
            (name == "boot_params").then_some(0xffff_ffff_8200_0000)
        }
        fn functions_at(&self, addrs: &[u64]) -> Vec<Option<String>> {
            vec![None; addrs.len()]
        }
        fn btf(&self) -> Result<Vec<u8>, String> {
            Err("none".into())
        }
        fn source(&self) -> String {
            "test".into()
        }
    }

    #[test]
    fn a_load_in_progress_is_not_waited_for_until_asked() {
        let (go, gate) = mpsc::channel::<()>();
        let mut s = KernelSymbols::spawn(move || {
            // Held until the test lets it end: the load is in progress.
            gate.recv().map_err(|e| e.to_string())?;
            Ok(Box::new(Named) as Box<dyn GuestKernel>)
        });
        assert!(!s.ready());
        let e = s.get().err().unwrap();
        assert!(e.contains("still being loaded"), "{e}");
        // A bounded wait gives up, and says so.
        assert!(!s.wait_for(Duration::from_millis(1)));
        let e = s.get().err().unwrap();
        assert!(e.contains("waited 1ms for them, the limit"), "{e}");
        go.send(()).unwrap();
        assert!(s.wait_for(Duration::from_secs(3600)));
        assert!(s.ready());
        assert_eq!(
            s.get().unwrap().address_of("boot_params"),
            Some(0xffff_ffff_8200_0000)
        );
    }

    #[test]
    fn a_failed_or_panicking_load_says_why() {
        let mut s = KernelSymbols::deferred(None);
        assert!(s.ready());
        assert!(s.get().err().unwrap().contains("--guest-symbols"));
        let mut s = KernelSymbols::spawn(|| panic!("a bad image"));
        s.wait_for(Duration::from_secs(3600));
        assert!(s.get().err().unwrap().contains("panicked"));
        let mut s = KernelSymbols::deferred(Some(PathBuf::from("/nonexistent/vmlinuz")));
        s.wait_for(Duration::from_secs(3600));
        assert!(s.get().is_err());
    }

    #[test]
    fn a_deferred_load_starts_when_begun_or_needed() {
        let path = PathBuf::from("/nonexistent/vmlinuz");
        // Waiting: nothing is loading yet, and what asks says why.
        let mut s = KernelSymbols::deferred(Some(path.clone()));
        assert!(s.waiting() && s.loading() && !s.ready());
        let e = s.get().err().unwrap();
        assert!(e.contains("not loaded yet"), "{e}");
        // Begun: it loads (this image fails at once).
        s.begin();
        assert!(!s.waiting());
        assert!(s.wait_for(Duration::from_secs(3600)));
        assert!(!s.loading());
        assert!(!s.get().err().unwrap().contains("not loaded yet"));
        // A hold's hurry starts a waiting load; so does a wait.
        for start in [KernelSymbols::hurry as fn(&mut KernelSymbols), |s| {
            s.wait_for(Duration::from_secs(3600));
        }] {
            let mut s = KernelSymbols::deferred(Some(path.clone()));
            start(&mut s);
            assert!(!s.waiting());
        }
    }
}
