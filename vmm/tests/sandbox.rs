//! The sandbox really denies what it says, on threads that already existed
//! and on threads created later, while ordinary work goes on. (Its own test
//! binary: the filter applies to the whole process.)

use std::sync::mpsc;

fn set_affinity_to_cpu0() -> std::io::Result<()> {
    // SAFETY: cpu_set_t is plain data; zeroed is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: CPU 0 is within the set's capacity.
    unsafe { libc::CPU_SET(0, &mut set) };
    // SAFETY: the pointer and size describe a live cpu_set_t.
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[test]
fn sandbox_denies_affinity_changes_on_all_threads() {
    // Before: allowed.
    set_affinity_to_cpu0().expect("affinity can be set before the sandbox");
    // A thread that exists before the sandbox goes up.
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (res_tx, res_rx) = mpsc::channel();
    let early = std::thread::spawn(move || {
        go_rx.recv().unwrap();
        res_tx
            .send(set_affinity_to_cpu0().map_err(|e| e.raw_os_error()))
            .unwrap();
    });
    bootscope_vmm::sandbox::install().expect("seccomp filter installs");
    assert_eq!(
        set_affinity_to_cpu0().unwrap_err().raw_os_error(),
        Some(libc::EPERM)
    );
    go_tx.send(()).unwrap();
    assert_eq!(
        res_rx.recv().unwrap(),
        Err(Some(libc::EPERM)),
        "TSYNC covers existing threads"
    );
    early.join().unwrap();
    let late = std::thread::spawn(|| set_affinity_to_cpu0().map_err(|e| e.raw_os_error()));
    assert_eq!(
        late.join().unwrap(),
        Err(Some(libc::EPERM)),
        "new threads inherit the filter"
    );
    // Ordinary work still runs.
    let dir = std::env::temp_dir().join(format!("bootscope-sandbox-{}", std::process::id()));
    std::fs::write(&dir, b"ok").unwrap();
    assert_eq!(std::fs::read(&dir).unwrap(), b"ok");
    std::fs::remove_file(&dir).unwrap();
    // SAFETY: plain syscall with no pointers.
    let sock = unsafe { libc::syscall(libc::SYS_socket, libc::AF_INET, libc::SOCK_STREAM, 0) };
    assert_eq!(sock, -1, "sockets are denied");
}
