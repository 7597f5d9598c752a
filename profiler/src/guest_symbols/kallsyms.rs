//! The symbol table a kernel image carries for `/proc/kallsyms`
//! (`CONFIG_KALLSYMS`), recovered from the image's bytes: what a stock
//! distribution kernel, whose `System.map` is a stub and whose ELF symbols
//! are stripped, has instead.
//!
//! `scripts/kallsyms` writes these tables into `.rodata`, in this order:
//! `kallsyms_offsets` (one `int` per symbol), `kallsyms_relative_base`
//! (`unsigned long`), `kallsyms_num_syms` (`unsigned int`), `kallsyms_names`
//! (per symbol a length byte, two when the high bit is set, then that many
//! token indexes; the first character of the expanded name is its type),
//! `kallsyms_markers` (the offset into the names of every 256th symbol),
//! then (newer kernels) `kallsyms_seqs_of_names`, `kallsyms_token_table`
//! (256 NUL-terminated tokens) and `kallsyms_token_index` (256 `u16`
//! offsets into the token table). Nothing names them in a stripped image,
//! so they are found by their shape, each find checked against the next:
//! the token table holds the single-character tokens `0` to `9` at their
//! own indexes, the index table points at them, the names decode into
//! exactly `num_syms` entries and the markers agree with that decoding.

use thiserror::Error;

use crate::le::{u16_at, u32_at, u64_at};

/// Why no symbol table came out of an image.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum KallsymsError {
    #[error(
        "no kallsyms token table found (a kernel built without CONFIG_KALLSYMS, or not a kernel)"
    )]
    NoTokenTable,
    #[error("a kallsyms token table is there but no symbol count and name table agree with it")]
    NoNames,
    #[error("the kallsyms address table does not fit before the names")]
    NoOffsets,
}

/// One symbol: link-time address, type character and name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelSymbol {
    pub addr: u64,
    pub kind: char,
    pub name: String,
}

/// The token table: where it starts, and its 256 tokens.
struct Tokens {
    start: usize,
    tokens: Vec<Vec<u8>>,
}

/// Finds the token table by its digits and checks it with the index table
/// that follows it.
fn find_tokens(b: &[u8]) -> Option<Tokens> {
    let digits: Vec<u8> = (b'0'..=b'9').flat_map(|c| [c, 0]).collect();
    let mut from = 0;
    while let Some(found) = find(&b[from..], &digits) {
        let p = from + found;
        from = p + 1;
        // The index table follows the token table, 2-byte aligned, within
        // the tokens that come after '9'.
        let first = p + digits.len();
        for q in (first + (first & 1)..first + 8192).step_by(2) {
            let Some(index) = (0..256)
                .map(|i| u16_at(b, q + 2 * i).map(usize::from))
                .collect::<Option<Vec<usize>>>()
            else {
                break;
            };
            if index[0] != 0 || index.windows(2).any(|w| w[0] >= w[1]) {
                continue;
            }
            let Some(start) = p.checked_sub(index[usize::from(b'0')]) else {
                continue;
            };
            if start + index[usize::from(b'1')] != p + 2 {
                continue;
            }
            let tokens: Option<Vec<Vec<u8>>> = index
                .iter()
                .map(|&i| {
                    let s = start + i;
                    let len = b.get(s..q)?.iter().position(|&c| c == 0)?;
                    Some(b[s..s + len].to_vec())
                })
                .collect();
            if let Some(tokens) = tokens {
                return Some(Tokens { start, tokens });
            }
        }
    }
    None
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Decodes `n` name entries from `at`: each entry's offset, and the end.
fn name_entries(b: &[u8], at: usize, n: usize) -> Option<(Vec<usize>, usize)> {
    let mut offsets = Vec::with_capacity(n);
    let mut p = at;
    for _ in 0..n {
        offsets.push(p);
        let mut len = usize::from(*b.get(p)?);
        p += 1;
        if len & 0x80 != 0 {
            len = (len & 0x7f) | (usize::from(*b.get(p)?) << 7);
            p += 1;
        }
        if len == 0 {
            return None;
        }
        p += len;
    }
    (p <= b.len()).then_some((offsets, p))
}

/// Where the names are: the relative base before them, their count, each
/// entry's offset.
struct Names {
    base_at: usize,
    base: u64,
    entries: Vec<usize>,
}

/// Finds `kallsyms_relative_base` + `kallsyms_num_syms` + the names, the
/// names checked against the markers after them.
fn find_names(b: &[u8], before: usize) -> Option<Names> {
    for r in (0..before.saturating_sub(16)).step_by(8) {
        let base = u64_at(b, r)?;
        if !(0xffff_ffff_8000_0000..0xffff_ffff_ff00_0000).contains(&base) {
            continue;
        }
        let n = u32_at(b, r + 8)? as usize;
        if !(1000..=4_000_000).contains(&n) {
            continue;
        }
        for names_at in [r + 12, r + 16] {
            let Some((entries, end)) = name_entries(b, names_at, n) else {
                continue;
            };
            let markers_ok = [end.next_multiple_of(4), end.next_multiple_of(8)]
                .iter()
                .any(|&m| {
                    u32_at(b, m) == Some(0)
                        && entries.get(256).map(|e| (e - names_at) as u64)
                            == u32_at(b, m + 4).map(u64::from)
                });
            if markers_ok {
                return Some(Names {
                    base_at: r,
                    base,
                    entries,
                });
            }
        }
    }
    None
}

/// Every symbol of a decompressed kernel image (ELF or raw), in the
/// order (by address) the kernel keeps them.
pub fn recover(image: &[u8]) -> Result<Vec<KernelSymbol>, KallsymsError> {
    let tokens = find_tokens(image).ok_or(KallsymsError::NoTokenTable)?;
    let names = find_names(image, tokens.start).ok_or(KallsymsError::NoNames)?;
    let n = names.entries.len();
    // The offsets end at the relative base (possibly 4 bytes of padding).
    let offsets_at = [4 * n, 4 * n + 4]
        .into_iter()
        .filter_map(|len| names.base_at.checked_sub(len))
        .find(|at| at % 8 == 0 || n % 2 == 0)
        .ok_or(KallsymsError::NoOffsets)?;
    let offsets: Vec<i32> = (0..n)
        .map(|i| u32_at(image, offsets_at + 4 * i).map(|v| v as i32))
        .collect::<Option<_>>()
        .ok_or(KallsymsError::NoOffsets)?;
    // CONFIG_KALLSYMS_ABSOLUTE_PERCPU (x86-64): per-CPU symbols are
    // absolute and non-negative, the rest negative offsets from the base.
    let absolute_percpu = offsets.iter().any(|&o| o < 0);
    let address = |o: i32| -> u64 {
        if !absolute_percpu {
            names.base.wrapping_add(u64::from(o as u32))
        } else if o >= 0 {
            o as u64
        } else {
            names.base.wrapping_sub(1).wrapping_sub(i64::from(o) as u64)
        }
    };
    let mut out = Vec::with_capacity(n);
    for (i, &at) in names.entries.iter().enumerate() {
        let (len, skip) = match image[at] {
            l if l & 0x80 != 0 => (usize::from(l & 0x7f) | (usize::from(image[at + 1]) << 7), 2),
            l => (usize::from(l), 1),
        };
        let mut name = Vec::new();
        for &t in &image[at + skip..at + skip + len] {
            name.extend_from_slice(&tokens.tokens[usize::from(t)]);
        }
        let text = String::from_utf8_lossy(&name);
        let mut chars = text.chars();
        let kind = chars.next().unwrap_or('?');
        out.push(KernelSymbol {
            addr: address(offsets[i]),
            kind,
            name: chars.as_str().to_string(),
        });
    }
    Ok(out)
}

/// The symbols as `/proc/kallsyms` prints them (`ADDR TYPE NAME`).
pub fn to_text(symbols: &[KernelSymbol]) -> String {
    let mut s = String::with_capacity(symbols.len() * 40);
    for sym in symbols {
        s.push_str(&format!("{:016x} {} {}\n", sym.addr, sym.kind, sym.name));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A made-up image in the kernel's layout: three symbols, tokens for
    /// every byte value (the digits at their own indexes), one marker.
    fn tiny_image() -> Vec<u8> {
        let mut tokens: Vec<Vec<u8>> = (0..=255u8).map(|c| vec![c]).collect();
        tokens[0] = b"_se".to_vec();
        tokens[1] = b"rial".to_vec();
        let names: Vec<Vec<u8>> = vec![
            b"T_text".to_vec(),
            vec![b't', b'i', b'o', 0, 1, b'_', b'o', b'u', b't'],
            b"Dsome_data".to_vec(),
        ];
        let mut symbols = names.clone();
        // 1000 filler symbols so that the count looks like a kernel's.
        for i in 0..1000 {
            symbols.push(format!("tf{i}").into_bytes());
        }
        let n = symbols.len();
        let base: u64 = 0xffff_ffff_8100_0000;
        let mut b = vec![0xaau8; 64];
        for i in 0..n {
            b.extend_from_slice(&(-1i32 - i as i32 * 16).to_le_bytes());
        }
        while b.len() % 8 != 0 {
            b.push(0);
        }
        b.extend_from_slice(&base.to_le_bytes());
        b.extend_from_slice(&(n as u32).to_le_bytes());
        b.extend_from_slice(&[0; 4]);
        let names_at = b.len();
        let mut entry_at = Vec::new();
        for s in &symbols {
            entry_at.push(b.len() - names_at);
            b.push(s.len() as u8);
            b.extend_from_slice(s);
        }
        while b.len() % 8 != 0 {
            b.push(0);
        }
        for i in (0..n).step_by(256) {
            b.extend_from_slice(&(entry_at[i] as u32).to_le_bytes());
        }
        let table_at = b.len();
        let mut index = Vec::new();
        for t in &tokens {
            index.push((b.len() - table_at) as u16);
            b.extend_from_slice(t);
            b.push(0);
        }
        while b.len() % 8 != 0 {
            b.push(0);
        }
        for i in index {
            b.extend_from_slice(&i.to_le_bytes());
        }
        b
    }

    #[test]
    fn symbols_come_back_from_the_tables() {
        let syms = recover(&tiny_image()).unwrap();
        assert_eq!(syms.len(), 1003);
        assert_eq!(syms[0].name, "_text");
        assert_eq!(syms[0].addr, 0xffff_ffff_8100_0000);
        assert_eq!(syms[1].name, "io_serial_out");
        assert_eq!((syms[1].kind, syms[1].addr), ('t', 0xffff_ffff_8100_0010));
        assert_eq!(syms[2].kind, 'D');
        assert!(to_text(&syms[..1]).starts_with("ffffffff81000000 T _text\n"));
    }

    #[test]
    fn a_file_without_tables_says_so() {
        assert_eq!(recover(&[0u8; 4096]), Err(KallsymsError::NoTokenTable));
    }
}
