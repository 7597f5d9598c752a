//! Firecracker's `--config-file`: read by the input rules, and rewritten
//! into a private temporary copy (the user's file is never written).

use std::io::Write as _;
use std::path::{Path, PathBuf};

use super::VmmArgsError;

/// The largest config file read: a Firecracker config is a few KiB.
const MAX_CONFIG: u64 = 1 << 20;

/// Where `--config-file` is in Firecracker's arguments, and its path.
pub fn config_arg(args: &[String]) -> Option<(usize, PathBuf)> {
    crate::argv::flag_values(args, &["--config-file"])
        .last()
        .map(|(i, v)| (i, PathBuf::from(v)))
}

/// The path of Firecracker's `--config-file`.
pub fn config_path(args: &[String]) -> Option<PathBuf> {
    config_arg(args).map(|(_, p)| p)
}

/// The config file as JSON: a regular file only, at most 1 MiB
/// ([`crate::input::Input::open_named`]).
pub fn read_config(path: &Path) -> Result<serde_json::Value, VmmArgsError> {
    let bad = |problem: String| VmmArgsError::Config {
        path: path.to_path_buf(),
        problem,
    };
    let (file, meta) = crate::input::open_named(path).map_err(|e| bad(e.to_string()))?;
    if meta.len() > MAX_CONFIG {
        return Err(bad(format!(
            "{} bytes, more than a config file's {MAX_CONFIG}",
            meta.len()
        )));
    }
    let value: serde_json::Value = serde_json::from_reader(std::io::Read::take(
        std::io::BufReader::new(file),
        MAX_CONFIG,
    ))
    .map_err(|e| bad(format!("not JSON: {e}")))?;
    if !value.get("boot-source").is_some_and(|b| b.is_object()) {
        return Err(bad("it has no \"boot-source\" object".into()));
    }
    Ok(value)
}

/// Firecracker's rewritten config: a file in a directory of its own that
/// only this user can enter (mode 0700, an unpredictable name under the
/// temporary directory), so no other user can replace or read it; both are
/// removed when dropped, the file first (and on a signal, by the list of
/// temporary files).
pub struct PrivateConfig {
    file: crate::output::Temporary,
    _dir: tempfile::TempDir,
}

impl PrivateConfig {
    /// The copy's path, for Firecracker's `--config-file`.
    pub fn path(&self) -> &Path {
        self.file.path()
    }
}

/// `config` with `boot-source.boot_args` set to `cmdline`, written to a
/// new private file (mode 0600, in a private directory: [`PrivateConfig`]);
/// `original` names the user's file for messages.
pub fn write_private(
    original: &Path,
    config: &mut serde_json::Value,
    cmdline: &str,
) -> Result<PrivateConfig, VmmArgsError> {
    if let Some(boot) = config
        .get_mut("boot-source")
        .and_then(|b| b.as_object_mut())
    {
        boot.insert("boot_args".into(), cmdline.into());
    }
    let bytes = serde_json::to_vec_pretty(config).map_err(|e| VmmArgsError::Config {
        path: original.to_path_buf(),
        problem: e.to_string(),
    })?;
    let dir =
        crate::output::private_temp_dir("bootscope-firecracker-").map_err(VmmArgsError::Write)?;
    let mut file = crate::output::Temporary::new_in(
        dir.path(),
        std::ffi::OsStr::new("config-"),
        ".json",
        0o600,
    )
    .map_err(VmmArgsError::Write)?;
    file.as_file_mut()
        .write_all(&bytes)
        .and_then(|()| file.as_file_mut().flush())
        .map_err(VmmArgsError::Write)?;
    Ok(PrivateConfig { file, _dir: dir })
}

/// The guest kernel a Firecracker command boots: `kernel_image_path` of
/// `boot-source` in its `--config-file`. Relative paths (the config's
/// and the kernel's, which Firecracker takes from its own working
/// directory) are taken from `cwd`. None: not Firecracker, no config, or
/// one that cannot be read or names no kernel.
pub fn kernel_of<S: AsRef<str>>(argv: &[S], cwd: &Path) -> Option<PathBuf> {
    let (kind, at) = super::locate(argv);
    if kind != super::VmmKind::Firecracker {
        return None;
    }
    let args: Vec<String> = argv[at..].iter().map(|s| s.as_ref().to_string()).collect();
    let config = read_config(&cwd.join(config_path(&args)?)).ok()?;
    let kernel = config.pointer("/boot-source/kernel_image_path")?.as_str()?;
    Some(cwd.join(kernel))
}

/// The `path_on_host` of every drive in a config, the root device's
/// (`is_root_device`) first.
pub fn drive_paths(config: &serde_json::Value) -> Vec<PathBuf> {
    let drives = config.get("drives").and_then(|d| d.as_array());
    let is_root = |d: &serde_json::Value| d.get("is_root_device") == Some(&true.into());
    let (root, other): (Vec<_>, Vec<_>) = drives.into_iter().flatten().partition(|d| is_root(d));
    root.into_iter()
        .chain(other)
        .filter_map(|d| d.get("path_on_host")?.as_str())
        .map(PathBuf::from)
        .collect()
}
