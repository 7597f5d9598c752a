//! Just enough ELF parsing to tell static from dynamic executables.
//!
//! A program can run in a guest that holds only what we put there, so we
//! must know whether it needs a dynamic loader (the `PT_INTERP` segment)
//! and which one.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use crate::{LabError, Result};

const PT_INTERP: u32 = 3;

/// How an executable is linked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Linkage {
    /// No program interpreter: runs on its own.
    Static,
    /// Needs the given program interpreter (dynamic loader).
    Dynamic(PathBuf),
    /// Not a 64-bit little-endian ELF file (a script, another architecture).
    NotElf64,
}

/// Reads the program headers of `path` to find its program interpreter.
pub(crate) fn linkage(path: &Path) -> Result<Linkage> {
    let mut file = File::open(path).map_err(|e| LabError::io("open", path, e))?;
    let mut ehdr = [0u8; 64];
    if file.read_exact(&mut ehdr).is_err() {
        return Ok(Linkage::NotElf64);
    }
    // Magic, ELFCLASS64, ELFDATA2LSB.
    if &ehdr[..4] != b"\x7fELF" || ehdr[4] != 2 || ehdr[5] != 1 {
        return Ok(Linkage::NotElf64);
    }
    let u16_at = |b: &[u8], o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
    let u32_at = |b: &[u8], o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
    let u64_at = |b: &[u8], o: usize| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[o..o + 8]);
        u64::from_le_bytes(a)
    };
    let phoff = u64_at(&ehdr, 0x20);
    let phentsize = usize::from(u16_at(&ehdr, 0x36));
    let phnum = usize::from(u16_at(&ehdr, 0x38));
    if phentsize < 56 || phnum == 0 {
        return Ok(Linkage::Static);
    }
    let mut phdrs = vec![0u8; phentsize * phnum];
    file.seek(SeekFrom::Start(phoff))
        .and_then(|_| file.read_exact(&mut phdrs))
        .map_err(|e| LabError::io("read the ELF program headers of", path, e))?;
    for ph in phdrs.chunks_exact(phentsize) {
        if u32_at(ph, 0) != PT_INTERP {
            continue;
        }
        let offset = u64_at(ph, 0x08);
        let size = u64_at(ph, 0x20);
        if size == 0 || size > 4096 {
            return Ok(Linkage::NotElf64);
        }
        let mut interp = vec![0u8; size as usize];
        file.seek(SeekFrom::Start(offset))
            .and_then(|_| file.read_exact(&mut interp))
            .map_err(|e| LabError::io("read the program interpreter of", path, e))?;
        while interp.last() == Some(&0) {
            interp.pop();
        }
        use std::os::unix::ffi::OsStringExt;
        return Ok(Linkage::Dynamic(PathBuf::from(
            std::ffi::OsString::from_vec(interp),
        )));
    }
    Ok(Linkage::Static)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_programs() {
        // The test binary itself is dynamically linked on Debian.
        let me = std::env::current_exe().unwrap();
        match linkage(&me).unwrap() {
            Linkage::Dynamic(interp) => assert!(interp.to_string_lossy().contains("ld-linux")),
            other => panic!("unexpected linkage of the test binary: {other:?}"),
        }
        let busybox = Path::new("/bin/busybox");
        if busybox.exists() {
            // Either busybox-static (Static) or the dynamic busybox package.
            assert_ne!(linkage(busybox).unwrap(), Linkage::NotElf64);
        }
        let dir = crate::util::TempDir::new("elf-test").unwrap();
        let script = dir.path().join("s.sh");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        assert_eq!(linkage(&script).unwrap(), Linkage::NotElf64);
    }
}
