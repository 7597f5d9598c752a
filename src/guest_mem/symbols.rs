//! The guest kernel's symbols and types (for the initcalls in its trace
//! ring, its modules, the boot parameters at their symbol), loaded on a
//! thread of their own at nice 19 while the watcher looks for holds: a
//! VMM held at its guest's end never waits for the load. A pass made
//! before the load ended reads what needs no symbols (the kernel's log,
//! the boot parameters by their search) and names the rest as missing,
//! with why; a pass of a running guest waits until the load has ended.

use std::path::PathBuf;
use std::thread::JoinHandle;
use std::time::Instant;

use bootscope_vmm::kernel_log::GuestKernel;

type Loaded = Result<Box<dyn GuestKernel>, String>;

enum State {
    Loading(JoinHandle<Loaded>, Instant),
    Done(Loaded),
}

/// The guest kernel's symbols: being loaded, or loaded (or why not).
pub(super) struct KernelSymbols {
    state: State,
}

impl KernelSymbols {
    /// Starts loading the symbols of `kernel` (None: there is no image).
    pub(super) fn start(kernel: Option<PathBuf>) -> Self {
        let Some(path) = kernel else {
            return Self::done(Err(
                "no guest kernel image to name symbols from (give --guest-symbols, or launch \
                 the VMM with its -kernel/--kernel)"
                    .into(),
            ));
        };
        Self::spawn(move || load(path))
    }

    /// Loads with `load` on a thread of its own, at nice 19.
    fn spawn(load: impl FnOnce() -> Loaded + Send + 'static) -> Self {
        let started = Instant::now();
        let thread = std::thread::Builder::new()
            .name("bootscope-guest-symbols".into())
            .spawn(move || {
                super::set_background(true);
                load()
            });
        match thread {
            Ok(t) => Self {
                state: State::Loading(t, started),
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
        if let State::Loading(t, _) = &self.state {
            if !t.is_finished() {
                return false;
            }
            self.wait();
        }
        true
    }

    /// Waits until the load has ended.
    pub(super) fn wait(&mut self) {
        let state = std::mem::replace(&mut self.state, State::Done(Err(String::new())));
        self.state = match state {
            State::Loading(t, _) => State::Done(t.join().unwrap_or_else(|_| {
                Err("loading the guest kernel's symbols failed (its thread panicked)".into())
            })),
            done => done,
        };
    }

    /// The symbols, if loaded; Err says why not (or that they are still
    /// being loaded).
    pub(super) fn get(&self) -> Result<&dyn GuestKernel, String> {
        match &self.state {
            State::Done(Ok(k)) => Ok(k.as_ref()),
            State::Done(Err(e)) => Err(e.clone()),
            State::Loading(_, started) => Err(format!(
                "the guest kernel's symbols were still being loaded ({} ms in) when guest \
                 memory was read",
                started.elapsed().as_millis()
            )),
        }
    }

    /// True while the load is in progress (as last seen by [`Self::ready`]).
    pub(super) fn loading(&self) -> bool {
        matches!(self.state, State::Loading(..))
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
        go.send(()).unwrap();
        s.wait();
        assert!(s.ready());
        assert_eq!(
            s.get().unwrap().address_of("boot_params"),
            Some(0xffff_ffff_8200_0000)
        );
    }

    #[test]
    fn a_failed_or_panicking_load_says_why() {
        let mut s = KernelSymbols::start(None);
        assert!(s.ready());
        assert!(s.get().err().unwrap().contains("--guest-symbols"));
        let mut s = KernelSymbols::spawn(|| panic!("a bad image"));
        s.wait();
        assert!(s.get().err().unwrap().contains("panicked"));
        let mut s = KernelSymbols::start(Some(PathBuf::from("/nonexistent/vmlinuz")));
        s.wait();
        assert!(s.get().is_err());
    }
}
