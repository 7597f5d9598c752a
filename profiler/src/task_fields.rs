//! Where a few kernel structure fields lie in this kernel, found in its
//! BTF (`/sys/kernel/btf/vmlinux`, and a module's split BTF beside it) by
//! the workspace's BTF reader ([`bootscope_model::btf`]), which indexes
//! the type records in one pass and decodes only the structure asked for.
//!
//! The fault-tail collector reads the thread's fault counters
//! (`task_struct` `min_flt`, `maj_flt`) and a served guest fault's frame
//! (`kvm_page_fault` `gfn`, the raw tracepoint's argument) at offsets
//! given to it as globals, so the object is not relocated against the
//! kernel's BTF (CO-RE): aya's loader parses every type of the 5 MB file
//! into memory for that, the largest part of the profiler's start-up,
//! where this pass only walks the records (a few milliseconds) and keeps
//! nothing but the offsets, in a record verified against the file before
//! each use.

use std::path::{Path, PathBuf};

use bootscope_model::btf::{kind, Btf, Layout, Member, Record, MEMBER_BYTES, RECORD_BYTES};

/// A field of a structure: its byte offset and size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    pub offset: u32,
    pub size: u32,
}

/// `task_struct`'s fault counters in this kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaultCounters {
    pub min_flt: Field,
    pub maj_flt: Field,
}

const COUNTERS: [&str; 2] = ["min_flt", "maj_flt"];

/// `task_struct`'s `min_flt` and `maj_flt` from the BTF at `path`: both
/// must be there, 8-byte integers on byte boundaries, else the reason.
pub fn fault_counters(path: &Path) -> Result<FaultCounters, String> {
    scan(path, "task_struct", &COUNTERS).map(|(f, _)| counters(&f))
}

/// [`fault_counters`] through a record of where they were found (`cache`,
/// a file of the cache directory): see [`fields_cached`].
pub fn fault_counters_cached(path: &Path, cache: Option<&Path>) -> Result<FaultCounters, String> {
    fields_cached(path, cache, "task_struct", &COUNTERS).map(|f| counters(&f))
}

fn counters(f: &[Field]) -> FaultCounters {
    FaultCounters {
        min_flt: f[0],
        maj_flt: f[1],
    }
}

/// The 8-byte fields `wanted` (at most [`MAX_WANTED`]) of `struct name`
/// in the BTF at `path`, through a record of where they were found
/// (`cache`, a file of the cache directory), verified against the file
/// before use: the same BTF header and length, and at the place recorded
/// a record of `struct name` whose members there are named as wanted at
/// the offsets recorded. That reads a few hundred bytes of the file
/// instead of all of it. A record that does not verify is replaced; one
/// that cannot be written only costs the next profile the whole pass.
pub fn fields_cached(
    path: &Path,
    cache: Option<&Path>,
    name: &str,
    wanted: &[&str],
) -> Result<Vec<Field>, String> {
    fields_cached_over(None, path, cache, name, wanted)
}

/// [`fields_cached`] of the BTF at `path`, split BTF over the one at
/// `base` where given ([`split_scan`]).
fn fields_cached_over(
    base: Option<&Path>,
    path: &Path,
    cache: Option<&Path>,
    name: &str,
    wanted: &[&str],
) -> Result<Vec<Field>, String> {
    if let Some(found) = cache.and_then(|c| cached(base, path, c, name, wanted)) {
        return Ok(found);
    }
    let (found, place) = match base {
        Some(base) => split_scan(base, path, name, wanted)?,
        None => scan(path, name, wanted)?,
    };
    if let Some(c) = cache {
        let _ = bootscope_model::output::write_file_with_mode(c, place.to_text().as_bytes(), 0o600);
    }
    Ok(found)
}

/// Fields a record may name.
pub const MAX_WANTED: usize = 4;

/// The whole pass over the file, with where the fields were found.
fn scan(path: &Path, name: &str, wanted: &[&str]) -> Result<(Vec<Field>, Place), String> {
    let at = |e: String| format!("{}: {e}", path.display());
    if wanted.is_empty() || wanted.len() > MAX_WANTED {
        return Err(at(format!("{} fields asked for", wanted.len())));
    }
    let data = std::fs::read(path).map_err(|e| at(e.to_string()))?;
    let len = data.len() as u64;
    let header: Option<[u8; 24]> = data.get(..24).and_then(|h| h.try_into().ok());
    let btf = Btf::from_vec(data).map_err(at)?;
    let (record, fields, members) = locate(&btf, name, wanted).map_err(at)?;
    for (w, f) in wanted.iter().zip(&fields) {
        if f.size != 8 {
            return Err(at(format!("{name}.{w} is {} bytes, not 8", f.size)));
        }
    }
    let place = Place {
        name: name.to_string(),
        wanted: wanted.iter().map(|w| w.to_string()).collect(),
        header: header.ok_or_else(|| at("shorter than a BTF header".into()))?,
        len,
        record: record as u64,
        members,
        offsets: fields.iter().map(|f| f.offset).collect(),
    };
    Ok((fields, place))
}

/// `struct kvm_page_fault`'s `gfn`, the frame a guest fault maps (the
/// raw `kvmmmu:kvm_mmu_spte_requested` tracepoint's one argument is the
/// fault): from KVM's module BTF (`kvm` beside `vmlinux` in `btf_dir`,
/// split BTF over the kernel's), else from the kernel's own (KVM built
/// in) through the record at `cache`. With the BTF it was found in.
pub fn kvm_fault_gfn(btf_dir: &Path, cache: Option<&Path>) -> Result<(Field, PathBuf), String> {
    let (vmlinux, module) = (btf_dir.join("vmlinux"), btf_dir.join("kvm"));
    let (base, from) = match module.exists() {
        true => (Some(vmlinux.as_path()), module.clone()),
        false => (None, vmlinux.clone()),
    };
    let f = fields_cached_over(base, &from, cache, "kvm_page_fault", &["gfn"])?;
    Ok((f[0], from))
}

/// The string section of the BTF at `base` (its file, and where the
/// section lies in it), for names a split BTF takes from it.
fn base_strings(base: &Path) -> Result<(std::fs::File, std::ops::Range<usize>), String> {
    use std::os::unix::fs::FileExt;
    let at = |e: std::io::Error| format!("{}: {e}", base.display());
    let file = std::fs::File::open(base).map_err(at)?;
    let len = file.metadata().map_err(at)?.len();
    let mut header = [0u8; 24];
    file.read_exact_at(&mut header, 0).map_err(at)?;
    let strings = Layout::of(&header, usize::try_from(len).unwrap_or(usize::MAX))
        .map_err(|e| format!("{}: {e}", base.display()))?
        .strings;
    Ok((file, strings))
}

/// Whether the string at `off` of the section `strings` of `file` is
/// `want` (false past the section's end); None when the file cannot be
/// read.
fn name_in_file(
    file: &std::fs::File,
    strings: &std::ops::Range<usize>,
    off: usize,
    want: &str,
) -> Option<bool> {
    use std::os::unix::fs::FileExt;
    let at = strings.start.checked_add(off)?;
    if at.checked_add(want.len() + 1)? > strings.end {
        return Some(false);
    }
    let mut buf = vec![0u8; want.len() + 1];
    file.read_exact_at(&mut buf, at as u64).ok()?;
    Some(buf[..want.len()] == *want.as_bytes() && buf[want.len()] == 0)
}

/// Base strings read one by one at most this many times in a split BTF.
const MAX_BASE_NAMES: usize = 1 << 16;

/// [`scan`] of the split BTF at `module` over the base BTF at `base`:
/// the module's records are its own (ids after the base's); a name offset
/// below the base's string section's length is a string of the base's,
/// read from its file alone (the base's types are never walked). The
/// fields' sizes are not checked (a member's type may be the base's):
/// only that each is no bit field, 8 bytes assumed (`gfn_t` is `u64` in
/// every kernel with `kvm_page_fault`).
fn split_scan(
    base: &Path,
    module: &Path,
    name: &str,
    wanted: &[&str],
) -> Result<(Vec<Field>, Place), String> {
    let at = |e: String| format!("{}: {e}", module.display());
    if wanted.is_empty() || wanted.len() > MAX_WANTED {
        return Err(at(format!("{} fields asked for", wanted.len())));
    }
    let (file, strings) = base_strings(base)?;
    let data = std::fs::read(module).map_err(|e| at(e.to_string()))?;
    let len = data.len() as u64;
    let header: Option<[u8; 24]> = data.get(..24).and_then(|h| h.try_into().ok());
    let btf = Btf::from_vec(data).map_err(at)?;
    let split_at = strings.len() as u32;
    let mut base_reads = 0usize;
    // Whether the name at `off` (in the base's strings or the module's)
    // is `want`.
    let mut name_is = |off: u32, want: &str| -> Result<bool, String> {
        if off >= split_at {
            return Ok(btf.name(off - split_at) == want.as_bytes());
        }
        base_reads += 1;
        if base_reads > MAX_BASE_NAMES {
            return Err(at(format!(
                "over {MAX_BASE_NAMES} names in the base's strings"
            )));
        }
        name_in_file(&file, &strings, off as usize, want)
            .ok_or_else(|| format!("{}: unreadable", base.display()))
    };
    let mut found = None;
    for id in 1..=btf.type_count() {
        let Some(r) = btf.record(id) else { continue };
        if r.kind != kind::STRUCT || r.vlen == 0 || !name_is(r.name_off, name)? {
            continue;
        }
        if found.replace(id).is_some() {
            return Err(at(format!("struct {name} is defined more than once")));
        }
    }
    let id = found.ok_or_else(|| at(format!("no struct {name}")))?;
    let (mut fields, mut members) = (Vec::new(), Vec::new());
    for w in wanted {
        let mut hit = None;
        for (i, m) in btf.members(id).enumerate() {
            if name_is(m.name_off, w)? {
                hit = Some((i as u32, m));
                break;
            }
        }
        let (i, m) = hit.ok_or_else(|| at(format!("struct {name} has no member {w}")))?;
        if m.is_bitfield() {
            return Err(at(format!("{name}.{w} is a bit field")));
        }
        members.push(i);
        fields.push(Field {
            offset: m.bit_offset / 8,
            size: 8,
        });
    }
    let place = Place {
        name: name.to_string(),
        wanted: wanted.iter().map(|w| w.to_string()).collect(),
        header: header.ok_or_else(|| at("shorter than a BTF header".into()))?,
        len,
        record: btf.record_offset(id).unwrap_or(0) as u64,
        members,
        offsets: fields.iter().map(|f| f.offset).collect(),
    };
    Ok((fields, place))
}

/// The fields `wanted` of the one structure named `name` (a structure
/// declared once: a second definition is refused, not guessed among),
/// with where its record is in the type section and the index of each
/// field among its members.
fn locate(btf: &Btf, name: &str, wanted: &[&str]) -> Result<(usize, Vec<Field>, Vec<u32>), String> {
    let mut ids = btf.ids_named(kind::STRUCT, name);
    let id = ids.next().ok_or_else(|| format!("no struct {name}"))?;
    if ids.next().is_some() {
        return Err(format!("struct {name} is defined more than once"));
    }
    let mut out = Vec::with_capacity(wanted.len());
    let mut indices = Vec::with_capacity(wanted.len());
    for w in wanted {
        let (index, m) = btf
            .member_named(id, w)
            .ok_or_else(|| format!("struct {name} has no member {w}"))?;
        if m.is_bitfield() {
            return Err(format!("{name}.{w} is a bit field"));
        }
        indices.push(index);
        out.push(Field {
            offset: m.bit_offset / 8,
            size: btf.type_size(m.ty)?,
        });
    }
    let record = btf.record_offset(id).unwrap_or(0);
    Ok((record, out, indices))
}

/// Where the fields were found in one BTF file.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Place {
    /// The structure and the fields asked for.
    name: String,
    wanted: Vec<String>,
    /// The file's first 24 bytes (magic, version, flags, the sections'
    /// offsets and lengths) and its length.
    header: [u8; 24],
    len: u64,
    /// The structure's record: its byte offset in the type section.
    record: u64,
    /// The fields' member indices and byte offsets.
    members: Vec<u32>,
    offsets: Vec<u32>,
}

const PLACE_VERSION: &str = "bootscope btf fields 2";

impl Place {
    fn to_text(&self) -> String {
        let hex: String = self.header.iter().map(|b| format!("{b:02x}")).collect();
        let list = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
        format!(
            "{PLACE_VERSION}\n{} {}\n{hex} {} {} {} {}\n",
            self.name,
            self.wanted.join(","),
            self.len,
            self.record,
            list(&self.members),
            list(&self.offsets)
        )
    }

    fn from_text(text: &str) -> Option<Place> {
        let mut lines = text.lines();
        if lines.next()? != PLACE_VERSION {
            return None;
        }
        let (name, wanted) = lines.next()?.split_once(' ')?;
        let wanted: Vec<String> = wanted.split(',').map(String::from).collect();
        let mut w = lines.next()?.split(' ');
        let hex = w.next().filter(|h| h.len() == 48)?;
        let mut header = [0u8; 24];
        for (i, b) in header.iter_mut().enumerate() {
            *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        let mut n = || w.next()?.parse::<u64>().ok();
        let (len, record) = (n()?, n()?);
        let mut list = || -> Option<Vec<u32>> {
            w.next()?
                .split(',')
                .map(|x| x.parse::<u32>().ok())
                .collect::<Option<Vec<u32>>>()
                .filter(|v| v.len() == wanted.len())
        };
        let members = list()?;
        let offsets = list()?;
        Some(Place {
            name: name.to_string(),
            wanted,
            header,
            len,
            record,
            members,
            offsets,
        })
    }
}

/// The fields the record at `cache` names, if it is the record of `struct
/// name`'s `wanted` and the BTF at `path` (split BTF over `base` where
/// given) still has them there.
fn cached(
    base: Option<&Path>,
    path: &Path,
    cache: &Path,
    name: &str,
    wanted: &[&str],
) -> Option<Vec<Field>> {
    use std::io::Read;
    use std::os::unix::fs::FileExt;
    let (f, _) = bootscope_model::cache::open_file(cache).ok()??;
    let mut text = String::new();
    f.take(4096).read_to_string(&mut text).ok()?;
    let place = Place::from_text(&text)?;
    if place.name != name
        || place
            .wanted
            .iter()
            .map(String::as_str)
            .ne(wanted.iter().copied())
    {
        return None;
    }
    let file = std::fs::File::open(path).ok()?;
    let read = |at: usize, n: usize| -> Option<Vec<u8>> {
        let mut buf = vec![0u8; n];
        file.read_exact_at(&mut buf, at as u64).ok()?;
        Some(buf)
    };
    if file.metadata().ok()?.len() != place.len || read(0, 24)? != place.header {
        return None;
    }
    let layout = Layout::of(&place.header, usize::try_from(place.len).ok()?).ok()?;
    // A range of the type or string section, read from the file.
    let within = |section: &std::ops::Range<usize>, off: usize, n: usize| {
        let at = section.start.checked_add(off)?;
        (at.checked_add(n)? <= section.end).then(|| read(at, n))?
    };
    let record = usize::try_from(place.record).ok()?;
    let head = Record::decode(&within(&layout.types, record, RECORD_BYTES)?)?;
    let base = match base {
        Some(b) => Some(base_strings(b).ok()?),
        None => None,
    };
    let name_is = |off: u32, want: &str| {
        let off = off as usize;
        match &base {
            Some((bf, bs)) if off < bs.len() => name_in_file(bf, bs, off, want),
            Some((_, bs)) => name_in_file(&file, &layout.strings, off - bs.len(), want),
            None => name_in_file(&file, &layout.strings, off, want),
        }
        .unwrap_or(false)
    };
    if head.kind != kind::STRUCT || !name_is(head.name_off, name) {
        return None;
    }
    for ((&i, &offset), want) in place.members.iter().zip(&place.offsets).zip(wanted) {
        if i >= head.vlen {
            return None;
        }
        let at = record + RECORD_BYTES + MEMBER_BYTES * i as usize;
        let m = Member::decode(&within(&layout.types, at, MEMBER_BYTES)?, head.kind_flag)?;
        if !name_is(m.name_off, want) || m.bitfield_size != 0 || m.bit_offset != offset * 8 {
            return None;
        }
    }
    Some(
        place
            .offsets
            .iter()
            .map(|&offset| Field { offset, size: 8 })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    use bootscope_testkit::btf::{BtfWriter, KIND_CONST, KIND_TYPEDEF};

    /// 1: unsigned long; 2: int; 3: typedef ulong -> 1; 4: const 3;
    /// 5: task_struct { int pid @0; const ulong min_flt @min_bits; ulong
    /// maj_flt @128 } (bit offsets, with the kind flag: bit field sizes in
    /// the top byte), then what `extra` adds.
    fn task(min_bits: u32, extra: impl FnOnce(&mut BtfWriter)) -> Vec<u8> {
        let mut w = BtfWriter::new();
        let ulong = w.int_named("long unsigned int", 8);
        let int = w.int_named("int", 4);
        let td = w.refer("ulong", KIND_TYPEDEF, ulong);
        let c = w.refer("", KIND_CONST, td);
        let members = [
            ("pid", int, 0),
            ("min_flt", c, min_bits),
            ("maj_flt", ulong, 128),
        ];
        w.composite("task_struct", kind::STRUCT, true, 24, &members);
        extra(&mut w);
        w.finish()
    }

    fn cached_counters(btf: &Path, cache: &Path) -> Option<FaultCounters> {
        cached(None, btf, cache, "task_struct", &COUNTERS).map(|f| counters(&f))
    }

    fn fields(data: &[u8], wanted: &[&str]) -> Result<Vec<Field>, String> {
        locate(&Btf::parse(data)?, "task_struct", wanted).map(|(_, f, _)| f)
    }

    #[test]
    fn the_counters_offsets_through_typedefs_and_qualifiers() {
        let data = task(64, |_| {});
        let found = fields(&data, &["min_flt", "maj_flt", "pid"]).unwrap();
        assert_eq!(
            found,
            [
                Field { offset: 8, size: 8 },
                Field {
                    offset: 16,
                    size: 8
                },
                Field { offset: 0, size: 4 },
            ]
        );
    }

    #[test]
    fn what_cannot_be_trusted_is_refused() {
        let err = |data: &[u8], wanted: &[&str]| fields(data, wanted).unwrap_err();
        assert!(err(&task(60, |_| {}), &["min_flt"]).contains("bit field"));
        assert!(err(&task((4 << 24) | 64, |_| {}), &["min_flt"]).contains("bit field"));
        assert!(err(&task(64, |_| {}), &["exit_code"]).contains("no member exit_code"));
        let twice = |w: &mut BtfWriter| {
            w.record("task_struct", kind::STRUCT, 0, 0);
        };
        assert!(err(&task(64, twice), &["min_flt"]).contains("more than once"));
        let mut cut = task(64, |_| {});
        cut.truncate(cut.len() - 10);
        assert!(err(&cut, &["min_flt"]).contains("past the end"));
        assert!(err(b"\xeb\x9f", &["min_flt"]).contains("magic"));
        assert!(err(b"\x9f\xeb\x01\x00", &["min_flt"]).contains("header cut short"));
        let unknown = |w: &mut BtfWriter| {
            w.raw(&[0, 31 << 24, 0]);
        };
        assert!(err(&task(64, unknown), &["min_flt"]).contains("unknown kind 31"));
    }

    #[test]
    fn a_record_is_used_only_while_the_file_still_has_the_counters_there() {
        let dir = tempfile::tempdir().unwrap();
        let (btf, cache) = (dir.path().join("vmlinux"), dir.path().join("counters"));
        let want = FaultCounters {
            min_flt: Field { offset: 8, size: 8 },
            maj_flt: Field {
                offset: 16,
                size: 8,
            },
        };
        std::fs::write(&btf, task(64, |_| {})).unwrap();
        assert_eq!(fault_counters_cached(&btf, Some(&cache)), Ok(want));
        let text = std::fs::read_to_string(&cache).unwrap();
        let place = Place::from_text(&text).expect("the record reads back");
        assert_eq!(place.to_text(), text);
        assert_eq!(cached_counters(&btf, &cache), Some(want));
        // Another kernel: min_flt elsewhere, the same length and header.
        std::fs::write(&btf, task(128, |_| {})).unwrap();
        assert_eq!(cached_counters(&btf, &cache), None);
        let moved = FaultCounters {
            min_flt: Field {
                offset: 16,
                size: 8,
            },
            ..want
        };
        assert_eq!(fault_counters_cached(&btf, Some(&cache)), Ok(moved));
        assert_eq!(cached_counters(&btf, &cache), Some(moved));
        // Back to the first kernel: its record verifies again, the same
        // naming another member's index does not.
        std::fs::write(&btf, task(64, |_| {})).unwrap();
        std::fs::write(&cache, &text).unwrap();
        assert_eq!(cached_counters(&btf, &cache), Some(want));
        let wrong = text.replace(" 1,2 8,16\n", " 0,2 8,16\n");
        assert_ne!(wrong, text);
        std::fs::write(&cache, wrong).unwrap();
        assert_eq!(cached_counters(&btf, &cache), None);
        std::fs::write(&cache, "garbage").unwrap();
        assert_eq!(fault_counters_cached(&btf, Some(&cache)), Ok(want));
    }

    /// A module's split BTF: its own names after the base's strings, and
    /// names the base has (here `gfn`, a member of a base struct) at the
    /// base's offsets.
    #[test]
    fn a_field_of_a_modules_split_btf() {
        let dir = tempfile::tempdir().unwrap();
        let mut b = BtfWriter::new();
        let u64_ = b.int_named("long long unsigned int", 8);
        b.strukt("frame", 8, &[("gfn", u64_, 0)]);
        let base = b.finish();
        let split_at = u32::from_le_bytes(base[20..24].try_into().unwrap());
        let base_gfn = {
            let strings =
                &base[24 + u32::from_le_bytes(base[16..20].try_into().unwrap()) as usize..];
            strings.windows(4).position(|w| w == b"gfn\0").unwrap() as u32
        };
        let module = |gfn_name: u32, gfn_bits: u32, twice: bool| {
            let mut m = BtfWriter::new();
            let own = |m: &mut BtfWriter, s: &str| split_at + m.name(s);
            let (n, addr) = (own(&mut m, "kvm_page_fault"), own(&mut m, "addr"));
            let words = [
                n,
                (kind::STRUCT << 24) | 2,
                80,
                addr,
                1,
                0,
                gfn_name,
                1,
                gfn_bits,
            ];
            m.raw(&words);
            if twice {
                m.raw(&words);
            }
            m.finish()
        };
        let (bp, mp) = (dir.path().join("vmlinux"), dir.path().join("kvm"));
        std::fs::write(&bp, &base).unwrap();
        let field = |data: Vec<u8>| {
            std::fs::write(&mp, data).unwrap();
            kvm_fault_gfn(dir.path(), None).map(|(f, p)| {
                assert_eq!(p, mp);
                f
            })
        };
        assert_eq!(
            field(module(base_gfn, 256, false)),
            Ok(Field {
                offset: 32,
                size: 8
            })
        );
        // The module's own string.
        let mut m = BtfWriter::new();
        let gfn_own = split_at + {
            m.name("kvm_page_fault");
            m.name("addr");
            m.name("gfn")
        };
        let (n, addr) = (split_at + 1, split_at + 1 + 15);
        m.raw(&[n, (kind::STRUCT << 24) | 2, 80, addr, 1, 0, gfn_own, 1, 64]);
        assert_eq!(field(m.finish()), Ok(Field { offset: 8, size: 8 }));
        // Through a record: made at the first lookup, verified against
        // both files at the next, remade when the module changed.
        let cache = dir.path().join("gfn-record");
        std::fs::write(&mp, module(base_gfn, 256, false)).unwrap();
        let via = || kvm_fault_gfn(dir.path(), Some(&cache)).map(|(f, _)| f.offset);
        assert_eq!(via(), Ok(32));
        let record = std::fs::read_to_string(&cache).unwrap();
        assert_eq!(
            cached(Some(&bp), &mp, &cache, "kvm_page_fault", &["gfn"]),
            Some(vec![Field {
                offset: 32,
                size: 8
            }])
        );
        std::fs::write(&mp, module(base_gfn, 320, false)).unwrap();
        assert_eq!(
            cached(Some(&bp), &mp, &cache, "kvm_page_fault", &["gfn"]),
            None
        );
        assert_eq!(via(), Ok(40));
        assert_ne!(std::fs::read_to_string(&cache).unwrap(), record);
        let err = |d| field(d).unwrap_err();
        assert!(err(module(base_gfn, 258, false)).contains("bit field"));
        assert!(err(module(base_gfn, 256, true)).contains("more than once"));
        assert!(err(module(split_at + 10_000, 256, false)).contains("no member gfn"));
        assert!(err(b"\x9f\xeb".to_vec()).contains("kvm"));
        // No module: the kernel's own BTF, which has no such struct here.
        std::fs::remove_file(&mp).unwrap();
        assert!(kvm_fault_gfn(dir.path(), None)
            .unwrap_err()
            .contains("no struct kvm_page_fault"));
    }

    /// On this machine's kernel, the offsets found are the ones bpftool's
    /// own parse of the same file gives.
    #[test]
    fn this_kernels_counters_match_bpftool() {
        let path = Path::new("/sys/kernel/btf/vmlinux");
        if !path.exists() {
            bootscope_testkit::skip_test!("no {} on this host", path.display());
        }
        let dump = std::process::Command::new("bpftool")
            .args(["btf", "dump", "file"])
            .arg(path)
            .args(["format", "raw"])
            .output();
        let dump = match dump {
            Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
            _ => bootscope_testkit::skip_test!("bpftool cannot dump {}", path.display()),
        };
        let c = fault_counters(path).expect("task_struct's fault counters");
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("counters");
        assert_eq!(fault_counters_cached(path, Some(&cache)), Ok(c));
        assert_eq!(
            cached_counters(path, &cache),
            Some(c),
            "the record verifies"
        );
        let members: Vec<&str> = dump
            .lines()
            .skip_while(|l| !l.contains("STRUCT 'task_struct' "))
            .skip(1)
            .take_while(|l| l.starts_with('\t'))
            .collect();
        let bits = |name: &str| -> u32 {
            let line = members
                .iter()
                .find(|l| l.trim_start().starts_with(&format!("'{name}' ")))
                .expect("member in bpftool's dump");
            line.rsplit("bits_offset=").next().unwrap().parse().unwrap()
        };
        assert_eq!(c.min_flt.offset * 8, bits("min_flt"));
        assert_eq!(c.maj_flt.offset * 8, bits("maj_flt"));
    }

    /// On this machine's kernel, `kvm_page_fault`'s `gfn` is where
    /// bpftool's own parse of the same file (KVM's module BTF, or the
    /// kernel's with KVM built in) puts it.
    #[test]
    fn this_kernels_kvm_fault_gfn_matches_bpftool() {
        let dir = Path::new("/sys/kernel/btf");
        let cache = tempfile::tempdir().unwrap();
        let found = kvm_fault_gfn(dir, Some(&cache.path().join("gfn")));
        let file = if dir.join("kvm").exists() {
            dir.join("kvm")
        } else {
            dir.join("vmlinux")
        };
        let mut cmd = std::process::Command::new("bpftool");
        cmd.args(["btf", "dump", "file"]).arg(&file);
        if file.ends_with("kvm") {
            cmd.arg("base").arg(dir.join("vmlinux"));
        }
        let dump = match cmd.args(["format", "raw"]).output() {
            Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
            _ => bootscope_testkit::skip_test!("bpftool cannot dump {}", file.display()),
        };
        let bits = dump
            .lines()
            .skip_while(|l| !l.contains("STRUCT 'kvm_page_fault' "))
            .skip(1)
            .take_while(|l| l.starts_with('\t'))
            .find(|l| l.trim_start().starts_with("'gfn' "))
            .map(|l| {
                l.rsplit("bits_offset=")
                    .next()
                    .unwrap()
                    .parse::<u32>()
                    .unwrap()
            });
        match bits {
            None => assert!(
                found.is_err(),
                "{found:?} where bpftool has no kvm_page_fault.gfn"
            ),
            Some(bits) => {
                let (f, from) = found.expect("kvm_page_fault.gfn");
                assert_eq!((f.offset * 8, from), (bits, file));
                // Again, through the record where one was made.
                assert_eq!(
                    kvm_fault_gfn(dir, Some(&cache.path().join("gfn")))
                        .unwrap()
                        .0,
                    f
                );
            }
        }
    }
}
