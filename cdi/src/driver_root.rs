//! Finding one driver library under a driver root the way NVIDIA's container toolkit does: the
//! root's own loader cache (`<root>/etc/ld.so.cache`) first, then a fixed list of library
//! directories. A node agent in a container mounts the node's `/` read-only (e.g. at `/host`)
//! and asks here for `libnvidia-ml.so.1`, so no manifest names a distribution's library
//! directory (Debian's `/usr/lib/x86_64-linux-gnu`, RHEL's `/usr/lib64`, COS's
//! `/home/kubernetes/bin/nvidia/lib64`).
//!
//! Every path is resolved *inside* the root: a symlink's absolute target (Debian's driver
//! packages go through `/etc/alternatives`) is taken relative to the root, and `..` never
//! leaves it, so what is returned is a regular file of the node, never one of the container.

use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

use crate::ldcache;

/// The soname of NVML.
pub const NVML: &str = "libnvidia-ml.so.1";

/// Environment variable naming the driver root inside the container (the node's `/` mounted
/// read-only, or a driver container's root such as `/host/run/nvidia/driver`).
pub const DRIVER_ROOT_ENV: &str = "GPUSLICE_DRIVER_ROOT";
/// Environment variable naming the NVML library outright (wins over everything).
pub const NVML_LIBRARY_ENV: &str = "GPUSLICE_NVML_LIBRARY";
/// The soname of the CUDA driver (what the arbiter's probe context loads).
pub const CUDA: &str = "libcuda.so.1";
/// Environment variable naming the CUDA driver library outright (wins over the driver root).
pub const CUDA_LIBRARY_ENV: &str = "GPUSLICE_CUDA_LIBRARY";

/// Directories searched under the root when the loader cache has no usable entry, in order:
/// the toolkit's list (Debian/Ubuntu multiarch, RHEL/AL2023 `lib64`, Debian's
/// `nvidia/current`), then COS's driver directory (installed by the GKE driver installer,
/// never in the loader cache) and the GPU Operator's driver container root.
pub const SEARCH_DIRS: &[&str] = &[
    "/usr/lib64",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu/nvidia/current",
    "/usr/lib/aarch64-linux-gnu/nvidia/current",
    "/lib64",
    "/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/home/kubernetes/bin/nvidia/lib64",
    "/run/nvidia/driver/usr/lib64",
    "/run/nvidia/driver/usr/lib/x86_64-linux-gnu",
    "/run/nvidia/driver/usr/lib/aarch64-linux-gnu",
];

/// Symlinks followed before giving up (the kernel's limit).
const MAX_LINKS: usize = 40;

/// Why a library could not be found.
#[derive(Debug, thiserror::Error)]
#[error(
    "{soname} not found under driver root {root}: loader cache {cache}; searched {searched} \
     (set {DRIVER_ROOT_ENV} to the driver's root, or {override_env} to the file)"
)]
pub struct LocateError {
    /// The library asked for.
    pub soname: String,
    /// The driver root.
    pub root: String,
    /// What the loader cache gave (missing, unreadable, no native entry …).
    pub cache: String,
    /// The directories searched after it, comma-separated.
    pub searched: String,
    /// The variable that names the file outright ([`NVML_LIBRARY_ENV`], [`CUDA_LIBRARY_ENV`]).
    pub override_env: &'static str,
}

/// Finds `soname` under `root`: the first native entry of `<root>/etc/ld.so.cache` whose file
/// resolves inside the root, else the first of [`SEARCH_DIRS`] holding it. Returns the resolved
/// regular file (under `root`).
pub fn locate(root: &Path, soname: &str) -> Result<PathBuf, LocateError> {
    let cache_path = root.join("etc/ld.so.cache");
    let cache = match ldcache::read(&cache_path) {
        Ok(entries) => {
            let native: Vec<_> = entries
                .iter()
                .filter(|e| e.name == soname && e.native())
                .collect();
            if let Some(p) = native.iter().find_map(|e| resolve_in_root(root, &e.path)) {
                return Ok(p);
            }
            match native.first() {
                Some(e) => format!("lists {} but it does not resolve to a file", e.path),
                None => "has no native entry for it".to_string(),
            }
        }
        Err(e) => e.to_string(),
    };
    for dir in SEARCH_DIRS {
        if let Some(p) = resolve_in_root(root, &format!("{dir}/{soname}")) {
            return Ok(p);
        }
    }
    Err(LocateError {
        soname: soname.to_string(),
        root: root.display().to_string(),
        cache,
        searched: SEARCH_DIRS.join(", "),
        override_env: if soname == CUDA {
            CUDA_LIBRARY_ENV
        } else {
            NVML_LIBRARY_ENV
        },
    })
}

/// The NVML library a node agent should load: `GPUSLICE_NVML_LIBRARY` if set, else
/// `configured` (the config's `nvml_library`), else NVML located under `GPUSLICE_DRIVER_ROOT`
/// if that is set, else `None` (the loader's own search for `libnvidia-ml.so.1`).
pub fn nvml_library(configured: Option<&Path>) -> Result<Option<PathBuf>, LocateError> {
    choose_nvml(
        std::env::var_os(NVML_LIBRARY_ENV),
        configured,
        std::env::var_os(DRIVER_ROOT_ENV),
    )
}

/// The CUDA driver the arbiter's probe context loads (`docs/contexts.md`): `GPUSLICE_CUDA_LIBRARY`
/// if set, else `libcuda.so.1` located under `GPUSLICE_DRIVER_ROOT` if that is set (the node's
/// driver, from the arbiter's DaemonSet Pod), else `None` (the loader's own search).
pub fn cuda_library() -> Result<Option<PathBuf>, LocateError> {
    choose(
        CUDA,
        std::env::var_os(CUDA_LIBRARY_ENV),
        None,
        std::env::var_os(DRIVER_ROOT_ENV),
    )
}

fn choose_nvml(
    env_library: Option<OsString>,
    configured: Option<&Path>,
    env_root: Option<OsString>,
) -> Result<Option<PathBuf>, LocateError> {
    choose(NVML, env_library, configured, env_root)
}

/// `soname`: the file an environment variable names, else the configured one, else the one
/// located under the driver root, else `None`. Empty variables count as unset.
fn choose(
    soname: &str,
    env_library: Option<OsString>,
    configured: Option<&Path>,
    env_root: Option<OsString>,
) -> Result<Option<PathBuf>, LocateError> {
    if let Some(lib) = env_library.filter(|v| !v.is_empty()) {
        return Ok(Some(PathBuf::from(lib)));
    }
    if let Some(lib) = configured {
        return Ok(Some(lib.to_path_buf()));
    }
    match env_root.filter(|v| !v.is_empty()) {
        Some(root) => locate(Path::new(&root), soname).map(Some),
        None => Ok(None),
    }
}

/// Resolves the absolute path `abs` as the node would, with `root` as its `/`: every symlink
/// followed inside the root. `Some` only for a regular file.
pub fn resolve_in_root(root: &Path, abs: &str) -> Option<PathBuf> {
    // The path still to walk, as components (reversed: pop from the end).
    let mut todo: Vec<OsString> = components(Path::new(abs));
    todo.reverse();
    let mut done: Vec<OsString> = Vec::new();
    let mut links = 0;
    while let Some(c) = todo.pop() {
        if c == ".." {
            done.pop();
            continue;
        }
        let here: PathBuf = std::iter::once(root.as_os_str().to_owned())
            .chain(done.iter().cloned())
            .chain(std::iter::once(c.clone()))
            .collect();
        let meta = std::fs::symlink_metadata(&here).ok()?;
        if !meta.file_type().is_symlink() {
            done.push(c);
            continue;
        }
        links += 1;
        if links > MAX_LINKS {
            return None;
        }
        let target = std::fs::read_link(&here).ok()?;
        if target.is_absolute() {
            done.clear();
        }
        let mut more = components(&target);
        more.reverse();
        todo.extend(more);
    }
    let path: PathBuf = std::iter::once(root.as_os_str().to_owned())
        .chain(done)
        .collect();
    path.is_file().then_some(path)
}

/// The normal and `..` components of `p` (root and `.` dropped).
fn components(p: &Path) -> Vec<OsString> {
    p.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_owned()),
            Component::ParentDir => Some(OsString::from("..")),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_explicit_library_wins_then_the_config_then_the_driver_root() {
        let lib = || Some(OsString::from("/x/libnvidia-ml.so.1"));
        let cfg = Path::new("/cfg/libnvidia-ml.so.1");
        let root = || Some(OsString::from("/nonexistent-driver-root"));
        assert_eq!(
            choose_nvml(lib(), Some(cfg), root()).unwrap(),
            Some(PathBuf::from("/x/libnvidia-ml.so.1"))
        );
        assert_eq!(
            choose_nvml(None, Some(cfg), root()).unwrap(),
            Some(cfg.to_path_buf())
        );
        // Empty variables count as unset.
        assert_eq!(
            choose_nvml(Some(OsString::new()), None, Some(OsString::new())).unwrap(),
            None
        );
        // A driver root without NVML is an error naming it, not a silent fallback to the
        // container's own loader search.
        let err = choose_nvml(None, None, root()).unwrap_err();
        assert_eq!(err.root, "/nonexistent-driver-root");
        assert!(err.cache.contains("cannot read"), "{err}");
        assert!(err.to_string().contains(NVML_LIBRARY_ENV), "{err}");
    }

    /// The probe context's CUDA driver: the variable's file, else `libcuda.so.1` in the driver
    /// root's loader cache (a fixture root with Debian's layout), else the loader's search; a
    /// root without it is an error naming `GPUSLICE_CUDA_LIBRARY`.
    #[test]
    fn the_cuda_driver_is_found_under_the_driver_root() {
        let root = std::env::temp_dir().join(format!("gs-cuda-root-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let dir = root.join("usr/lib/x86_64-linux-gnu");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("libcuda.so.580.159.04"), b"elf").unwrap();
        std::os::unix::fs::symlink("libcuda.so.580.159.04", dir.join(CUDA)).unwrap();
        let r = || Some(root.clone().into_os_string());
        assert_eq!(
            choose(CUDA, None, None, r()).unwrap(),
            Some(dir.join("libcuda.so.580.159.04"))
        );
        let lib = Some(OsString::from("/x/libcuda.so.1"));
        assert_eq!(
            choose(CUDA, lib, None, r()).unwrap(),
            Some(PathBuf::from("/x/libcuda.so.1"))
        );
        assert_eq!(choose(CUDA, None, None, None).unwrap(), None);
        std::fs::remove_file(dir.join(CUDA)).unwrap();
        let err = choose(CUDA, None, None, r()).unwrap_err();
        assert_eq!(err.soname, CUDA);
        assert!(err.to_string().contains(CUDA_LIBRARY_ENV), "{err}");
        let _ = std::fs::remove_dir_all(&root);
    }
}
