//! A virtio-mmio transport's state in a snapshot (Firecracker's
//! `persist.rs`): the registers the driver wrote, each queue's addresses,
//! size and ring indices, and the interrupt status. The devices here keep
//! nothing else the guest can see (the block device writes through to its
//! image; rng and console only count), so the transport is the device's
//! state.

use std::sync::atomic::Ordering;

use serde::{Deserialize, Serialize};
use virtio_queue::{Queue, QueueState, QueueT};

use super::MmioTransport;

/// One queue's state (virtio-queue's `QueueState`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VirtqueueState {
    pub max_size: u16,
    pub size: u16,
    pub ready: bool,
    pub desc_table: u64,
    pub avail_ring: u64,
    pub used_ring: u64,
    pub next_avail: u16,
    pub next_used: u16,
    pub event_idx_enabled: bool,
}

/// One transport's state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransportState {
    pub name: String,
    pub device_id: u32,
    pub device_features_sel: u32,
    pub driver_features_sel: u32,
    pub driver_features: u64,
    pub queue_sel: u32,
    pub status: u32,
    pub config_generation: u32,
    pub broken: Option<String>,
    pub interrupt_status: u32,
    pub queues: Vec<VirtqueueState>,
}

/// Why a transport's state cannot be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TransportRestoreError {
    #[error("{device}: the snapshot has a {saved} device here, this VM a {here}")]
    Kind {
        device: String,
        saved: String,
        here: String,
    },
    #[error("{device}: queue {queue} of the snapshot is invalid: {why}")]
    Queue {
        device: String,
        queue: usize,
        why: String,
    },
}

impl MmioTransport {
    /// Serves what the guest made available on every queue (the vCPUs are
    /// parked, so nothing new comes): no request is left half-done or
    /// unseen in a snapshot.
    pub fn drain(&mut self) {
        for i in 0..self.queues.len() {
            self.process_queue(i);
        }
    }

    pub fn save_state(&self) -> TransportState {
        TransportState {
            name: self.name.clone(),
            device_id: self.device.kind().id(),
            device_features_sel: self.device_features_sel,
            driver_features_sel: self.driver_features_sel,
            driver_features: self.driver_features,
            queue_sel: self.queue_sel,
            status: self.status,
            config_generation: self.config_generation,
            broken: self.broken.clone(),
            interrupt_status: self.interrupt.status.load(Ordering::SeqCst),
            queues: self
                .queues
                .iter()
                .map(|q| {
                    let s = q.state();
                    VirtqueueState {
                        max_size: s.max_size,
                        size: s.size,
                        ready: s.ready,
                        desc_table: s.desc_table,
                        avail_ring: s.avail_ring,
                        used_ring: s.used_ring,
                        next_avail: s.next_avail,
                        next_used: s.next_used,
                        event_idx_enabled: s.event_idx_enabled,
                    }
                })
                .collect(),
        }
    }

    /// Loads `state` into the transport of the same device in a new VM,
    /// before any vCPU runs; then has the device look at its queues.
    pub fn restore_state(&mut self, state: &TransportState) -> Result<(), TransportRestoreError> {
        let here = self.device.kind().id();
        if state.device_id != here || state.queues.len() != self.queues.len() {
            return Err(TransportRestoreError::Kind {
                device: self.name.clone(),
                saved: format!("id {} with {} queues", state.device_id, state.queues.len()),
                here: format!("id {here} with {} queues", self.queues.len()),
            });
        }
        let mut queues = Vec::new();
        for (i, q) in state.queues.iter().enumerate() {
            let s = QueueState {
                max_size: q.max_size,
                next_avail: q.next_avail,
                next_used: q.next_used,
                event_idx_enabled: q.event_idx_enabled,
                size: q.size,
                ready: q.ready,
                desc_table: q.desc_table,
                avail_ring: q.avail_ring,
                used_ring: q.used_ring,
            };
            let queue = Queue::try_from(s).map_err(|e| TransportRestoreError::Queue {
                device: self.name.clone(),
                queue: i,
                why: e.to_string(),
            })?;
            if queue.ready() && !queue.is_valid(&self.mem) {
                return Err(TransportRestoreError::Queue {
                    device: self.name.clone(),
                    queue: i,
                    why: "outside guest memory or misaligned".into(),
                });
            }
            queues.push(queue);
        }
        self.queues = queues;
        self.device_features_sel = state.device_features_sel;
        self.driver_features_sel = state.driver_features_sel;
        self.driver_features = state.driver_features;
        self.queue_sel = state.queue_sel;
        self.status = state.status;
        self.config_generation = state.config_generation;
        self.broken = state.broken.clone();
        self.interrupt
            .status
            .store(state.interrupt_status, Ordering::SeqCst);
        // Buffers made available after the last notification are served
        // once the device thread runs.
        for e in &self.queue_evts {
            let _ = e.write(1);
        }
        Ok(())
    }
}
