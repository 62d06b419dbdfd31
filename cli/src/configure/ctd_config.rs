//! What a containerd config is, as every `gpuslice configure containerd` step reads it: the
//! class name, the command's options, the config's version and its CRI plugin keys, the default
//! drop-in and the glob `imports` entries use. Below `containerd` (the plan), `ctd_imports`
//! (load order) and `ctd_remove` (`--remove`), which all import from here and not from each
//! other in a circle.

use std::path::{Path, PathBuf};

use toml_edit::DocumentMut;

use super::ConfigureError;

/// The runtime class name.
pub const CLASS: &str = "gpuslice";
/// How the class runs gpuslice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Style {
    /// runc's shim with `options.BinaryName = gpuslice-runtime`.
    #[default]
    BinaryName,
    /// `runtime_type = "io.containerd.gpuslice.v2"` (the gpuslice shim).
    Shim,
}

/// What to configure.
#[derive(Debug, Clone)]
pub struct Options {
    /// The main config file.
    pub config: PathBuf,
    /// The drop-in (versions 2 and 3); default `<config dir>/conf.d/gpuslice.toml`.
    pub drop_in: Option<PathBuf>,
    /// Edit the main file even where `imports` would do.
    pub in_place: bool,
    /// The class style.
    pub style: Style,
    /// Path of `gpuslice-runtime` (the `BinaryName` style).
    pub runtime_path: PathBuf,
    /// Make `gpuslice` the default runtime (`default_runtime_name`).
    pub default_runtime: bool,
    /// Set `enable_cdi = true` (and `cdi_spec_dirs` when absent).
    pub enable_cdi: bool,
    /// Version of a config file written from nothing (the file does not exist): 2 or 3.
    pub new_version: i64,
    /// Major version of the containerd that loads the file (`None`: unknown), which decides
    /// how much of the CRI table the drop-in carries ([`super::ctd_imports::Merge::for_config`]).
    pub series: Option<u32>,
}

/// The CRI plugin's table path for a config version.
pub fn cri_keys(version: i64) -> Option<[&'static str; 2]> {
    match version {
        1 => Some(["plugins", "cri"]),
        2 => Some(["plugins", "io.containerd.grpc.v1.cri"]),
        3 => Some(["plugins", "io.containerd.cri.v1.runtime"]),
        _ => None,
    }
}

/// The config's version (`version`; absent means 1).
pub fn version_of(doc: &DocumentMut, path: &Path) -> Result<i64, ConfigureError> {
    match doc.get("version") {
        None => Ok(1),
        Some(v) => match v.as_integer() {
            Some(n @ 1..=3) => Ok(n),
            _ => Err(ConfigureError::Unsupported {
                path: path.to_path_buf(),
                message: format!(
                    "unsupported config version {}; versions 1, 2 and 3 are known",
                    v.to_string().trim()
                ),
            }),
        },
    }
}

/// The default drop-in beside `config`.
pub fn default_drop_in(config: &Path) -> PathBuf {
    config
        .parent()
        .unwrap_or(Path::new("/etc/containerd"))
        .join("conf.d/gpuslice.toml")
}

/// Shell-style `*` / `?` matching (what containerd's `filepath.Glob` accepts for imports, bar
/// character classes, which are compared literally). Neither wildcard matches `/`. Runs in
/// `O(pattern × name)`: an `imports` entry with many stars cannot stall the command.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let n: Vec<char> = name.chars().collect();
    // ok[j]: the pattern read so far matches the first j characters of the name.
    let mut ok = vec![false; n.len() + 1];
    ok[0] = true;
    for p in pattern.chars() {
        let mut next = vec![false; n.len() + 1];
        match p {
            '*' => {
                next[0] = ok[0];
                for j in 1..=n.len() {
                    next[j] = ok[j] || (next[j - 1] && n[j - 1] != '/');
                }
            }
            '?' => {
                for j in 1..=n.len() {
                    next[j] = ok[j - 1] && n[j - 1] != '/';
                }
            }
            c => {
                for j in 1..=n.len() {
                    next[j] = ok[j - 1] && n[j - 1] == c;
                }
            }
        }
        ok = next;
    }
    ok[n.len()]
}
