//! A Debian 12 guest with systemd as a raw ext4 disk image
//! (`bootscope guest build debian`, docs/guest.md).
//!
//! `mmdebstrap` builds the root tree from Debian's packages, bootscope adds
//! its workload unit, the kernel's virtio modules and a few settings, and
//! `mkfs.ext4 -d` turns the tree into an image (no mount, no loop device).
//! The image is booted with Debian's own `/boot/vmlinuz-*` and
//! `/boot/initrd.img-*` and `root=/dev/vda`.
//!
//! Images are cached by their inputs (suite, packages, the files bootscope
//! adds, size, the kernel's modules) in the cache's `guests` directory, by
//! the cache's rules (`bootscope_model::cache`: the directories checked,
//! each entry opened without following a link and sealed): a second build
//! with the same inputs copies the cached image, checking its seal on the
//! way, and an entry without a seal or that fails it is rebuilt.

mod image;
mod tree;

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

use bootscope_model::cache::{self, CacheError, Verdict};
use bootscope_model::output::{OutputError, OutputFile};
use sha2::{Digest, Sha256};

use crate::guest::DebianKernel;
use crate::util;

pub use image::{copy_with_digest, digest, digest_and_seal};

/// Debian 12.
pub const DEFAULT_SUITE: &str = "bookworm";
/// Default image size.
pub const DEFAULT_SIZE: u64 = 2 << 30;
/// The smallest image accepted: the minimal systemd root is about 230 MB.
pub const MIN_SIZE: u64 = 512 << 20;
/// The largest image accepted.
pub const MAX_SIZE: u64 = 1 << 40;
/// Free space a build needs where the cache is: the root tree and the
/// image's data, with room to spare.
pub const BUILD_SPACE: u64 = 1 << 30;
/// The packages added to `minbase`.
pub const PACKAGES: [&str; 4] = ["systemd-sysv", "udev", "kmod", "e2fsprogs"];
/// The byte the workload writes to port 0x80 (Cloud Hypervisor's userspace
/// range; the lab's default guest writes the same).
pub const WORKLOAD_MARKER: u8 = crate::guest::USERSPACE_START_MARKER;
/// Where the workload leaves its record in the image.
pub const UNITS_FILE: &str = "/var/lib/bootscope/units.txt";
/// The kernel command line the image is booted with (besides the console).
pub const ROOT_CMDLINE: &str = "root=/dev/vda rw";

/// The manager's properties the workload records.
pub const MANAGER_PROPERTIES: &str = "Version,FirmwareTimestampMonotonic,LoaderTimestampMonotonic,\
KernelTimestampMonotonic,InitRDTimestampMonotonic,UserspaceTimestampMonotonic,\
FinishTimestampMonotonic,GeneratorsStartTimestampMonotonic,GeneratorsFinishTimestampMonotonic,\
UnitsLoadStartTimestampMonotonic,UnitsLoadFinishTimestampMonotonic";
/// The units' properties the workload records.
pub const UNIT_PROPERTIES: &str = "Id,LoadState,ActiveState,SubState,\
InactiveExitTimestampMonotonic,ActiveEnterTimestampMonotonic,ActiveExitTimestampMonotonic,\
InactiveEnterTimestampMonotonic,After";

/// What the image is built from.
#[derive(Clone, Debug)]
pub struct DebianImageSpec {
    /// Debian suite (`bookworm`).
    pub suite: String,
    /// Image size in bytes.
    pub size: u64,
    /// The workload stays up instead of powering off.
    pub keep_running: bool,
    /// The kernel whose virtio modules go into the image (it boots it).
    pub kernel: DebianKernel,
}

/// A built image.
#[derive(Clone, Debug)]
pub struct BuiltImage {
    /// Where it was written.
    pub path: PathBuf,
    /// It came from the cache (nothing was built).
    pub cache_hit: bool,
    /// The cache entry.
    pub cache_file: PathBuf,
    /// The image's digest.
    pub digest: String,
    /// A cache entry that failed its check and was rebuilt.
    pub rebuilt_bad_cache: bool,
}

/// Why a guest image could not be built.
#[derive(Debug, thiserror::Error)]
pub enum GuestBuildError {
    /// The size is outside what an image can be.
    #[error("image size {size} bytes is {problem}; give --size between 512M and 1T")]
    BadSize { size: u64, problem: &'static str },
    /// Building a root tree with its owners needs root.
    #[error("building a Debian root tree needs root (mmdebstrap keeps file owners only as root); run `bootscope guest build` as root")]
    NotRoot,
    /// A host program is missing.
    #[error("{program} is not installed; install it with `apt-get install {package}`")]
    ToolMissing {
        program: &'static str,
        package: &'static str,
    },
    /// Not enough free space.
    #[error("no room for the build in {}: {free} bytes free, about {need} needed; free some space or point XDG_CACHE_HOME elsewhere", dir.display())]
    NoRoom { dir: PathBuf, free: u64, need: u64 },
    /// Debian's packages could not be reached.
    #[error("cannot reach Debian's packages: {detail}; check the network or the mirror in /etc/apt/sources.list")]
    NoNetwork { detail: String },
    /// The root tree does not fit the size asked for.
    #[error("the root tree needs about {need} bytes, more than the image size {size}; give a larger --size")]
    TooSmall { size: u64, need: u64 },
    /// A build step failed.
    #[error("{step} failed: {detail}")]
    Step { step: &'static str, detail: String },
    /// A file operation failed.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The output file cannot be written.
    #[error(transparent)]
    Output(#[from] OutputError),
    /// The cache (its directories or an entry) is not trusted.
    #[error(transparent)]
    Cache(#[from] CacheError),
}

impl GuestBuildError {
    /// Bad input or a host that cannot build (exit status 2), as against a
    /// build that failed (1).
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            GuestBuildError::BadSize { .. }
                | GuestBuildError::NotRoot
                | GuestBuildError::ToolMissing { .. }
                | GuestBuildError::NoRoom { .. }
                | GuestBuildError::NoNetwork { .. }
                | GuestBuildError::TooSmall { .. }
                | GuestBuildError::Output(_)
                | GuestBuildError::Cache(_)
        )
    }
}

pub(crate) fn io_err(
    action: &'static str,
    path: &Path,
) -> impl FnOnce(io::Error) -> GuestBuildError {
    let path = path.to_path_buf();
    move |source| GuestBuildError::Io {
        action,
        path,
        source,
    }
}

/// Checks an image size.
pub fn check_size(size: u64) -> Result<(), GuestBuildError> {
    let problem = if size < MIN_SIZE {
        "too small for a Debian root"
    } else if size > MAX_SIZE {
        "larger than 1 TiB"
    } else if size % 4096 != 0 {
        "not a whole number of 4 KiB blocks"
    } else {
        return Ok(());
    };
    Err(GuestBuildError::BadSize { size, problem })
}

/// The cache's directory of guest images (`guests`), created private and
/// checked by the cache's rules.
pub fn cache_dir() -> Result<PathBuf, CacheError> {
    cache::cache_dir("guests")
}

/// The cache key: every input the image depends on.
pub fn cache_key(spec: &DebianImageSpec, modules: &[(String, Vec<u8>)]) -> String {
    let mut h = Sha256::new();
    let mut add = |label: &str, bytes: &[u8]| {
        h.update((label.len() as u64).to_le_bytes());
        h.update(label.as_bytes());
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    add("format", b"bootscope debian image 1");
    add("suite", spec.suite.as_bytes());
    add("packages", PACKAGES.join(",").as_bytes());
    add("size", &spec.size.to_le_bytes());
    add("kernel", spec.kernel.version.as_bytes());
    for (path, contents) in tree::added_files(spec) {
        add(&path, contents.as_bytes());
    }
    for (path, contents) in modules {
        add(path, contents);
    }
    h.finalize()[..12]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn free_bytes(dir: &Path) -> Result<u64, GuestBuildError> {
    use std::os::unix::ffi::OsStrExt;
    let c =
        std::ffi::CString::new(dir.as_os_str().as_bytes()).map_err(|_| GuestBuildError::Io {
            action: "inspect",
            path: dir.to_path_buf(),
            source: io::Error::other("path holds a NUL byte"),
        })?;
    // SAFETY: statvfs fills the zeroed struct we pass; the path is a valid C string.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io_err("inspect the file system of", dir)(
            io::Error::last_os_error(),
        ));
    }
    Ok(st.f_bavail as u64 * st.f_frsize as u64)
}

fn check_room(dir: &Path, need: u64) -> Result<(), GuestBuildError> {
    let free = free_bytes(dir)?;
    if free < need {
        return Err(GuestBuildError::NoRoom {
            dir: dir.to_path_buf(),
            free,
            need,
        });
    }
    Ok(())
}

/// Checks the host before anything is built: root, the programs.
pub fn check_host() -> Result<(), GuestBuildError> {
    if bootscope_model::proc::effective_uid() != 0 {
        return Err(GuestBuildError::NotRoot);
    }
    for (program, package) in [
        ("mmdebstrap", "mmdebstrap"),
        ("mkfs.ext4", "e2fsprogs"),
        ("depmod", "kmod"),
    ] {
        let found = util::find_in_path(Path::new(program)).is_some()
            || ["/usr/sbin", "/sbin"]
                .iter()
                .any(|d| Path::new(d).join(program).is_file());
        if !found {
            return Err(GuestBuildError::ToolMissing { program, package });
        }
    }
    Ok(())
}

/// The directory of an output path (the current one for a bare name).
fn parent_dir(out: &Path) -> PathBuf {
    match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Builds the image (or takes it from the cache) and writes it to `out`
/// atomically: on any failure nothing is left at `out`. `log` gets one
/// line per step.
pub fn build_debian_image(
    spec: &DebianImageSpec,
    out: &Path,
    log: &mut dyn FnMut(&str),
) -> Result<BuiltImage, GuestBuildError> {
    check_size(spec.size)?;
    let cache = cache_dir()?;
    check_host()?;
    bootscope_model::output::check_writable(out)?;
    let modules = tree::virtio_modules(&spec.kernel)?;
    let key = cache_key(spec, &modules);
    let cache_file = cache.join(format!("debian-{}-{key}.raw", spec.suite));
    let rebuilt_bad_cache = match from_cache(&cache_file, out, log)? {
        Cached::Copied(digest) => {
            return Ok(BuiltImage {
                path: out.to_path_buf(),
                cache_hit: true,
                cache_file,
                digest,
                rebuilt_bad_cache: false,
            })
        }
        Cached::Unusable => true,
        Cached::Absent => false,
    };
    check_room(&cache, BUILD_SPACE)?;
    check_room(&parent_dir(out), BUILD_SPACE / 2)?;
    build_into_cache(spec, &modules, &cache, &cache_file, log)?;
    let digest = match from_cache(&cache_file, out, log)? {
        Cached::Copied(digest) => digest,
        _ => {
            return Err(GuestBuildError::Step {
                step: "copying the image",
                detail: format!("{} changed while it was copied", cache_file.display()),
            })
        }
    };
    Ok(BuiltImage {
        path: out.to_path_buf(),
        cache_hit: false,
        cache_file,
        digest,
        rebuilt_bad_cache,
    })
}

/// What the cache gave for an image.
#[derive(Debug, PartialEq, Eq)]
pub enum Cached {
    /// The entry was copied to the output; its digest.
    Copied(String),
    /// No entry.
    Absent,
    /// An entry without a seal or that fails it: removed, nothing written.
    Unusable,
}

/// Copies the cache entry `cache_file` to `out` through a temporary file,
/// committed only when what was copied matches the entry's seal. The entry
/// is opened by the cache's rules (no link followed, a private regular
/// file of this user's: otherwise an error); one that is not sound is
/// removed.
pub fn from_cache(
    cache_file: &Path,
    out: &Path,
    log: &mut dyn FnMut(&str),
) -> Result<Cached, GuestBuildError> {
    let Some((mut src, _)) = cache::open_file(cache_file)? else {
        return Ok(Cached::Absent);
    };
    log(&format!("cached image {}", cache_file.display()));
    let mut dst = OutputFile::create_with_mode(out, 0o600)?;
    let (digest, seal) =
        copy_with_digest(&mut src, dst.file_mut()).map_err(io_err("write", out))?;
    let verdict = cache::verify_seal(cache_file, &seal);
    if let Some(why) = verdict.why_rebuilt() {
        drop(dst);
        log(&format!(
            "the cached image is not used ({why}); rebuilding it"
        ));
        let _ = fs::remove_file(cache::seal_path(cache_file));
        let _ = fs::remove_file(cache_file);
        return Ok(Cached::Unusable);
    }
    debug_assert_eq!(verdict, Verdict::Sound);
    // commit() flushes the file to disk before renaming it into place.
    dst.commit()?;
    Ok(Cached::Copied(digest))
}

/// Builds the image into the cache: root tree, bootscope's files, image,
/// digest. Everything is made in a temporary directory inside the cache
/// and renamed into place at the end.
fn build_into_cache(
    spec: &DebianImageSpec,
    modules: &[(String, Vec<u8>)],
    cache: &Path,
    cache_file: &Path,
    log: &mut dyn FnMut(&str),
) -> Result<(), GuestBuildError> {
    let work = tempfile::Builder::new()
        .prefix(".build-")
        .tempdir_in(cache)
        .map_err(io_err("create a build directory in", cache))?;
    let root = work.path().join("root");
    log(&format!(
        "mmdebstrap --variant=minbase --include={} {} (Debian's packages)",
        PACKAGES.join(","),
        spec.suite
    ));
    tree::mmdebstrap(&spec.suite, &root, &work.path().join("mmdebstrap.log"))?;
    log("adding the workload unit, fstab and the virtio modules");
    tree::add_files(spec, &root, modules)?;
    let need = tree::tree_bytes(&root)?;
    if need > spec.size {
        return Err(GuestBuildError::TooSmall {
            size: spec.size,
            need,
        });
    }
    let img = work.path().join("image.raw");
    log(&format!("mkfs.ext4 -d (image of {} bytes)", spec.size));
    mkfs(&root, &img, spec.size)?;
    let mut f = File::open(&img).map_err(io_err("open", &img))?;
    let (_, seal) = digest_and_seal(&mut f).map_err(io_err("read", &img))?;
    f.sync_all().map_err(io_err("sync", &img))?;
    // The seal first, then the entry: a reader never finds a fresh entry
    // under a stale seal that matches it.
    cache::store_seal(cache_file, &seal).map_err(io_err("store the seal of", cache_file))?;
    fs::rename(&img, cache_file).map_err(io_err("store the image as", cache_file))?;
    Ok(())
}

fn mkfs(root: &Path, img: &Path, size: u64) -> Result<(), GuestBuildError> {
    let f = File::create(img).map_err(io_err("create", img))?;
    f.set_len(size).map_err(io_err("size", img))?;
    drop(f);
    let output = Command::new("mkfs.ext4")
        .args([
            "-q",
            "-F",
            "-L",
            "bootscope-root",
            "-E",
            "root_owner=0:0",
            "-d",
        ])
        .arg(root)
        .arg(img)
        .env("PATH", "/usr/sbin:/sbin:/usr/bin:/bin")
        .output()
        .map_err(io_err("run mkfs.ext4 for", img))?;
    if !output.status.success() {
        return Err(GuestBuildError::Step {
            step: "mkfs.ext4 -d",
            detail: format!(
                "{}: {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> DebianImageSpec {
        DebianImageSpec {
            suite: DEFAULT_SUITE.into(),
            size: DEFAULT_SIZE,
            keep_running: false,
            kernel: DebianKernel {
                version: "6.1.0-56-amd64".into(),
                vmlinuz: "/boot/vmlinuz-6.1.0-56-amd64".into(),
                modules_dir: "/lib/modules/6.1.0-56-amd64".into(),
            },
        }
    }

    #[test]
    fn sizes_outside_the_range_are_refused() {
        assert!(check_size(DEFAULT_SIZE).is_ok());
        for bad in [0, MIN_SIZE - 4096, MAX_SIZE + 4096, MIN_SIZE + 1] {
            let e = check_size(bad).unwrap_err();
            assert!(e.is_bad_input(), "{e}");
            assert!(e.to_string().contains("--size"), "{e}");
        }
    }

    #[test]
    fn the_cache_key_follows_every_input() {
        let base = cache_key(&spec(), &[]);
        assert_eq!(base, cache_key(&spec(), &[]));
        let mut s = spec();
        s.size += 4096;
        assert_ne!(base, cache_key(&s, &[]));
        let mut s = spec();
        s.keep_running = true;
        assert_ne!(base, cache_key(&s, &[]));
        let mut s = spec();
        s.suite = "trixie".into();
        assert_ne!(base, cache_key(&s, &[]));
        let m = vec![("virtio_console.ko".to_string(), vec![1u8])];
        assert_ne!(base, cache_key(&spec(), &m));
    }

    fn entry(dir: &Path, bytes: &[u8]) -> PathBuf {
        let f = dir.join("debian-bookworm-x.raw");
        cache::store(&f, bytes).unwrap();
        f
    }

    fn image_bytes() -> Vec<u8> {
        let mut b = vec![0u8; 3 << 20];
        b[5] = 1;
        b[(2 << 20) + 9] = 2;
        b
    }

    #[test]
    fn a_sealed_entry_is_copied_and_a_tampered_one_rebuilt() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("out.raw");
        let f = entry(d.path(), &image_bytes());
        let mut log = |_: &str| {};
        let got = from_cache(&f, &out, &mut log).unwrap();
        let want = digest(&mut File::open(&f).unwrap()).unwrap();
        assert_eq!(got, Cached::Copied(want));
        assert_eq!(fs::read(&out).unwrap(), image_bytes());
        fs::remove_file(&out).unwrap();
        // One byte changed after it was sealed: not used, removed.
        let mut bad = image_bytes();
        bad[(2 << 20) + 9] = 3;
        fs::write(&f, &bad).unwrap();
        assert_eq!(from_cache(&f, &out, &mut log).unwrap(), Cached::Unusable);
        assert!(!out.exists() && !f.exists() && !cache::seal_path(&f).exists());
        assert_eq!(from_cache(&f, &out, &mut log).unwrap(), Cached::Absent);
        // No seal: not used either.
        let f = entry(d.path(), &image_bytes());
        fs::remove_file(cache::seal_path(&f)).unwrap();
        assert_eq!(from_cache(&f, &out, &mut log).unwrap(), Cached::Unusable);
        assert!(!out.exists());
    }

    #[test]
    fn an_entry_that_is_a_link_or_open_to_others_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("out.raw");
        let real = entry(d.path(), &image_bytes());
        let sub = d.path().join("sub");
        fs::create_dir(&sub).unwrap();
        let link = sub.join("debian-bookworm-x.raw");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        fs::copy(cache::seal_path(&real), cache::seal_path(&link)).unwrap();
        let mut log = |_: &str| {};
        let e = from_cache(&link, &out, &mut log).unwrap_err();
        assert!(
            e.is_bad_input() && e.to_string().contains("symbolic link"),
            "{e}"
        );
        fs::set_permissions(&real, fs::Permissions::from_mode(0o666)).unwrap();
        let e = from_cache(&real, &out, &mut log).unwrap_err();
        assert!(
            e.is_bad_input() && e.to_string().contains("writable"),
            "{e}"
        );
        assert!(!out.exists());
    }
}
