//! The temporary directories of snapshots being written, listed so that a
//! process ending on a signal removes them ([`remove_all`]): a second
//! SIGINT during `run --snapshot` leaves nothing beside the snapshot's
//! final name, and never a half-written snapshot under it (the rename into
//! place and the removal are under one lock, and no rename follows a
//! removal).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

struct List {
    /// Set by [`remove_all`]: no directory is listed or renamed after.
    closed: bool,
    next: u64,
    live: BTreeMap<u64, PathBuf>,
}

static LIST: Mutex<List> = Mutex::new(List {
    closed: false,
    next: 0,
    live: BTreeMap::new(),
});

fn list() -> MutexGuard<'static, List> {
    LIST.lock().unwrap_or_else(|e| e.into_inner())
}

fn interrupted() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::Interrupted,
        "interrupted by a signal: the snapshot is not written",
    )
}

/// A listed directory; it leaves the list when dropped.
pub(super) struct Listed(u64);

impl Drop for Listed {
    fn drop(&mut self) {
        list().live.remove(&self.0);
    }
}

/// Makes a directory with `make` and lists the path it returns, unless
/// the process is ending on a signal.
pub(super) fn create<T>(
    make: impl FnOnce() -> std::io::Result<T>,
    path_of: impl Fn(&T) -> PathBuf,
) -> std::io::Result<(T, Listed)> {
    let mut l = list();
    if l.closed {
        return Err(interrupted());
    }
    let made = make()?;
    let id = l.next;
    l.next += 1;
    l.live.insert(id, path_of(&made));
    Ok((made, Listed(id)))
}

/// Renames the listed directory `from` to `to`, unless the process is
/// ending on a signal (then it is gone already).
pub(super) fn rename(listed: Listed, from: &Path, to: &Path) -> std::io::Result<()> {
    let mut l = list();
    if l.closed {
        return Err(interrupted());
    }
    let r = std::fs::rename(from, to);
    if r.is_ok() {
        l.live.remove(&listed.0);
    }
    drop(l);
    r
}

/// Removes every snapshot directory being written and refuses new ones
/// and their renames from then on; returns how many were removed. For a
/// process about to exit on a signal (takes a lock: not from a signal
/// handler).
pub fn remove_all() -> usize {
    let mut l = list();
    l.closed = true;
    let live = std::mem::take(&mut l.live);
    live.values()
        .filter(|p| std::fs::remove_dir_all(p).is_ok())
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listed_directory_is_removed_and_not_renamed_after() {
        let base = tempfile::tempdir().unwrap();
        let tmp = base.path().join(".snap.x");
        let (p, listed) = create(
            || std::fs::create_dir(&tmp).map(|()| tmp.clone()),
            Clone::clone,
        )
        .unwrap();
        std::fs::write(p.join("memory.raw"), b"half").unwrap();
        assert_eq!(remove_all(), 1);
        assert!(!tmp.exists());
        let to = base.path().join("snap");
        let e = rename(listed, &tmp, &to).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::Interrupted);
        assert!(!to.exists());
        assert!(create(|| Ok(()), |_| PathBuf::new()).is_err());
    }
}
