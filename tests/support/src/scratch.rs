//! The one per-test temporary directory of every suite ([`Scratch`]), and the mount helpers its
//! removal needs.
//!
//! Paths are short (`/tmp/gs-<tag>-<pid>-<n>`) because daemons put unix sockets in them (108-byte
//! limit). Removal never follows a mount: mounts left below the directory are detached first,
//! and if any remain the directory is left in place with a warning — deleting through a bind
//! mount would delete the host's files. `GPUSLICE_KEEP_SCRATCH` (or the older
//! `GPUSLICE_E2E_KEEP` and `GPUSLICE_TRIALS_KEEP`) set keeps every directory for inspection,
//! simulated nodes' (`gs-<tag>-<pid>`) included.

use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A temporary directory, removed on drop. Derefs to its path.
#[derive(Debug)]
pub struct Scratch(pub PathBuf);

impl Scratch {
    /// Creates `/tmp/gs-<tag>-<pid>-<n>`, empty, mode 0711 (so container processes running as
    /// other users can reach bind-mounted files below it). Panics when it cannot.
    pub fn new(tag: &str) -> Scratch {
        use std::os::unix::fs::PermissionsExt;
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = PathBuf::from(format!("/tmp/gs-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)
            .unwrap_or_else(|e| panic!("creating {}: {e}", path.display()));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o711))
            .unwrap_or_else(|e| panic!("chmod {}: {e}", path.display()));
        Scratch(path)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// A path below the directory.
    pub fn join(&self, rel: &str) -> PathBuf {
        self.0.join(rel)
    }

    /// Creates and returns a subdirectory.
    pub fn dir(&self, rel: &str) -> std::io::Result<PathBuf> {
        let p = self.0.join(rel);
        std::fs::create_dir_all(&p)
            .map_err(|e| std::io::Error::new(e.kind(), format!("creating {}: {e}", p.display())))?;
        Ok(p)
    }
}

impl Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for Scratch {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}

/// Whether test directories are kept for inspection: `GPUSLICE_KEEP_SCRATCH`, or the older
/// `GPUSLICE_E2E_KEEP` and `GPUSLICE_TRIALS_KEEP`, set.
pub(crate) fn keep() -> bool {
    [
        "GPUSLICE_KEEP_SCRATCH",
        "GPUSLICE_E2E_KEEP",
        "GPUSLICE_TRIALS_KEEP",
    ]
    .iter()
    .any(|v| std::env::var_os(v).is_some())
}

/// Mount points at or below `dir`, deepest first.
pub fn mounts_below(dir: &Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut v: Vec<PathBuf> = text
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|m| PathBuf::from(unescape_mount(m)))
        .filter(|m| m.starts_with(dir))
        .collect();
    v.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    v.dedup();
    v
}

/// Undo mountinfo's octal escapes (`\040` for a space, …).
pub fn unescape_mount(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Detach every mount at or below `dir` (lazy unmount).
pub fn detach_mounts_below(dir: &Path) {
    for m in mounts_below(dir) {
        let Ok(c) = std::ffi::CString::new(m.as_os_str().as_encoded_bytes()) else {
            continue;
        };
        // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if keep() {
            eprintln!("GPUSLICE_KEEP_SCRATCH: leaving {}", self.0.display());
            return;
        }
        detach_mounts_below(&self.0);
        let left = mounts_below(&self.0);
        if !left.is_empty() {
            eprintln!(
                "warning: not removing {}: mounts remain below it: {left:?}",
                self.0.display()
            );
            return;
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scratch_is_fresh_unique_and_gone_after_drop() {
        let a = Scratch::new("unit");
        let b = Scratch::new("unit");
        assert_ne!(a.path(), b.path());
        assert!(a.is_dir() && std::fs::read_dir(&a).unwrap().next().is_none());
        let sub = a.dir("x/y").unwrap();
        assert!(sub.is_dir() && sub.starts_with(&a));
        let p = a.to_path_buf();
        drop(a);
        assert!(keep() || !p.exists(), "{} left behind", p.display());
        std::fs::write(b.join("f"), b"").unwrap();
        assert!(b.dir("f/under-a-file").is_err());
    }

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape_mount("/a\\040b\\011c"), "/a b\tc");
        assert_eq!(unescape_mount("/plain"), "/plain");
    }
}
