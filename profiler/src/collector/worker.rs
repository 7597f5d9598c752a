//! The worker thread: it reads the ring buffer (on data, or on a timer)
//! and takes the samples.

use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aya::maps::RingBuf;
use bootscope_model::proc::thread_cpu_time;

use super::Shared;
use crate::bpf::BsEvent;

/// Samples are at least this many times their own duration apart.
pub(super) const SAMPLE_SPACING: u32 = 1000;

/// Time to the next sample: the interval asked for, or more when a sample
/// costs over 0.1 % of it.
pub(super) fn sample_spacing(interval: Duration, cost: Duration) -> Duration {
    interval.max(cost.saturating_mul(SAMPLE_SPACING))
}

/// Whether a record of `kind` is news to a reader of the profile
/// ([`super::Collector::wait_news`]).
fn news(kind: u32) -> bool {
    use crate::bpf::event_kind as k;
    matches!(kind, k::MARK | k::HELD | k::VM_NEW)
}

/// Reads the ring buffer (on data, or every `drain_interval`) and samples
/// counters every `sample_interval`, until told to stop.
pub(super) fn worker_loop(
    shared: Arc<Shared>,
    mut ring: RingBuf<aya::maps::MapData>,
    sample_interval: Duration,
    drain_interval: Option<Duration>,
) {
    // KVM's debugfs directory of a VM vanishes with the VM, so it is read
    // every tick, not only at samples.
    let tick = Duration::from_millis(10);
    let cpu_at_start = thread_cpu_time();
    let mut next_sample = Instant::now() + sample_interval;
    let mut first_sample = true;
    let mut next_drain = Instant::now() + drain_interval.unwrap_or_default();
    let drain = |ring: &mut RingBuf<aya::maps::MapData>, shared: &Shared| {
        let mut events = Vec::new();
        while let Some(item) = ring.next() {
            if let Some(e) = BsEvent::from_bytes(&item) {
                events.push(e);
            }
        }
        if !events.is_empty() {
            // Records of different CPUs may arrive out of order.
            events.sort_by_key(|e| e.ts_ns);
            let mut st = shared.state.lock().unwrap_or_else(|e| e.into_inner());
            for e in &events {
                st.apply_event(e);
            }
            drop(st);
            if events.iter().any(|e| news(e.kind)) {
                shared.tell_news();
            }
        }
    };
    loop {
        let stopping = shared.stop.load(Ordering::SeqCst);
        let now = Instant::now();
        if stopping || drain_interval.is_none() || now >= next_drain {
            drain(&mut ring, &shared);
            if let Some(d) = drain_interval {
                next_drain = now + d;
            }
        }
        if stopping {
            let mut st = shared.state.lock().unwrap_or_else(|e| e.into_inner());
            st.sampler.reader_cpu = thread_cpu_time().saturating_sub(cpu_at_start);
            break;
        }
        let frequent = {
            let mut st = shared.state.lock().unwrap_or_else(|e| e.into_inner());
            if now < next_sample {
                if st.kvm_stats_wanted() {
                    st.refresh_kvm_stats(false);
                }
            } else {
                st.poll_target();
                let began = Instant::now();
                st.take_sample();
                // A sample reads every counting map entry by entry and looks
                // for the target's vCPU statistics files: a fraction of a
                // millisecond natively, tens of milliseconds where every
                // instruction is emulated. Spacing samples at least
                // SAMPLE_SPACING times their own cost keeps the sampler
                // under 0.1 % of a CPU, which on a one-CPU machine is taken
                // from the guest.
                // The first sample also pays one-time costs (code and
                // buffers faulted in: 20 to 30 ms in the lab against about
                // one for the next ones), so it does not set the spacing.
                next_sample = if first_sample {
                    now + sample_interval
                } else {
                    now + sample_spacing(sample_interval, began.elapsed())
                };
                first_sample = false;
            }
            st.sampler.reader_cpu = thread_cpu_time().saturating_sub(cpu_at_start);
            st.kvm_stats_wanted()
        };
        // Sleep until the next sample unless counts need reading more often:
        // a profiler on a one-CPU machine takes its CPU time from the guest.
        let until_sample = next_sample.saturating_duration_since(Instant::now());
        let wait = if frequent {
            until_sample.min(tick)
        } else {
            until_sample
        };
        // The ring buffer's data (unless it is read on a timer) or a stop
        // request ends the wait early.
        let mut pfds = [
            libc::pollfd {
                fd: shared.wake.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: ring.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let n = if drain_interval.is_some() { 1 } else { 2 };
        // SAFETY: n valid pollfds for descriptors open for the whole call.
        unsafe { libc::poll(pfds.as_mut_ptr(), n, wait.as_millis().max(1) as i32) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_cost_at_most_a_fraction_of_a_percent() {
        let ms = Duration::from_millis;
        // Natively a sample costs well under a millisecond: the interval
        // holds.
        // (75 to 230 us here: at most 230 ms apart).
        assert_eq!(sample_spacing(ms(200), Duration::from_micros(80)), ms(200));
        assert_eq!(sample_spacing(ms(200), Duration::from_micros(200)), ms(200));
        assert_eq!(sample_spacing(ms(200), Duration::from_micros(230)), ms(230));
        // Emulated, 3 ms a sample: 3 s apart.
        assert_eq!(sample_spacing(ms(200), ms(3)), ms(3000));
    }
}
