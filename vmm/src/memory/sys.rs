//! Thin wrappers over the system calls this module needs that libc does not
//! wrap (mbind, get_mempolicy, move_pages) or wraps unsafely. Setting CPU
//! affinity is deliberately not here: only the thread context may do that
//! (see `context.rs`).

use std::io;

use super::cpulist::{CpuSet, NodeSet};
use super::spec::Policy;

/// Bits in the node masks passed to get_mempolicy: the kernel's largest
/// MAX_NUMNODES.
const NODEMASK_BITS: usize = 1024;
const ULONG_BITS: usize = libc::c_ulong::BITS as usize;

/// A node mask in the kernel's `unsigned long[]` layout.
pub(crate) fn nodemask(nodes: &NodeSet) -> Vec<libc::c_ulong> {
    let words = nodes.highest().map_or(1, |m| m as usize / ULONG_BITS + 1);
    let mut mask = vec![0 as libc::c_ulong; words];
    for n in nodes.iter() {
        mask[n as usize / ULONG_BITS] |= 1 << (n as usize % ULONG_BITS);
    }
    mask
}

fn nodes_from_mask(mask: &[libc::c_ulong]) -> NodeSet {
    let mut nodes = NodeSet::new();
    for (w, &word) in mask.iter().enumerate() {
        for b in 0..ULONG_BITS {
            if word & (1 << b) != 0 {
                nodes.insert((w * ULONG_BITS + b) as u32);
            }
        }
    }
    nodes
}

/// Sets the NUMA policy of `[addr, addr + len)` (page aligned) before any
/// page of it is touched.
pub(crate) fn mbind(addr: *mut u8, len: usize, policy: Policy, nodes: &NodeSet) -> io::Result<()> {
    let mask = nodemask(nodes);
    // The kernel reads maxnode - 1 bits (a historical off-by-one every
    // caller, libnuma included, compensates for).
    let maxnode = (mask.len() * ULONG_BITS + 1) as libc::c_ulong;
    // SAFETY: mbind only changes the placement policy of the range, never
    // its contents or mapping; the kernel reads `mask.len()` words from a
    // live vector and validates the range itself.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            addr as libc::c_ulong,
            len as libc::c_ulong,
            policy.mode() as libc::c_ulong,
            mask.as_ptr(),
            maxnode,
            0 as libc::c_ulong,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The NUMA policy covering `addr`: `(policy, nodes)`, policy None for the
/// default (local) policy.
pub(crate) fn mempolicy_at(addr: *const u8) -> io::Result<(Option<Policy>, NodeSet)> {
    let mut mode: libc::c_int = 0;
    let mut mask = vec![0 as libc::c_ulong; NODEMASK_BITS / ULONG_BITS];
    const MPOL_F_ADDR: libc::c_ulong = 1 << 1;
    // SAFETY: the kernel writes one int to `mode` and at most NODEMASK_BITS
    // bits to `mask`, both live for the call; it only reads the policy of
    // `addr`.
    let r = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut mode as *mut libc::c_int,
            mask.as_mut_ptr(),
            NODEMASK_BITS as libc::c_ulong,
            addr as libc::c_ulong,
            MPOL_F_ADDR,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // Mode flags (MPOL_F_STATIC_NODES, ...) live in the high bits.
    let policy = match mode & 0xff {
        libc::MPOL_BIND => Some(Policy::Bind),
        libc::MPOL_PREFERRED => Some(Policy::Preferred),
        libc::MPOL_INTERLEAVE => Some(Policy::Interleave),
        _ => None,
    };
    Ok((policy, nodes_from_mask(&mask)))
}

/// The node of each page in `pages` (move_pages(2) with no target nodes only
/// reports): `Ok(node)` or `Err(errno)` (`ENOENT`: not present yet).
pub(crate) fn page_nodes(pages: &[*const u8]) -> io::Result<Vec<Result<u32, i32>>> {
    let mut status = vec![0 as libc::c_int; pages.len()];
    // SAFETY: with a null `nodes` array move_pages only queries; it reads
    // `pages.len()` pointers and writes as many ints to `status`, both live
    // vectors of that length. The queried addresses are never dereferenced
    // by us and the kernel checks them.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            0 as libc::c_long,
            pages.len() as libc::c_ulong,
            pages.as_ptr(),
            std::ptr::null::<libc::c_int>(),
            status.as_mut_ptr(),
            0 as libc::c_int,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(status
        .into_iter()
        .map(|s| if s >= 0 { Ok(s as u32) } else { Err(-s) })
        .collect())
}

/// madvise(2) on a range this module mapped.
pub(crate) fn madvise(addr: *mut u8, len: usize, advice: libc::c_int) -> io::Result<()> {
    // SAFETY: the advice values used here (MADV_HUGEPAGE,
    // MADV_POPULATE_WRITE) change how pages are backed or fault them in,
    // never the contents a program observes; the kernel checks the range.
    let r = unsafe { libc::madvise(addr.cast(), len, advice) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The calling thread's kernel thread id.
pub fn gettid() -> i32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::gettid() }
}

/// The CPUs thread `tid` (0: the caller) may run on.
pub fn thread_affinity(tid: i32) -> io::Result<CpuSet> {
    // SAFETY: cpu_set_t is plain bits; all-zero is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: the kernel writes at most size_of::<cpu_set_t>() bytes into
    // `set`, which lives for the call.
    let r =
        unsafe { libc::sched_getaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((0..libc::CPU_SETSIZE as usize)
        // SAFETY: CPU_ISSET reads bit `c` of `set`, c < CPU_SETSIZE.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .map(|c| c as u32)
        .collect())
}

/// The CPU the caller is running on now.
pub(crate) fn current_cpu() -> Option<u32> {
    // SAFETY: sched_getcpu has no arguments.
    let c = unsafe { libc::sched_getcpu() };
    u32::try_from(c).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_masks() {
        assert_eq!(nodemask(&NodeSet::new()), vec![0]);
        assert_eq!(nodemask(&"0".parse().unwrap()), vec![1]);
        assert_eq!(nodemask(&"1,3".parse().unwrap()), vec![0b1010]);
        let m = nodemask(&"0,64,65".parse().unwrap());
        assert_eq!(m, vec![1, 0b11]);
        assert_eq!(nodes_from_mask(&m).to_string(), "0,64-65");
    }

    #[test]
    fn own_affinity_and_cpu() {
        let cpus = thread_affinity(0).unwrap();
        assert!(!cpus.is_empty());
        assert!(cpus.contains(current_cpu().unwrap()));
        assert!(gettid() > 0);
    }
}
