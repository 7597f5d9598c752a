//! Processes as procfs shows them.

/// Thread ids of process `pid`, ascending (`/proc/PID/task`); empty when
/// the process is gone.
pub fn threads_of(pid: u32) -> Vec<u32> {
    let mut tids: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    tids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_threads_include_the_main_thread() {
        let me = std::process::id();
        let tids = threads_of(me);
        assert!(tids.contains(&me), "{tids:?}");
        assert!(tids.windows(2).all(|w| w[0] < w[1]));
        assert!(threads_of(u32::MAX).is_empty());
    }
}
