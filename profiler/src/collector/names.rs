//! What a thread is, from its name: the model's naming contract
//! (`bootscope_model::threads`), as the collector reads it.

pub use bootscope_model::threads::vcpu_from_thread_name;
use bootscope_model::threads::ThreadRole;

/// The role of a thread, from its name: a profile's `threads[].role`.
pub fn thread_role(name: &str, tid: u32, tgid: u32) -> &'static str {
    ThreadRole::of(name, tid, tgid).as_str()
}
