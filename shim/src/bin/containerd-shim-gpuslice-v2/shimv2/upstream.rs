//! Which `containerd-shim-runc-v2` runs the containers: `GPUSLICE_SHIM_RUNC_V2` (a path, or a
//! name looked up in `PATH`), else `containerd-shim-runc-v2` in `PATH` — containerd gives its
//! shims its own `PATH`, so that is the runc-v2 of the same containerd. This binary is refused.
//! Also where our own socket lives for a given runc-v2 socket.

use std::path::{Path, PathBuf};

/// Environment variable naming the runc v2 shim.
pub const ENV: &str = "GPUSLICE_SHIM_RUNC_V2";
/// The default name.
pub const DEFAULT: &str = "containerd-shim-runc-v2";

/// The runc v2 shim is missing or is this binary.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// Not found.
    #[error("{name} not found{where_} (set {ENV} to its path)")]
    Missing {
        /// What was looked for.
        name: String,
        /// Where.
        where_: &'static str,
    },
    /// Resolves to ourselves.
    #[error("{0} is containerd-shim-gpuslice-v2 itself ({ENV})")]
    Itself(PathBuf),
}

/// Resolves the runc v2 shim from `configured` (the value of [`ENV`]) and `path` (`PATH`).
pub fn resolve(
    configured: Option<&str>,
    path: Option<&std::ffi::OsStr>,
    me: Option<&Path>,
) -> Result<PathBuf, UpstreamError> {
    let name = configured.filter(|s| !s.is_empty()).unwrap_or(DEFAULT);
    let n = Path::new(name);
    let found = if n.components().count() > 1 || n.is_absolute() {
        is_executable(n).then(|| n.to_path_buf())
    } else {
        path.and_then(|p| {
            std::env::split_paths(p)
                .map(|d| d.join(n))
                .find(|c| is_executable(c))
        })
    };
    let found = found.ok_or_else(|| UpstreamError::Missing {
        name: name.to_string(),
        where_: if n.is_absolute() { "" } else { " in PATH" },
    })?;
    let canon = std::fs::canonicalize(&found).ok();
    if canon.is_some() && canon.as_deref() == me {
        return Err(UpstreamError::Itself(found));
    }
    Ok(found)
}

/// [`resolve`] with this process's environment.
pub fn find() -> Result<PathBuf, UpstreamError> {
    let me = std::env::current_exe().and_then(std::fs::canonicalize).ok();
    resolve(
        std::env::var(ENV).ok().as_deref(),
        std::env::var_os("PATH").as_deref(),
        me.as_deref(),
    )
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Our socket for the runc v2 shim at `upstream`: a stable function of its address, so every
/// `start` of the same group (a Pod on containerd 1.6) finds the same proxy.
pub fn proxy_address(upstream: &str) -> String {
    containerd_shim::socket_address(upstream, "gpuslice", "proxy")
}

/// The file system path of a `unix://` address.
pub fn socket_path(address: &str) -> &str {
    address.strip_prefix("unix://").unwrap_or(address)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn exe(dir: &Path, name: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("gs-up-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn path_lookup_and_override() {
        let a = tmp("a");
        let b = tmp("b");
        let in_b = exe(&b, DEFAULT);
        let path = std::env::join_paths([&a, &b]).unwrap();
        assert_eq!(resolve(None, Some(&path), None).unwrap(), in_b);
        let other = exe(&a, "my-runc-v2");
        assert_eq!(
            resolve(Some(other.to_str().unwrap()), None, None).unwrap(),
            other
        );
        assert_eq!(
            resolve(Some("my-runc-v2"), Some(&path), None).unwrap(),
            other
        );
    }

    #[test]
    fn missing_and_self_are_refused() {
        let a = tmp("c");
        let path = std::env::join_paths([&a]).unwrap();
        let e = resolve(None, Some(&path), None).unwrap_err().to_string();
        assert!(
            e.contains("containerd-shim-runc-v2 not found in PATH"),
            "{e}"
        );
        assert!(e.contains(ENV), "{e}");
        let me = exe(&a, DEFAULT);
        let canon = std::fs::canonicalize(&me).unwrap();
        let e = resolve(None, Some(&path), Some(&canon)).unwrap_err();
        assert!(matches!(e, UpstreamError::Itself(_)), "{e}");
    }

    #[test]
    fn proxy_address_is_stable_and_distinct() {
        let up = "unix:///run/containerd/s/0123";
        let ours = proxy_address(up);
        assert_eq!(ours, proxy_address(up));
        assert_ne!(ours, up);
        assert_ne!(ours, proxy_address("unix:///run/containerd/s/4567"));
        assert!(ours.starts_with("unix:///run/containerd/s/"), "{ours}");
        assert_eq!(socket_path(&ours), &ours["unix://".len()..]);
    }
}
