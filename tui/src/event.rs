//! Input: a thread reads the terminal's key and resize events and sends
//! them over a channel; the event loop waits on it with a deadline, which
//! is its tick.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossterm::event::{self as ct, KeyEvent, KeyEventKind};

/// How long the input thread blocks before looking at its stop flag: the
/// longest a quit waits for it.
const INPUT_POLL: Duration = Duration::from_millis(50);

/// What the event loop wakes up for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    Key(KeyEvent),
    /// The terminal changed size.
    Resize,
    /// The deadline passed.
    Tick,
    /// The terminal cannot be read any more (hung up).
    InputClosed(String),
}

/// The input thread and its channel.
pub struct Events {
    rx: Receiver<Event>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Events {
    /// Starts reading the terminal.
    pub fn start() -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let stop_reader = stop.clone();
        let thread = std::thread::Builder::new()
            .name("bootscope-tui-input".into())
            .spawn(move || {
                while !stop_reader.load(Ordering::Relaxed) {
                    let ev = match ct::poll(INPUT_POLL) {
                        Ok(false) => continue,
                        Ok(true) => match ct::read() {
                            Ok(ct::Event::Key(k)) if k.kind != KeyEventKind::Release => {
                                Event::Key(k)
                            }
                            Ok(ct::Event::Resize(..)) => Event::Resize,
                            Ok(_) => continue,
                            Err(e) => Event::InputClosed(e.to_string()),
                        },
                        Err(e) => Event::InputClosed(e.to_string()),
                    };
                    let closed = matches!(ev, Event::InputClosed(_));
                    if tx.send(ev).is_err() || closed {
                        break;
                    }
                }
            })?;
        Ok(Self {
            rx,
            stop,
            thread: Some(thread),
        })
    }

    /// The next event, or [`Event::Tick`] at `deadline`.
    pub fn next(&self, deadline: Instant) -> Event {
        let wait = deadline.saturating_duration_since(Instant::now());
        match self.rx.recv_timeout(wait) {
            Ok(ev) => ev,
            Err(RecvTimeoutError::Timeout) => Event::Tick,
            Err(RecvTimeoutError::Disconnected) => {
                Event::InputClosed("the input thread ended".into())
            }
        }
    }
}

impl Drop for Events {
    /// Stops the input thread before the terminal is restored, so it does
    /// not swallow what is typed afterwards.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
