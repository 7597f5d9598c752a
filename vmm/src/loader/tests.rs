//! Tests of the kernel, initrd and command-line loaders.

use super::*;
use crate::kernel::decompress::tests::{kernel_payload, pvh_only_elf};
use vm_memory::GuestMemoryBackend;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn memory(bytes: u64) -> GuestMemoryMmap {
    GuestMemoryMmap::<()>::from_ranges(&crate::bootparams::ram_ranges(bytes)).unwrap()
}

/// `load_kernel` into 64 MiB, without a kernel cache.
fn load_plain(mem: &GuestMemoryMmap, path: &Path) -> Result<LoadedKernel, LoadError> {
    load_kernel(mem, path, 64 << 20, &DecompressOptions::default())
}

#[test]
fn probes_by_content() {
    let b = probe_kernel(&fixture("mini-bzimage-reset.bin")).unwrap();
    assert_eq!(b.format, KernelFormat::BzImage);
    let hdr = b.setup_header.unwrap();
    assert_eq!({ hdr.version }, 0x020f);
    assert_eq!({ hdr.code32_start }, 0x100000);
    let e = probe_kernel(&fixture("mini-pvh.elf")).unwrap();
    assert_eq!(e.format, KernelFormat::Elf);
    assert!(e.min_memory > layout::HIMEM_START);
}

#[test]
fn loads_bzimage_at_one_mib_with_64bit_entry() {
    let mem = memory(64 << 20);
    let k = load_plain(&mem, &fixture("mini-bzimage-reset.bin")).unwrap();
    assert_eq!(k.mode, EntryMode::Linux64);
    assert_eq!(k.entry, GuestAddress(0x100200));
    assert_eq!(k.cmdline_max, 2047);
    // The protected-mode code (file offset 0x400) is at 1 MiB.
    let file = std::fs::read(fixture("mini-bzimage-reset.bin")).unwrap();
    let mut got = vec![0u8; 64];
    mem.read_slice(&mut got, GuestAddress(0x100000)).unwrap();
    assert_eq!(got, file[0x400..0x440]);
    // The end covers init_size (0x7000) from the load address, which
    // lies past the image's own 0x380 bytes.
    assert!(k.end >= 0x100000 + 0x7000, "{:#x}", k.end);
    assert!(k.end > 0x100000 + (file.len() as u64 - 0x400));
}

#[test]
fn loads_pvh_entry_from_note() {
    let mem = memory(64 << 20);
    let k = load_plain(&mem, &fixture("mini-pvh.elf")).unwrap();
    assert_eq!(k.mode, EntryMode::Pvh);
    assert_eq!(k.entry, GuestAddress(0x100000));
    assert_eq!(k.format, KernelFormat::Elf);
}

/// mini-bzimage-reset.bin with `payload` appended and the setup
/// header's payload fields pointing at it.
fn bzimage_with_payload(tag: &str, payload: &[u8]) -> PathBuf {
    let mut bytes = std::fs::read(fixture("mini-bzimage-reset.bin")).unwrap();
    let setup = (u64::from(bytes[0x1f1]) + 1) * 512;
    let offset = bytes.len() as u64 - setup;
    bytes[0x248..0x24c].copy_from_slice(&(offset as u32).to_le_bytes());
    bytes[0x24c..0x250].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    bytes.extend_from_slice(payload);
    let path = std::env::temp_dir().join(format!("bootscope-bz-{tag}-{}", std::process::id()));
    std::fs::write(&path, bytes).unwrap();
    path
}

/// Longer than the cache index's settling time.
const SETTLE_WAIT: std::time::Duration = std::time::Duration::from_millis(150);

fn host_opts(cache: &Path) -> DecompressOptions {
    DecompressOptions {
        in_guest: false,
        cache_dir: Some(cache.to_path_buf()),
    }
}

#[test]
fn bzimage_payload_decompressed_on_the_host_and_entered_through_pvh() {
    let elf = pvh_only_elf();
    let payload = kernel_payload(Compression::Xz, &elf);
    let path = bzimage_with_payload("xz", &payload);
    // Left alone long enough for the cache's index to record it.
    std::thread::sleep(SETTLE_WAIT);
    let cache = tempfile::tempdir().unwrap();
    let mem = memory(64 << 20);
    let k = load_kernel(&mem, &path, 64 << 20, &host_opts(cache.path())).unwrap();
    assert_eq!(k.format, KernelFormat::BzImage);
    assert_eq!(k.mode, EntryMode::Pvh);
    assert_eq!(k.entry, GuestAddress(0x100000));
    assert_eq!(k.cmdline_max, 2047);
    assert!(
        k.setup_header.is_some(),
        "the zero page comes from the bzImage"
    );
    let boot = k.boot.clone().unwrap();
    assert_eq!(boot.decompressed_by, "host");
    assert_eq!(boot.compression.as_deref(), Some("xz"));
    assert_eq!(boot.entry, "pvh");
    assert_eq!(boot.kaslr, Some(false));
    assert_eq!(boot.cache.as_deref(), Some("miss"));
    assert_eq!(boot.decompressed_bytes, Some(elf.len() as u64));
    // The ELF's one segment (file offset 0x1000 in mini-pvh.elf's
    // layout, per its program header) is at its physical address.
    let seg = &probe_kernel(&fixture("mini-pvh.elf")).unwrap().segments[0];
    let mut got = vec![0u8; seg.filesz as usize];
    mem.read_slice(&mut got, GuestAddress(seg.paddr)).unwrap();
    assert_eq!(
        got,
        elf[seg.offset as usize..(seg.offset + seg.filesz) as usize]
    );
    // The cache holds the decompressed ELF under the payload's hash.
    let cached = boot.cache_file.unwrap();
    assert!(cached.starts_with(cache.path().to_str().unwrap()));
    assert_eq!(std::fs::read(&cached).unwrap(), elf);
    // Booted again: read from the cache, same bytes in guest memory.
    let mem2 = memory(64 << 20);
    let k2 = load_kernel(&mem2, &path, 64 << 20, &host_opts(cache.path())).unwrap();
    let boot2 = k2.boot.unwrap();
    assert_eq!(boot2.cache.as_deref(), Some("hit"));
    assert_eq!(boot2.hash_ns, None, "found by file identity, not hashed");
    let mut again = vec![0u8; seg.filesz as usize];
    mem2.read_slice(&mut again, GuestAddress(seg.paddr))
        .unwrap();
    assert_eq!(again, got);
    // A damaged cache entry is not trusted: decompressed again.
    std::fs::write(&cached, b"\x7fELF damaged").unwrap();
    let k3 = load_kernel(&memory(64 << 20), &path, 64 << 20, &host_opts(cache.path())).unwrap();
    let boot3 = k3.boot.unwrap();
    assert_eq!(boot3.cache.as_deref(), Some("rebuilt"));
    assert!(boot3.cache_note.unwrap().contains("size"));
    assert_eq!(std::fs::read(&cached).unwrap(), elf);
    let _ = std::fs::remove_file(path);
}

/// A kernel of `len` bytes: mini-pvh.elf followed by a pattern (bytes
/// past its segments, which the loader ignores).
fn big_elf(len: usize) -> Vec<u8> {
    let mut elf = pvh_only_elf();
    let mut x: u32 = 1;
    while elf.len() < len {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
        elf.push((x >> 16) as u8 & 0x0f);
    }
    elf
}

#[test]
fn a_cached_kernel_that_changed_is_rebuilt_and_the_timeline_says_so() {
    let elf = big_elf(16 << 20);
    let path = bzimage_with_payload("zeroed", &kernel_payload(Compression::Zstd, &elf));
    std::thread::sleep(SETTLE_WAIT);
    let cache = tempfile::tempdir().unwrap();
    let k = load_kernel(&memory(64 << 20), &path, 64 << 20, &host_opts(cache.path())).unwrap();
    let cached = PathBuf::from(k.boot.unwrap().cache_file.unwrap());
    // 5 MB zeroed in the middle: same size, still an ELF kernel.
    let mut damaged = std::fs::read(&cached).unwrap();
    let mid = damaged.len() / 2;
    damaged[mid - (5 << 19)..mid + (5 << 19)].fill(0);
    bootscope_model::cache::write_private(&cached, &damaged).unwrap();
    let rec = Arc::new(crate::timeline::Recorder::new(
        crate::timeline::Clock::start(),
    ));
    let prepared = prepare_kernel(&path, &host_opts(cache.path()), Some(rec.clone())).unwrap();
    let k2 = prepared.load(&memory(64 << 20), 64 << 20).unwrap();
    let boot = k2.boot.unwrap();
    assert_eq!(boot.cache.as_deref(), Some("rebuilt"));
    assert_eq!(boot.cache_note.as_deref(), Some("checksum mismatch"));
    let marks: Vec<String> = rec.snapshot().into_iter().map(|m| m.name).collect();
    assert!(
        marks.contains(&"vmm: kernel decompressed (cache: rebuilt, checksum mismatch)".into()),
        "{marks:?}"
    );
    assert_eq!(std::fs::read(&cached).unwrap(), elf, "rebuilt in place");
    // And then a hit again.
    let k3 = load_kernel(&memory(64 << 20), &path, 64 << 20, &host_opts(cache.path())).unwrap();
    assert_eq!(k3.boot.unwrap().cache.as_deref(), Some("hit"));
    let _ = std::fs::remove_file(path);
}

#[test]
fn a_changed_bzimage_misses_the_cache_index() {
    let elf = pvh_only_elf();
    let seg = probe_kernel(&fixture("mini-pvh.elf")).unwrap().segments[0];
    let at = seg.offset as usize;
    let mut other = elf.clone();
    // The first byte of the loaded segment changed.
    other[at] ^= 0xff;
    let path = bzimage_with_payload("changed", &kernel_payload(Compression::Gzip, &elf));
    std::thread::sleep(SETTLE_WAIT);
    let cache = tempfile::tempdir().unwrap();
    let first_byte = |mem: &GuestMemoryMmap| {
        let mut b = [0u8];
        mem.read_slice(&mut b, GuestAddress(seg.paddr)).unwrap();
        b[0]
    };
    let mem = memory(64 << 20);
    let k = load_kernel(&mem, &path, 64 << 20, &host_opts(cache.path())).unwrap();
    assert_eq!(k.boot.unwrap().cache.as_deref(), Some("miss"));
    assert_eq!(first_byte(&mem), elf[at]);
    // Rewritten in place with another kernel: hashed again, not the old
    // kernel from the index.
    let rewritten = bzimage_with_payload("changed", &kernel_payload(Compression::Gzip, &other));
    assert_eq!(rewritten, path);
    std::thread::sleep(SETTLE_WAIT);
    let mem2 = memory(64 << 20);
    let k2 = load_kernel(&mem2, &path, 64 << 20, &host_opts(cache.path())).unwrap();
    let boot = k2.boot.unwrap();
    assert_eq!(boot.cache.as_deref(), Some("miss"));
    assert!(boot.hash_ns.is_some());
    assert_eq!(first_byte(&mem2), other[at]);
    // And that file, unchanged, is then found by its identity.
    let k3 = load_kernel(&memory(64 << 20), &path, 64 << 20, &host_opts(cache.path())).unwrap();
    assert_eq!(k3.boot.unwrap().hash_ns, None);
    let _ = std::fs::remove_file(path);
}

#[test]
fn gzip_and_zstd_payloads_and_no_cache() {
    let elf = std::fs::read(fixture("mini-pvh.elf")).unwrap();
    for c in [Compression::Gzip, Compression::Zstd] {
        let path = bzimage_with_payload(c.name(), &kernel_payload(c, &elf));
        let k = load_plain(&memory(64 << 20), &path).unwrap();
        let boot = k.boot.unwrap();
        assert_eq!(boot.decompressed_by, "host", "{c:?}");
        assert_eq!(boot.compression.as_deref(), Some(c.name()));
        assert_eq!(boot.cache.as_deref(), Some("off"));
        // e_entry is a 64-bit entry here: preferred to the PVH note.
        assert_eq!(k.entry, GuestAddress(0x100000));
        assert_eq!(
            (k.mode, boot.entry.as_str()),
            (EntryMode::Linux64, "linux64")
        );
        assert_eq!(k.cmdline_max, 2047, "from the bzImage's setup header");
        let _ = std::fs::remove_file(path);
    }
}

#[test]
fn guest_decompression_on_request_or_when_the_host_cannot() {
    let elf = std::fs::read(fixture("mini-pvh.elf")).unwrap();
    let noentry = std::fs::read(fixture("mini-noentry.elf")).unwrap();
    let mut lz4 = vec![0x02, 0x21, 0x4c, 0x18];
    lz4.extend_from_slice(&[7; 60]);
    let cases = [
        (
            "asked",
            kernel_payload(Compression::Xz, &elf),
            true,
            "--guest-decompress",
        ),
        ("lz4", lz4, false, "lz4 payloads are not decompressed"),
        (
            "noentry",
            kernel_payload(Compression::Xz, &noentry),
            false,
            "has no usable entry",
        ),
    ];
    for (tag, payload, in_guest, why) in cases {
        let path = bzimage_with_payload(tag, &payload);
        let opts = DecompressOptions {
            in_guest,
            cache_dir: None,
        };
        let mem = memory(64 << 20);
        let k = load_kernel(&mem, &path, 64 << 20, &opts).unwrap();
        // The classic boot: protected-mode code at 1 MiB, 64-bit entry.
        assert_eq!(k.entry, GuestAddress(0x100200), "{tag}");
        assert_eq!(k.mode, EntryMode::Linux64);
        let boot = k.boot.unwrap();
        assert_eq!(boot.decompressed_by, "guest");
        assert_eq!(boot.entry, "bzimage-linux64");
        assert_eq!(boot.kaslr, Some(true));
        let reason = boot.reason.unwrap();
        assert!(reason.contains(why), "{tag}: {reason}");
        let _ = std::fs::remove_file(path);
    }
}

#[test]
fn corrupt_payload_is_refused() {
    let elf = std::fs::read(fixture("mini-pvh.elf")).unwrap();
    let mut payload = kernel_payload(Compression::Xz, &elf);
    let mid = payload.len() / 2;
    payload[mid] ^= 0xff;
    let path = bzimage_with_payload("corrupt", &payload);
    let mem = memory(64 << 20);
    let e = load_plain(&mem, &path).unwrap_err();
    assert!(
        matches!(
            e,
            LoadError::CorruptPayload {
                compression: "xz",
                ..
            }
        ),
        "{e}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains(path.to_str().unwrap()) && msg.contains("corrupt"),
        "{msg}"
    );
    // Nothing was written where the kernel would have gone.
    let mut got = [0u8; 64];
    mem.read_slice(&mut got, GuestAddress(0x100000)).unwrap();
    assert_eq!(got, [0; 64]);
    // A payload field running past the end of the file is corrupt too.
    let mut bytes = std::fs::read(&path).unwrap();
    let len = payload.len() as u32 + 4096;
    bytes[0x24c..0x250].copy_from_slice(&len.to_le_bytes());
    std::fs::write(&path, bytes).unwrap();
    let e = load_plain(&mem, &path).unwrap_err();
    assert!(matches!(e, LoadError::CorruptPayload { .. }), "{e}");
    let _ = std::fs::remove_file(path);
}

#[test]
fn rejects_bad_images() {
    let mem = memory(64 << 20);
    let err = |name: &str| load_plain(&mem, &fixture(name)).unwrap_err();
    assert!(matches!(
        err("not-a-kernel.bin"),
        LoadError::NotAKernel { .. }
    ));
    assert!(matches!(
        err("truncated-bzimage.bin"),
        LoadError::TruncatedBzImage {
            expected: 1920,
            actual: 600,
            ..
        }
    ));
    assert!(matches!(
        err("mini-noentry.elf"),
        LoadError::ElfNoEntry { .. }
    ));
    assert!(matches!(err("no-such-file"), LoadError::KernelRead { .. }));
    let msg = err("not-a-kernel.bin").to_string();
    assert!(
        msg.contains("not-a-kernel.bin") && msg.contains("bzImage"),
        "{msg}"
    );
}

/// mini-pvh.elf with its bytes patched: (offset, little-endian value).
fn patched_pvh(tag: &str, patches: &[(usize, &[u8])]) -> PathBuf {
    let mut bytes = std::fs::read(fixture("mini-pvh.elf")).unwrap();
    for (at, value) in patches {
        bytes[*at..*at + value.len()].copy_from_slice(value);
    }
    let path = std::env::temp_dir().join(format!("bootscope-{tag}-{}.elf", std::process::id()));
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn rejects_overlapping_segments_and_stray_entries() {
    let mem = memory(64 << 20);
    // Program headers at 64, 56 bytes each: the second (the PT_NOTE
    // inside the PT_LOAD) made loadable.
    let overlap = patched_pvh("overlap", &[(64 + 56, &1u32.to_le_bytes())]);
    let e = load_plain(&mem, &overlap).unwrap_err();
    assert!(matches!(e, LoadError::ElfOverlappingSegments { .. }), "{e}");
    assert!(e.to_string().contains("0x100000..0x1000d8"), "{e}");
    assert!(probe_kernel(&overlap).is_err());
    // The PT_LOAD moved to 0x200000: the PVH entry 0x100000 is left
    // outside it.
    let stray = patched_pvh("stray", &[(64 + 24, &0x200000u64.to_le_bytes())]);
    let e = load_plain(&mem, &stray).unwrap_err();
    assert!(
        matches!(
            e,
            LoadError::ElfEntryOutside {
                entry: 0x100000,
                ..
            }
        ),
        "{e}"
    );
    // The PT_LOAD moved below 1 MiB, over the boot structures.
    let low = patched_pvh("low", &[(64 + 24, &0xf0000u64.to_le_bytes())]);
    let e = load_plain(&mem, &low).unwrap_err();
    assert!(
        matches!(
            e,
            LoadError::ElfLowSegment {
                start: 0xf0000,
                end: 0xf00d8,
                ..
            }
        ),
        "{e}"
    );
    let _ = std::fs::remove_file(overlap);
    let _ = std::fs::remove_file(stray);
    let _ = std::fs::remove_file(low);
}

#[test]
fn initrd_goes_high_and_page_aligned() {
    let mem = memory(64 << 20);
    let k = load_plain(&mem, &fixture("mini-bzimage-reset.bin")).unwrap();
    let i = load_initrd(&mem, &fixture("mini-pvh.elf"), &k, 64 << 20, false).unwrap();
    assert!(!i.mapped_from_file);
    assert_eq!(i.addr % 4096, 0);
    assert!(i.addr + i.size <= 64 << 20);
    assert!(i.addr >= k.end);
    assert_eq!(
        i.size,
        std::fs::metadata(fixture("mini-pvh.elf")).unwrap().len()
    );
}

#[test]
fn initrd_mapped_from_file_reads_the_same_and_writes_stay_private() {
    let mem = memory(64 << 20);
    let k = load_plain(&mem, &fixture("mini-bzimage-reset.bin")).unwrap();
    let path = fixture("mini-bzimage-ports.bin");
    let i = load_initrd(&mem, &path, &k, 64 << 20, true).unwrap();
    assert!(i.mapped_from_file);
    let file = std::fs::read(&path).unwrap();
    let mut got = vec![0u8; file.len()];
    mem.read_slice(&mut got, GuestAddress(i.addr)).unwrap();
    assert_eq!(got, file);
    // Past the end of the file, the last page reads zeros.
    let mut tail = [0xffu8; 16];
    mem.read_slice(&mut tail, GuestAddress(i.addr + file.len() as u64))
        .unwrap();
    assert_eq!(tail, [0; 16]);
    // A guest write does not reach the file.
    mem.write_slice(b"XXXX", GuestAddress(i.addr)).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), file);
}

#[test]
fn cmdline_limits() {
    let mem = memory(64 << 20);
    load_cmdline(&mem, "console=ttyS0", 2047).unwrap();
    let mut got = [0u8; 14];
    mem.read_slice(&mut got, GuestAddress(layout::CMDLINE_START))
        .unwrap();
    assert_eq!(&got, b"console=ttyS0\0");
    assert!(matches!(
        load_cmdline(&mem, &"x".repeat(2048), 2047),
        Err(LoadError::CmdlineTooLong {
            len: 2048,
            max: 2047
        })
    ));
    // A header's cmdline_size beyond the room reserved for the command
    // line does not let a longer one overwrite what follows it.
    let long = "x".repeat(layout::CMDLINE_MAX_SIZE);
    assert!(matches!(
        load_cmdline(&mem, &long, u32::MAX as usize),
        Err(LoadError::CmdlineTooLong { max, .. }) if max == layout::CMDLINE_MAX_SIZE - 1
    ));
    assert!(matches!(
        load_cmdline(&mem, "a\0b", 2047),
        Err(LoadError::CmdlineInvalid)
    ));
    assert!(mem.num_regions() >= 1);
}
