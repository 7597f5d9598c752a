//! An initramfs with only the kernel modules a boot loaded: what
//! initramfs-tools' `MODULES=dep` (dracut's `--hostonly`) would build for
//! this machine, made from the initrd the VM booted, without rebuilding it
//! in the image. `advise` offers it where a boot's initramfs stage is
//! long: a distribution's initrd carries the drivers of every disk
//! controller and file system (Debian's: 116 of its 132 MB unpacked), and
//! the guest's kernel unpacks all of it before its `/init` runs.
//!
//! The initrd is unpacked to one archive ([`super::initrd::uncompressed`]);
//! each module file (`lib/modules/VERSION/**/NAME.ko`, compressed or not)
//! is kept when the boot loaded that module or a kept module needs it
//! (the archive's own `modules.dep`), every other entry as it is. The
//! module index files stay: a module not kept fails to load as one that
//! is not there, which udev's coldplug and initramfs-tools' `modprobe -q`
//! take in their stride.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::cache::MappedFile;
use super::decompress::hex;
use super::initrd::{entry_at, uncompressed};

/// An archive with only some of its modules.
#[derive(Debug)]
pub struct Pruned {
    pub bytes: Vec<u8>,
    /// The modules kept, by name (those asked for and what they need).
    pub kept: Vec<String>,
    /// How many module files were left out, and their bytes.
    pub dropped: usize,
    pub dropped_bytes: u64,
    /// Modules asked for that the archive does not have (loaded from the
    /// real root later, or built in).
    pub absent: Vec<String>,
}

/// A module's name as the kernel gives it: the file name before `.ko`,
/// with `-` as `_`.
fn module_name(file: &str) -> Option<String> {
    let base = file.rsplit('/').next()?;
    let stem = base.split_once(".ko").map(|(s, rest)| {
        (rest.is_empty() || [".xz", ".zst", ".gz"].contains(&rest)).then_some(s)
    })??;
    (!stem.is_empty()).then(|| stem.replace('-', "_"))
}

/// Where in `name` a module tree starts (`lib/modules/VERSION/`, with or
/// without `usr/` or `./` before it): the tree's root and the path in it.
fn in_module_tree(name: &str) -> Option<(&str, &str)> {
    let at = name.find("lib/modules/")?;
    if !(at == 0 || name[..at].trim_start_matches("./") == "usr/") {
        return None;
    }
    let after = &name[at + "lib/modules/".len()..];
    let (version, path) = after.split_once('/')?;
    let root_len = at + "lib/modules/".len() + version.len();
    Some((&name[..root_len], path))
}

/// `archive` (uncompressed `newc` archives one after another, as
/// [`uncompressed`] makes them) with only the modules named in `keep` and
/// those they need by the archive's `modules.dep`; the error says what in
/// it could not be read and where.
pub fn only_modules(archive: &[u8], keep: &[String]) -> Result<Pruned, String> {
    let wanted: BTreeSet<String> = keep.iter().map(|k| k.replace('-', "_")).collect();
    let mut entries = Vec::new();
    let mut at = 0;
    while at < archive.len() {
        if archive[at..].iter().all(|&b| b == 0) {
            break;
        }
        let e = entry_at(archive, at).map_err(|e| format!("the archive: {e}"))?;
        at = e.end;
        entries.push(e);
    }
    // Each tree's modules.dep: module name to the names it needs.
    let mut deps: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut trees = 0;
    for e in &entries {
        let name = String::from_utf8_lossy(e.name);
        if in_module_tree(&name).is_some_and(|(_, p)| p == "modules.dep") {
            trees += 1;
            for line in String::from_utf8_lossy(e.data).lines() {
                let Some((module, needs)) = line.split_once(':') else {
                    continue;
                };
                let Some(m) = module_name(module.trim()) else {
                    continue;
                };
                let needs = needs.split_whitespace().filter_map(module_name);
                deps.entry(m).or_default().extend(needs);
            }
        }
    }
    if trees == 0 {
        return Err(
            "it has no lib/modules/VERSION/modules.dep: what the kept modules need cannot be told"
                .into(),
        );
    }
    let mut kept: BTreeSet<String> = BTreeSet::new();
    let mut todo: Vec<String> = wanted.iter().cloned().collect();
    while let Some(m) = todo.pop() {
        if kept.insert(m.clone()) {
            todo.extend(deps.get(&m).into_iter().flatten().cloned());
        }
    }
    let mut out = Vec::with_capacity(archive.len() / 4);
    let (mut dropped, mut dropped_bytes) = (0, 0u64);
    let mut present = BTreeSet::new();
    for e in &entries {
        let name = String::from_utf8_lossy(e.name);
        let module = in_module_tree(&name).and_then(|(_, p)| {
            (p.starts_with("kernel/") || p.starts_with("updates/") || p.starts_with("extra/"))
                .then(|| module_name(p))
                .flatten()
        });
        match module {
            Some(m) if !kept.contains(&m) => {
                dropped += 1;
                dropped_bytes += e.data.len() as u64;
            }
            other => {
                present.extend(other);
                out.extend_from_slice(&archive[e.start..e.end]);
            }
        }
    }
    Ok(Pruned {
        bytes: out,
        kept: kept
            .iter()
            .filter(|m| present.contains(*m))
            .cloned()
            .collect(),
        dropped,
        dropped_bytes,
        absent: wanted.difference(&present).cloned().collect(),
    })
}

/// The initramfs of the initrd at `path` with only the modules `keep`
/// (and what they need), in the cache `dir`: named by the SHA-256 of the
/// initrd and of the module names, made there (sealed) when it is missing
/// or does not match its seal.
pub fn cached_modules_cpio(path: &Path, dir: &Path, keep: &[String]) -> Result<PathBuf, String> {
    use bootscope_model::cache;
    let initrd = bootscope_model::input::read_input(path).map_err(|e| e.to_string())?;
    let mut names: Vec<String> = keep.iter().map(|k| k.replace('-', "_")).collect();
    names.sort();
    names.dedup();
    let digest = Sha256::digest(names.join("\n").as_bytes());
    let file = dir.join(format!(
        "initrd-{}-modules-{}.cpio",
        hex(&Sha256::digest(&initrd)),
        &hex(&digest)[..16]
    ));
    if let Ok(Some((f, meta))) = cache::open_file(&file) {
        if let Ok(m) = MappedFile::map(&f, meta.len()) {
            if cache::verify(&file, m.as_slice()) == cache::Verdict::Sound {
                return Ok(file);
            }
        }
    }
    let unpacked = uncompressed(&initrd)?;
    let pruned = only_modules(&unpacked.bytes, &names)?;
    drop(unpacked);
    cache::private_dir(dir, dir)
        .map_err(|e| e.to_string())
        .and_then(|()| cache::store(&file, &pruned.bytes).map_err(|e| e.to_string()))
        .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `newc` archive of `files` (name, contents) and its trailer.
    fn cpio(files: &[(&str, &[u8])]) -> Vec<u8> {
        let mut out = Vec::new();
        let all = files.iter().copied().chain([("TRAILER!!!", &b""[..])]);
        for (i, (name, data)) in all.enumerate() {
            let mode = if name == "TRAILER!!!" { 0 } else { 0o100644 };
            let mut h = String::from("070701");
            for v in [
                i + 1,
                mode,
                0,
                0,
                1,
                0,
                data.len(),
                0,
                0,
                0,
                0,
                name.len() + 1,
                0,
            ] {
                h.push_str(&format!("{v:08x}"));
            }
            out.extend_from_slice(h.as_bytes());
            out.extend_from_slice(name.as_bytes());
            out.push(0);
            out.resize(out.len().div_ceil(4) * 4, 0);
            out.extend_from_slice(data);
            out.resize(out.len().div_ceil(4) * 4, 0);
        }
        out
    }

    const M: &str = "usr/lib/modules/6.1.0-57-amd64";

    fn debian_like() -> Vec<u8> {
        let dep = b"kernel/fs/ext4/ext4.ko: kernel/lib/crc16.ko kernel/fs/mbcache.ko kernel/fs/jbd2/jbd2.ko\n\
kernel/lib/crc16.ko:\nkernel/fs/mbcache.ko:\nkernel/fs/jbd2/jbd2.ko:\n\
kernel/drivers/block/virtio_blk.ko: kernel/drivers/virtio/virtio_ring.ko\n\
kernel/drivers/virtio/virtio_ring.ko:\nkernel/drivers/scsi/mpt3sas/mpt3sas.ko.xz: kernel/drivers/scsi/raid_class.ko\n\
kernel/drivers/scsi/raid_class.ko:\nkernel/drivers/net/e1000/e1000.ko:\n";
        let names = [
            "kernel/fs/ext4/ext4.ko",
            "kernel/lib/crc16.ko",
            "kernel/fs/mbcache.ko",
            "kernel/fs/jbd2/jbd2.ko",
            "kernel/drivers/block/virtio_blk.ko",
            "kernel/drivers/virtio/virtio_ring.ko",
            "kernel/drivers/scsi/mpt3sas/mpt3sas.ko.xz",
            "kernel/drivers/scsi/raid_class.ko",
            "kernel/drivers/net/e1000/e1000.ko",
        ];
        let paths: Vec<String> = names.iter().map(|n| format!("{M}/{n}")).collect();
        let blob = [9u8; 1001];
        let mut files: Vec<(&str, &[u8])> = vec![("init", b"#!/bin/sh\n")];
        files.extend(paths.iter().map(|p| (p.as_str(), &blob[..])));
        let dep_path = format!("{M}/modules.dep");
        files.push((&dep_path, dep));
        files.push(("usr/lib/firmware/x.bin", b"fw"));
        let early = cpio(&[("kernel/x86/microcode/AuthenticAMD.bin", b"ucode")]);
        [early, cpio(&files)].concat()
    }

    fn names(a: &[u8]) -> Vec<String> {
        let mut at = 0;
        let mut v = Vec::new();
        while at < a.len() {
            let e = entry_at(a, at).unwrap();
            v.push(String::from_utf8_lossy(e.name).into_owned());
            at = e.end;
        }
        v
    }

    #[test]
    fn only_the_loaded_modules_and_what_they_need_stay() {
        let a = debian_like();
        let keep = ["ext4", "virtio_blk", "virtio-mmio", "crc32c_generic"].map(String::from);
        let p = only_modules(&a, &keep).unwrap();
        assert_eq!(
            p.kept,
            [
                "crc16",
                "ext4",
                "jbd2",
                "mbcache",
                "virtio_blk",
                "virtio_ring"
            ]
        );
        // Not in the archive: built in, or loaded from the real root.
        assert_eq!(p.absent, ["crc32c_generic", "virtio_mmio"]);
        assert_eq!((p.dropped, p.dropped_bytes), (3, 3003));
        let left = names(&p.bytes);
        assert!(left.contains(&"init".to_string()));
        assert!(left.contains(&format!("{M}/modules.dep")));
        assert!(left.contains(&"usr/lib/firmware/x.bin".to_string()));
        assert!(!left
            .iter()
            .any(|n| n.contains("mpt3sas") || n.contains("e1000")));
        // Both archives end with their trailer, the early one untouched.
        assert_eq!(left.iter().filter(|n| *n == "TRAILER!!!").count(), 2);
        assert!(p.bytes.starts_with(&a[..entry_at(&a, 0).unwrap().end]));
        // The kept entries are byte for byte the original's.
        let ext4 = format!("{M}/kernel/fs/ext4/ext4.ko");
        assert!(left.contains(&ext4));
        // Nothing asked for: every module goes, the rest stays.
        let none = only_modules(&a, &[]).unwrap();
        assert!(none.kept.is_empty());
        assert_eq!(none.dropped, 9);
    }

    #[test]
    fn archives_it_cannot_read_are_errors_that_say_why() {
        let a = cpio(&[("init", b"x"), (&format!("{M}/kernel/a.ko"), b"m")]);
        let e = only_modules(&a, &["a".into()]).unwrap_err();
        assert!(e.contains("no lib/modules/VERSION/modules.dep"), "{e}");
        let full = debian_like();
        let e = only_modules(&full[..full.len() - 200], &[]).unwrap_err();
        assert!(e.starts_with("the archive: "), "{e}");
        assert!(only_modules(b"junk", &[]).unwrap_err().contains("byte 0"));
    }

    #[test]
    fn module_names_and_trees() {
        assert_eq!(
            module_name("kernel/a/crc32-pclmul.ko").as_deref(),
            Some("crc32_pclmul")
        );
        assert_eq!(module_name("x/mpt3sas.ko.xz").as_deref(), Some("mpt3sas"));
        assert_eq!(module_name("modules.dep"), None);
        assert_eq!(module_name("x/a.kobject"), None);
        assert_eq!(
            in_module_tree("lib/modules/6.1/kernel/a.ko"),
            Some(("lib/modules/6.1", "kernel/a.ko"))
        );
        assert_eq!(
            in_module_tree("./usr/lib/modules/6.1/modules.dep").map(|t| t.1),
            Some("modules.dep")
        );
        assert_eq!(in_module_tree("opt/lib/modules/6.1/kernel/a.ko"), None);
    }

    #[test]
    fn the_cache_keeps_one_archive_per_initrd_and_module_set() {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("initrds");
        let initrd = base.path().join("initrd.img");
        std::fs::write(&initrd, debian_like()).unwrap();
        let keep = vec!["ext4".to_string()];
        let file = cached_modules_cpio(&initrd, &dir, &keep).unwrap();
        let first = std::fs::read(&file).unwrap();
        assert!(names(&first).iter().any(|n| n.ends_with("jbd2.ko")));
        assert!(!names(&first).iter().any(|n| n.ends_with("virtio_blk.ko")));
        assert_eq!(cached_modules_cpio(&initrd, &dir, &keep).unwrap(), file);
        // Another set, another archive; a damaged copy is made again.
        let other = cached_modules_cpio(&initrd, &dir, &["virtio_blk".into()]).unwrap();
        assert_ne!(other, file);
        std::fs::write(&file, b"070701 tampered").unwrap();
        assert_eq!(cached_modules_cpio(&initrd, &dir, &keep).unwrap(), file);
        assert_eq!(std::fs::read(&file).unwrap(), first);
        let e = cached_modules_cpio(&base.path().join("missing"), &dir, &keep).unwrap_err();
        assert!(e.contains("missing"), "{e}");
    }
}
