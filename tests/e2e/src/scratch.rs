//! Per-test temporary directories.
//!
//! Paths are short (`/tmp/gse-<tag>-<pid>-<n>`) because daemons put unix sockets in them (108-byte
//! limit). Removal never follows a mount: mounts left below the directory are detached first,
//! and if any remain the directory is left in place with a warning — deleting through a bind
//! mount would delete the host's files.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A temporary directory removed on drop.
#[derive(Debug)]
pub struct Scratch {
    path: PathBuf,
    keep: bool,
}

impl Scratch {
    /// Create `/tmp/gse-<tag>-<pid>-<n>` (mode 0711, so container processes running as other
    /// users can reach bind-mounted files below it).
    pub fn new(tag: &str) -> Result<Self> {
        use std::os::unix::fs::PermissionsExt;
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = PathBuf::from(format!("/tmp/gse-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o711))?;
        Ok(Self {
            path,
            keep: std::env::var_os("GPUSLICE_E2E_KEEP").is_some(),
        })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A path below the directory.
    pub fn join(&self, rel: &str) -> PathBuf {
        self.path.join(rel)
    }

    /// Create and return a subdirectory.
    pub fn dir(&self, rel: &str) -> Result<PathBuf> {
        let p = self.join(rel);
        std::fs::create_dir_all(&p).with_context(|| format!("creating {}", p.display()))?;
        Ok(p)
    }
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
        if self.keep {
            eprintln!("GPUSLICE_E2E_KEEP: leaving {}", self.path.display());
            return;
        }
        detach_mounts_below(&self.path);
        let left = mounts_below(&self.path);
        if !left.is_empty() {
            eprintln!(
                "warning: not removing {}: mounts remain below it: {left:?}",
                self.path.display()
            );
            return;
        }
        let _ = std::fs::remove_dir_all(&self.path);
    }
}
