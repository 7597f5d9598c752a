//! Reading a whole eBPF hash or array map in a few system calls.
//!
//! aya iterates a hash map entry by entry: a `BPF_MAP_GET_NEXT_KEY` and a
//! `BPF_MAP_LOOKUP_ELEM` per entry, two system calls each. The collector
//! reads its counting maps at every sample, and where every instruction is
//! emulated (the lab) those calls are a measurable part of the profiler's
//! cost to the boot. `BPF_MAP_LOOKUP_BATCH` (Linux 5.6) copies up to a
//! chunk of entries per call.
//!
//! [`read`] uses it where the kernel has it and says `Unsupported` where it
//! does not, so that the caller falls back to aya's iterator; after a first
//! refusal it does not try again.

use std::io;
use std::mem::size_of;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, Ordering};

use aya::maps::MapData;
use aya::Pod;
use aya_obj::generated::{bpf_attr, bpf_cmd};

/// Set once the kernel refused a batch read: later reads go straight to the
/// iterator.
static UNSUPPORTED: AtomicBool = AtomicBool::new(false);

/// Entries asked for by a call: a few pages of buffer (272-byte histograms:
/// 17 KiB), each page costly to fault in the first time where every
/// instruction is emulated; a map of a few hundred entries takes a few
/// calls. A bucket holding more than a chunk makes the kernel refuse with
/// ENOSPC, and the chunk is doubled.
const FIRST_CHUNK: usize = 64;

/// Largest chunk tried before giving up (a bucket of this many entries
/// would be a broken hash).
const MAX_CHUNK: usize = 1 << 20;

/// Whether an error means "this kernel cannot batch this map" (unknown
/// command on kernels before 5.6, or a map type without batch operations):
/// the caller should iterate instead.
fn is_unsupported(e: &io::Error) -> bool {
    // 524 is the kernel's internal ENOTSUPP, which reaches userspace as is.
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL | libc::EOPNOTSUPP | 524)
    )
}

/// Every entry of a hash (or LRU hash) map whose key and value are `K` and
/// `V` (the caller has checked the sizes, e.g. with aya's `HashMap::try_from`).
///
/// `Err` of kind `Unsupported` where the kernel has no batch read for it:
/// read the map with aya's iterator instead. Entries added or changed while
/// the read goes on may or may not be seen, as with the iterator.
pub fn read<K: Pod, V: Pod>(map: &MapData) -> io::Result<Vec<(K, V)>> {
    read_from(map, FIRST_CHUNK)
}

/// Entries asked for by a call on an array: all of a small one at once, a
/// large one (a guest's per-region counts: thousands of entries) in a few
/// calls of at most this many.
const ARRAY_CHUNK: usize = 2048;

/// Every entry of an array map (index, value) whose values are `V` (the
/// caller has checked the size, e.g. with aya's `Array::try_from`), in
/// chunks of up to [`ARRAY_CHUNK`] entries; `Err` as [`read`].
pub fn read_array<V: Pod>(map: &MapData, entries: u32) -> io::Result<Vec<(u32, V)>> {
    read_from(map, (entries as usize).clamp(1, ARRAY_CHUNK))
}

/// A batch read starting with `first_chunk` entries a call, unless the
/// kernel refused one before.
fn read_from<K: Pod, V: Pod>(map: &MapData, first_chunk: usize) -> io::Result<Vec<(K, V)>> {
    if UNSUPPORTED.load(Ordering::Relaxed) {
        return Err(io::ErrorKind::Unsupported.into());
    }
    let fd = map.fd().as_fd().as_raw_fd();
    SCRATCH.with_borrow_mut(|buf| read_with::<K, V>(fd, buf, first_chunk))
}

thread_local! {
    /// Where the kernel copies entries: kept from read to read, as a buffer
    /// allocated afresh each time is mapped afresh, and each of its pages
    /// the kernel writes is a page fault (costly where every instruction is
    /// emulated).
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn read_with<K: Pod, V: Pod>(
    fd: i32,
    buf: &mut Vec<u8>,
    first_chunk: usize,
) -> io::Result<Vec<(K, V)>> {
    let (ksize, vsize) = (size_of::<K>(), size_of::<V>());
    let mut out = Vec::new();
    let mut chunk = first_chunk;
    // The position between calls (a bucket index for hash maps: 4 bytes;
    // room for 8).
    let mut in_batch = 0u64;
    let mut out_batch = 0u64;
    let mut first = true;
    loop {
        // Keys first, then values.
        if buf.len() < chunk * (ksize + vsize) {
            buf.resize(chunk * (ksize + vsize), 0);
        }
        let (keys, values) = buf.split_at_mut(chunk * ksize);
        // SAFETY: bpf_attr is plain data (integers and unions of them); all
        // zeroes is its "nothing set" value.
        let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
        // Writing a union's field is safe; batch is the member
        // BPF_MAP_LOOKUP_BATCH reads.
        attr.batch.map_fd = fd as u32;
        attr.batch.in_batch = if first {
            0
        } else {
            &in_batch as *const u64 as u64
        };
        attr.batch.out_batch = &mut out_batch as *mut u64 as u64;
        attr.batch.keys = keys.as_mut_ptr() as u64;
        attr.batch.values = values.as_mut_ptr() as u64;
        attr.batch.count = chunk as u32;
        // SAFETY: attr is a valid bpf_attr; the kernel writes at most
        // `count` keys and values into buffers sized for `chunk` of each,
        // the position into out_batch, and the count back into attr.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                bpf_cmd::BPF_MAP_LOOKUP_BATCH as libc::c_long,
                &mut attr as *mut bpf_attr,
                size_of::<bpf_attr>() as libc::c_uint,
            )
        };
        let err = (ret < 0).then(io::Error::last_os_error);
        // SAFETY: reading back the member written above (and by the kernel).
        let n = (unsafe { attr.batch.count } as usize).min(chunk);
        let done = match err {
            None => false,
            // The end of the map: `n` entries came with it.
            Some(e) if e.raw_os_error() == Some(libc::ENOENT) => true,
            Some(e) if e.raw_os_error() == Some(libc::ENOSPC) && n == 0 => {
                if chunk >= MAX_CHUNK {
                    return Err(io::Error::other(format!(
                        "a bucket of the map holds over {MAX_CHUNK} entries"
                    )));
                }
                chunk *= 2;
                continue;
            }
            Some(e) if first && is_unsupported(&e) => {
                UNSUPPORTED.store(true, Ordering::Relaxed);
                return Err(io::ErrorKind::Unsupported.into());
            }
            Some(e) => return Err(e),
        };
        for i in 0..n {
            // SAFETY: entry i lies within the first n (<= chunk) entries of
            // each buffer; K and V are Pod, so any bytes are a valid value;
            // read_unaligned as a Vec<u8> promises no alignment.
            let (k, v) = unsafe {
                (
                    std::ptr::read_unaligned(keys.as_ptr().add(i * ksize) as *const K),
                    std::ptr::read_unaligned(values.as_ptr().add(i * vsize) as *const V),
                )
            };
            out.push((k, v));
        }
        if done {
            return Ok(out);
        }
        in_batch = out_batch;
        first = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use aya::maps::{HashMap, IterableMap, Map};
    use aya_obj::generated::bpf_map_type;
    use std::collections::BTreeMap;

    /// A map the batch read must see exactly as aya's iterator does: more
    /// entries than one chunk (several calls), values wider than a word.
    fn check_map(map: Map, n: u64) {
        let mut h = HashMap::<MapData, u64, [u64; 5]>::try_from(map).unwrap();
        for k in 0..n {
            let key = k.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            h.insert(key, [k, k + 1, k + 2, k + 3, !k], 0).unwrap();
        }
        let batch: BTreeMap<u64, [u64; 5]> = read::<u64, [u64; 5]>(h.map())
            .expect("batch read (Linux 5.6+)")
            .into_iter()
            .collect();
        let iterated: BTreeMap<u64, [u64; 5]> = h.iter().map(Result::unwrap).collect();
        assert_eq!(batch.len() as u64, n);
        assert_eq!(batch, iterated);
    }

    /// Creates a map, or None (printing why) where this process may not.
    fn create(kind: bpf_map_type, name: &str) -> Option<MapData> {
        let obj = aya_obj::Map::new_from_params(kind as u32, 8, 40, 4096, 0);
        match MapData::create(obj, name, None) {
            Ok(m) => Some(m),
            Err(e) if !bootscope_testkit::is_root() => {
                eprintln!("SKIP: creating an eBPF map needs root or CAP_BPF ({e})");
                None
            }
            Err(e) => panic!("creating an eBPF map as root: {e}"),
        }
    }

    #[test]
    fn batch_read_equals_the_iterator() {
        let Some(m) = create(bpf_map_type::BPF_MAP_TYPE_HASH, "bs_t_hash") else {
            return;
        };
        check_map(Map::HashMap(m), 3000);
        let Some(m) = create(bpf_map_type::BPF_MAP_TYPE_LRU_HASH, "bs_t_lru") else {
            return;
        };
        check_map(Map::LruHashMap(m), 1000);
        let empty = create(bpf_map_type::BPF_MAP_TYPE_HASH, "bs_t_empty").unwrap();
        assert!(read::<u64, [u64; 5]>(&empty).unwrap().is_empty());
    }

    #[test]
    fn an_array_is_read_whole_in_chunks() {
        // 5,000 entries: three calls of 2,048.
        let obj =
            aya_obj::Map::new_from_params(bpf_map_type::BPF_MAP_TYPE_ARRAY as u32, 4, 16, 5000, 0);
        let m = match MapData::create(obj, "bs_t_array", None) {
            Ok(m) => m,
            Err(e) if !bootscope_testkit::is_root() => {
                eprintln!("SKIP: creating an eBPF map needs root or CAP_BPF ({e})");
                return;
            }
            Err(e) => panic!("creating an eBPF map as root: {e}"),
        };
        let mut a = aya::maps::Array::<MapData, [u64; 2]>::try_from(Map::Array(m)).unwrap();
        for i in (0..5000u32).step_by(7) {
            a.set(i, [u64::from(i), !u64::from(i)], 0).unwrap();
        }
        let all = read_array::<[u64; 2]>(a.map(), a.len()).expect("batch read (Linux 5.6+)");
        assert_eq!(all.len(), 5000);
        for (n, (i, v)) in all.iter().enumerate() {
            assert_eq!(*i as usize, n);
            let want = if i % 7 == 0 {
                [u64::from(*i), !u64::from(*i)]
            } else {
                [0, 0]
            };
            assert_eq!(*v, want, "entry {i}");
        }
    }

    #[test]
    fn refusals_that_mean_iterate_instead() {
        for code in [libc::EINVAL, libc::EOPNOTSUPP, 524] {
            assert!(is_unsupported(&io::Error::from_raw_os_error(code)));
        }
        for code in [libc::EPERM, libc::ENOENT, libc::EFAULT, libc::EBADF] {
            assert!(!is_unsupported(&io::Error::from_raw_os_error(code)));
        }
    }
}
