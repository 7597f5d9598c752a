//! The device thread: one epoll loop over every queue's notification
//! eventfd of every virtio device (KVM signals them from the guest's
//! `QueueNotify` writes without a userspace exit) and a stop eventfd.
//! Requests are served here, never on a vCPU thread.

use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};
use vmm_sys_util::eventfd::EventFd;

use super::bus::lock;
use super::MmioTransport;

/// The token of the stop eventfd.
const STOP: u64 = u64::MAX;

/// The running device thread.
pub struct Worker {
    stop: EventFd,
    thread: Option<JoinHandle<()>>,
}

fn token(device: usize, queue: usize) -> u64 {
    ((device as u64) << 16) | queue as u64
}

impl Worker {
    /// Starts thread `virtio` serving `transports`.
    pub fn start(transports: Vec<Arc<Mutex<MmioTransport>>>) -> std::io::Result<Self> {
        let epoll = Epoll::new()?;
        let stop = EventFd::new(libc::EFD_NONBLOCK)?;
        epoll.ctl(
            ControlOperation::Add,
            stop.as_raw_fd(),
            EpollEvent::new(EventSet::IN, STOP),
        )?;
        // Each queue's eventfd, duplicated so the thread owns what it
        // waits on.
        let mut evts: Vec<Vec<EventFd>> = Vec::new();
        for (d, t) in transports.iter().enumerate() {
            let t = lock(t);
            let mut mine = Vec::new();
            for (q, e) in t.queue_evts().iter().enumerate() {
                let e = e.try_clone()?;
                epoll.ctl(
                    ControlOperation::Add,
                    e.as_raw_fd(),
                    EpollEvent::new(EventSet::IN, token(d, q)),
                )?;
                mine.push(e);
            }
            evts.push(mine);
        }
        let thread_stop = stop.try_clone()?;
        let thread = std::thread::Builder::new()
            .name(bootscope_model::threads::VIRTIO_THREAD.into())
            .spawn(move || run(&epoll, &thread_stop, &transports, &evts))?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops the thread and waits for it.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        let _ = self.stop.write(1);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.halt();
    }
}

fn run(
    epoll: &Epoll,
    stop: &EventFd,
    transports: &[Arc<Mutex<MmioTransport>>],
    evts: &[Vec<EventFd>],
) {
    let mut events = vec![EpollEvent::default(); 64];
    loop {
        let n = match epoll.wait(-1, &mut events) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        for ev in &events[..n] {
            let data = ev.data();
            if data == STOP {
                let _ = stop.read();
                return;
            }
            let (d, q) = ((data >> 16) as usize, (data & 0xffff) as usize);
            let (Some(t), Some(e)) = (transports.get(d), evts.get(d).and_then(|v| v.get(q))) else {
                continue;
            };
            // Clear the count first: a notification after this read wakes
            // the loop again.
            let _ = e.read();
            lock(t).process_queue(q);
        }
    }
}
