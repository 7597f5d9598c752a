//! Whether an executable is static or dynamic, read from its ELF program
//! headers with the `object` crate.
//!
//! A program can run in a guest that holds only what we put there, so we
//! must know whether it needs a dynamic loader (the `PT_INTERP` segment)
//! and which one.

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use object::elf::FileHeader64;
use object::read::elf::{FileHeader, ProgramHeader};
use object::{Endianness, ReadCache};

use crate::{LabError, Result};

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

/// Longest program interpreter path taken as one.
const MAX_INTERP: u64 = 4096;

/// Reads the program headers of `path` to find its program interpreter.
pub(crate) fn linkage(path: &Path) -> Result<Linkage> {
    let file = File::open(path).map_err(|e| LabError::io("open", path, e))?;
    // Reads only the parts of the file asked for, not the whole program.
    let data = ReadCache::new(file);
    let Ok(header) = FileHeader64::<Endianness>::parse(&data) else {
        return Ok(Linkage::NotElf64);
    };
    let Ok(endian) = header.endian() else {
        return Ok(Linkage::NotElf64);
    };
    if endian != Endianness::Little {
        return Ok(Linkage::NotElf64);
    }
    let invalid = |what: &'static str, e: object::Error| {
        LabError::io(what, path, io::Error::new(io::ErrorKind::InvalidData, e))
    };
    let headers = header
        .program_headers(endian, &data)
        .map_err(|e| invalid("read the ELF program headers of", e))?;
    for ph in headers {
        if ph.p_type(endian) != object::elf::PT_INTERP {
            continue;
        }
        let size = ph.p_filesz(endian);
        if size == 0 || size > MAX_INTERP {
            return Ok(Linkage::NotElf64);
        }
        let interp = ph
            .interpreter(endian, &data)
            .map_err(|e| invalid("read the program interpreter of", e))?
            .unwrap_or_default();
        return Ok(Linkage::Dynamic(PathBuf::from(OsString::from_vec(
            interp.to_vec(),
        ))));
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
        let dir = crate::util::temp_dir("elf-test").unwrap();
        let script = dir.path().join("s.sh");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        assert_eq!(linkage(&script).unwrap(), Linkage::NotElf64);
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "").unwrap();
        assert_eq!(linkage(&empty).unwrap(), Linkage::NotElf64);
    }
}
