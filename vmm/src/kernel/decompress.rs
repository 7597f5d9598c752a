//! Decompressing a bzImage's payload on the host.
//!
//! A bzImage is a small real-mode/protected-mode decompressor followed by a
//! compressed ELF `vmlinux` (the "payload", located by the setup header's
//! `payload_offset` and `payload_length`; the build appends the
//! decompressed size as four little-endian bytes). Booted the classic way,
//! the guest runs the decompressor itself, which takes seconds where guest
//! instructions are slow (nested virtualization) and real time anywhere.
//! Here the VMM decompresses the payload instead, checks that the result is
//! an x86-64 ELF with a usable entry (a PVH note or a 64-bit `e_entry`);
//! [`super::cache`] keeps it, keyed by the payload's SHA-256, so that later
//! boots of the same kernel skip the work.
//!
//! Supported: xz (Debian's and most distributions' choice), gzip and zstd.
//! Other compressions (lzma, bzip2, lzo, lz4) are reported as unusable and
//! the caller lets the guest decompress. A payload that claims a supported
//! compression but does not decompress (bad checksum, truncated stream,
//! wrong size) is corrupt: the guest's decompressor would fail on it too.

use std::io::Read;

use linux_loader::loader::bootparam::setup_header;

use super::elf::{self, ElfError, ElfSegment, EntryMode};

/// The largest decompressed kernel accepted (the size trailer of anything
/// larger is not a kernel's).
pub const MAX_DECOMPRESSED: u64 = 1 << 30;
/// Lowest entry address of a 64-bit kernel (1 MiB).
const MIN_ENTRY: u64 = 0x10_0000;

/// The compression of a bzImage payload, recognized by its magic bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    Xz,
    Gzip,
    Zstd,
    Lzma,
    Bzip2,
    Lzo,
    Lz4,
}

impl Compression {
    /// Recognizes the compression from the first bytes of the payload.
    pub fn detect(payload: &[u8]) -> Option<Compression> {
        let starts = |magic: &[u8]| payload.starts_with(magic);
        Some(if starts(&[0xfd, b'7', b'z', b'X', b'Z', 0]) {
            Compression::Xz
        } else if starts(&[0x1f, 0x8b]) {
            Compression::Gzip
        } else if starts(&[0x28, 0xb5, 0x2f, 0xfd]) {
            Compression::Zstd
        } else if starts(&[0x5d, 0, 0]) {
            Compression::Lzma
        } else if starts(b"BZh") {
            Compression::Bzip2
        } else if starts(&[0x89, b'L', b'Z', b'O']) {
            Compression::Lzo
        } else if starts(&[0x02, 0x21, 0x4c, 0x18]) {
            Compression::Lz4
        } else {
            return None;
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Compression::Xz => "xz",
            Compression::Gzip => "gzip",
            Compression::Zstd => "zstd",
            Compression::Lzma => "lzma",
            Compression::Bzip2 => "bzip2",
            Compression::Lzo => "lzo",
            Compression::Lz4 => "lz4",
        }
    }

    /// The compression called `name` (as [`Compression::name`] says it).
    pub fn from_name(name: &str) -> Option<Compression> {
        use Compression::*;
        [Xz, Gzip, Zstd, Lzma, Bzip2, Lzo, Lz4]
            .into_iter()
            .find(|c| c.name() == name)
    }

    /// Whether the host can decompress it.
    pub fn supported(self) -> bool {
        matches!(
            self,
            Compression::Xz | Compression::Gzip | Compression::Zstd
        )
    }
}

/// Why the host could not produce the kernel from a bzImage's payload.
#[derive(Debug, thiserror::Error)]
pub enum PayloadError {
    /// The host cannot use this payload (an unsupported compression, no
    /// payload fields, a result without a usable entry); the guest's own
    /// decompressor may still boot it.
    #[error("{0}")]
    Unusable(String),
    /// The payload is damaged: it does not decompress to the size the image
    /// declares. Booting it would have the guest run garbage.
    #[error("its {compression} payload is corrupt: {detail}")]
    Corrupt {
        compression: &'static str,
        detail: String,
    },
    /// The kernel file could not be read.
    #[error("{0}")]
    Read(#[source] std::io::Error),
}

fn corrupt(c: Compression, detail: impl Into<String>) -> PayloadError {
    PayloadError::Corrupt {
        compression: c.name(),
        detail: detail.into(),
    }
}

/// The payload bytes of a bzImage (`image` is the whole file).
pub fn payload<'a>(image: &'a [u8], hdr: &setup_header) -> Result<&'a [u8], PayloadError> {
    let version = hdr.version;
    if version < 0x0208 {
        return Err(PayloadError::Unusable(format!(
            "boot protocol {version:#06x} has no payload fields (2.08 or later needed)"
        )));
    }
    let setup_sects = if hdr.setup_sects == 0 {
        4
    } else {
        u64::from(hdr.setup_sects)
    };
    let start = (setup_sects + 1) * 512 + u64::from(hdr.payload_offset);
    let len = u64::from(hdr.payload_length);
    if len == 0 {
        return Err(PayloadError::Unusable(
            "the setup header gives no payload (payload_length is 0)".into(),
        ));
    }
    let end = start.saturating_add(len);
    if end > image.len() as u64 {
        return Err(PayloadError::Corrupt {
            compression: "compressed",
            detail: format!(
                "the header puts it at bytes {start}..{end} but the file has {}",
                image.len()
            ),
        });
    }
    Ok(&image[start as usize..end as usize])
}

/// The decompressed size the build appended to the payload (its last four
/// bytes, little-endian).
pub fn declared_size(payload: &[u8]) -> Option<u64> {
    let tail: [u8; 4] = payload
        .get(payload.len().checked_sub(4)?..)?
        .try_into()
        .ok()?;
    Some(u64::from(u32::from_le_bytes(tail)))
}

/// Decompresses a payload, checking the result against the size trailer.
pub fn decompress(payload: &[u8]) -> Result<(Compression, Vec<u8>), PayloadError> {
    let c = Compression::detect(payload).ok_or_else(|| {
        PayloadError::Unusable(format!(
            "the payload's compression is not recognized (it starts with {})",
            hex(&payload[..payload.len().min(6)])
        ))
    })?;
    if !c.supported() {
        return Err(PayloadError::Unusable(format!(
            "{} payloads are not decompressed on the host (xz, gzip and zstd are)",
            c.name()
        )));
    }
    let expected = declared_size(payload).ok_or_else(|| corrupt(c, "it is too short"))?;
    if expected == 0 || expected > MAX_DECOMPRESSED {
        return Err(corrupt(
            c,
            format!("its size trailer says {expected} bytes"),
        ));
    }
    // Read one byte more than declared, to notice a longer stream.
    let limit = expected + 1;
    let mut out = Vec::with_capacity(expected as usize);
    let result = match c {
        Compression::Xz => xz_single_stream(payload, limit, &mut out),
        Compression::Gzip => flate2::bufread::GzDecoder::new(payload)
            .take(limit)
            .read_to_end(&mut out),
        Compression::Zstd => zstd::stream::read::Decoder::with_buffer(payload)
            .map(|d| d.single_frame())
            .and_then(|d| d.take(limit).read_to_end(&mut out)),
        _ => unreachable!("checked supported above"),
    };
    if let Err(e) = result {
        return Err(corrupt(c, e.to_string()));
    }
    if out.len() as u64 != expected {
        return Err(corrupt(
            c,
            format!(
                "it decompresses to {}{} bytes, but its size trailer says {expected}",
                out.len(),
                if out.len() as u64 == limit {
                    " or more"
                } else {
                    ""
                }
            ),
        ));
    }
    Ok((c, out))
}

/// Decodes the one xz stream at the start of `input` (the kernel's size
/// trailer follows it) into `out`, at most `limit` bytes.
fn xz_single_stream(input: &[u8], limit: u64, out: &mut Vec<u8>) -> std::io::Result<usize> {
    use xz2::stream::{Action, Status, Stream};
    let mut stream = Stream::new_stream_decoder(u64::MAX, 0)?;
    out.reserve_exact((limit as usize).saturating_sub(out.len()));
    loop {
        let (before_in, before_out) = (stream.total_in(), out.len());
        let rest = &input[before_in as usize..];
        let action = if rest.is_empty() {
            Action::Finish
        } else {
            Action::Run
        };
        if stream.process_vec(rest, out, action)? == Status::StreamEnd {
            return Ok(out.len());
        }
        if out.len() as u64 >= limit {
            // As much as allowed: the caller reports the size mismatch.
            return Ok(out.len());
        }
        if stream.total_in() == before_in && out.len() == before_out {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the xz stream ends early",
            ));
        }
    }
}

/// Lower-case hexadecimal of `bytes`.
pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What the loader needs of a decompressed vmlinux.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ElfKernel {
    /// Where and how the boot vCPU enters it.
    pub entry: u64,
    pub mode: EntryMode,
    pub segments: Vec<ElfSegment>,
    /// First byte past the highest segment.
    pub end: u64,
}

/// Checks that `elf` is an x86-64 kernel the VMM can enter, and how: at its
/// 64-bit `e_entry` (Linux 64-bit boot protocol) when that lies in a
/// loadable segment, else through its PVH note. The error says what is
/// missing.
pub fn inspect_elf(elf: &[u8]) -> Result<ElfKernel, String> {
    let h = elf::read_headers(elf).map_err(|e| {
        match e {
            ElfError::NotElf => "the decompressed payload is not an ELF file",
            ElfError::Truncated => "the decompressed ELF header is truncated",
            ElfError::Not64 | ElfError::Unsupported | ElfError::WrongMachine(_) => {
                "the decompressed payload is not an x86-64 ELF64 kernel"
            }
            ElfError::ProgramHeaders => {
                "the decompressed ELF's program headers are outside the file"
            }
        }
        .to_string()
    })?;
    if let Some((i, _)) = h.past_end.first() {
        return Err(format!(
            "the decompressed ELF's segment {i} runs past the end of the file"
        ));
    }
    if h.segments.is_empty() {
        return Err("the decompressed ELF has no loadable segment".into());
    }
    let mut ranges: Vec<(u64, u64)> = h.segments.iter().map(ElfSegment::range).collect();
    ranges.sort_unstable();
    if ranges.windows(2).any(|w| w[1].0 < w[0].1) {
        return Err("the decompressed ELF has overlapping loadable segments".into());
    }
    let end = ranges.iter().map(|r| r.1).max().unwrap_or(0);
    let inside = |a: u64| ranges.iter().any(|r| (r.0..r.1).contains(&a));
    let (e_entry, pvh) = (h.entry, h.pvh_entry);
    // A bzImage's vmlinux has its 64-bit entry (startup_64) at e_entry:
    // entered there with a zero page, the kernel skips the PVH path's probe
    // for Xen (256 CPUID leaves, each a VM exit). The PVH note serves
    // when e_entry does not.
    let (entry, mode) = if e_entry >= MIN_ENTRY && inside(e_entry) {
        (e_entry, EntryMode::Linux64)
    } else if let Some(e) = pvh.filter(|&e| inside(e)) {
        (e, EntryMode::Pvh)
    } else {
        return Err(format!(
            "the decompressed ELF has no usable entry (e_entry {e_entry:#x} is not a 64-bit \
             entry inside its segments, and {})",
            match pvh {
                Some(e) => format!("its PVH entry {e:#x} lies outside them"),
                None => "it has no PVH note".to_string(),
            }
        ));
    };
    Ok(ElfKernel {
        entry,
        mode,
        segments: h.segments,
        end,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io::Write;
    use std::path::PathBuf;

    fn pvh_elf() -> Vec<u8> {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mini-pvh.elf");
        std::fs::read(path).unwrap()
    }

    /// `data` compressed as the kernel build does: the stream, then the
    /// decompressed size as four little-endian bytes.
    pub(crate) fn kernel_payload(c: Compression, data: &[u8]) -> Vec<u8> {
        let mut out = match c {
            Compression::Xz => {
                let mut e = xz2::write::XzEncoder::new(Vec::new(), 6);
                e.write_all(data).unwrap();
                e.finish().unwrap()
            }
            Compression::Gzip => {
                let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
                e.write_all(data).unwrap();
                e.finish().unwrap()
            }
            Compression::Zstd => {
                // With a checksum, as the zstd command the kernel build
                // runs writes by default.
                let mut e = zstd::stream::Encoder::new(Vec::new(), 19).unwrap();
                e.include_checksum(true).unwrap();
                e.write_all(data).unwrap();
                e.finish().unwrap()
            }
            other => panic!("no encoder for {other:?}"),
        };
        out.extend_from_slice(&(data.len() as u32).to_le_bytes());
        out
    }

    #[test]
    fn detects_every_kernel_compression_by_magic() {
        let cases: [(&[u8], Compression); 7] = [
            (&[0xfd, b'7', b'z', b'X', b'Z', 0, 0], Compression::Xz),
            (&[0x1f, 0x8b, 8], Compression::Gzip),
            (&[0x28, 0xb5, 0x2f, 0xfd, 0], Compression::Zstd),
            (&[0x5d, 0, 0, 0x80], Compression::Lzma),
            (b"BZh9", Compression::Bzip2),
            (&[0x89, b'L', b'Z', b'O', 0], Compression::Lzo),
            (&[0x02, 0x21, 0x4c, 0x18], Compression::Lz4),
        ];
        for (magic, c) in cases {
            assert_eq!(Compression::detect(magic), Some(c), "{magic:02x?}");
        }
        assert_eq!(Compression::detect(b"\x7fELF"), None);
    }

    #[test]
    fn decompresses_xz_gzip_and_zstd_to_the_declared_size() {
        let elf = pvh_elf();
        for c in [Compression::Xz, Compression::Gzip, Compression::Zstd] {
            let (got_c, got) = decompress(&kernel_payload(c, &elf)).unwrap();
            assert_eq!(got_c, c);
            assert_eq!(got, elf, "{c:?}");
        }
    }

    #[test]
    fn unsupported_compressions_are_unusable_not_corrupt() {
        let mut lz4 = vec![0x02, 0x21, 0x4c, 0x18];
        lz4.extend_from_slice(&[0; 32]);
        let e = decompress(&lz4).unwrap_err();
        assert!(
            matches!(&e, PayloadError::Unusable(m) if m.contains("lz4")),
            "{e}"
        );
        let e = decompress(b"no magic here at all").unwrap_err();
        assert!(matches!(e, PayloadError::Unusable(_)), "{e}");
    }

    #[test]
    fn damaged_payloads_are_corrupt() {
        let elf = pvh_elf();
        for c in [Compression::Xz, Compression::Gzip, Compression::Zstd] {
            let good = kernel_payload(c, &elf);
            // A flipped byte in the middle of the stream.
            let mut flipped = good.clone();
            let mid = flipped.len() / 2;
            flipped[mid] ^= 0x55;
            // The stream cut short (the size trailer kept).
            let mut cut = good[..good.len() / 2].to_vec();
            cut.extend_from_slice(&good[good.len() - 4..]);
            // A size trailer that disagrees with the stream.
            let mut wrong = good.clone();
            let n = wrong.len();
            wrong[n - 4..].copy_from_slice(&(elf.len() as u32 + 7).to_le_bytes());
            for (what, p) in [("flipped", flipped), ("cut", cut), ("wrong size", wrong)] {
                let e = decompress(&p).unwrap_err();
                assert!(
                    matches!(e, PayloadError::Corrupt { compression, .. } if compression == c.name()),
                    "{c:?} {what}: {e}"
                );
            }
        }
    }

    /// mini-pvh.elf with e_entry 0: only its PVH note is an entry.
    pub(crate) fn pvh_only_elf() -> Vec<u8> {
        let mut elf = pvh_elf();
        elf[24..32].copy_from_slice(&0u64.to_le_bytes());
        elf
    }

    #[test]
    fn inspects_entries_preferring_the_64bit_one() {
        // mini-pvh.elf: e_entry 0x100000 inside its segment, and a PVH note.
        let k = inspect_elf(&pvh_elf()).unwrap();
        assert_eq!((k.entry, k.mode), (0x100000, EntryMode::Linux64));
        assert_eq!(k.segments.len(), 1);
        let k = inspect_elf(&pvh_only_elf()).unwrap();
        assert_eq!((k.entry, k.mode), (0x100000, EntryMode::Pvh));
        let noentry = std::fs::read(
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mini-noentry.elf"),
        )
        .unwrap();
        let e = inspect_elf(&noentry).unwrap_err();
        assert!(
            e.contains("no usable entry") && e.contains("no PVH note"),
            "{e}"
        );
        assert!(inspect_elf(b"plain text").is_err());
    }
}
