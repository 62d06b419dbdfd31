//! The private mount namespace `gpuslice run` gives its command, as a container runtime gives a
//! container: the slice directory bound read-only over the state directory, with `usage` bound
//! read-write on top. The command and everything it starts see only their own slice there,
//! never the arbiter's socket nor other slices, and cannot change their limits or lease; the
//! state directory itself is 0700 root, so other local users reach nothing at all.
//!
//! It needs `CAP_SYS_ADMIN`, which a `gpuslice run` that could talk to the arbiter has unless the
//! arbiter runs as the caller's own non-root user: there the state directory is that user's
//! (0700), other users still reach nothing, and the command gets the slice's real path.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use gpuslice_region::layout::USAGE_FILE;

/// Bit of `CAP_SYS_ADMIN` in the capability sets (linux/capability.h).
const CAP_SYS_ADMIN: u32 = 21;

/// The paths of the mounts, prepared before fork (no allocation happens in the child).
#[derive(Debug)]
pub struct SliceMounts {
    /// `/`, for the propagation change.
    root: CString,
    state_dir: CString,
    slice_dir: CString,
    /// The slice's `usage`, when it has one.
    usage: Option<CString>,
}

fn c_path(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

/// Whether this process may make a mount namespace (`CAP_SYS_ADMIN` in its effective set).
pub fn can_mount() -> bool {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_SYS_ADMIN) != 0)
}

impl SliceMounts {
    /// The mounts that show `slice_dir` at `state_dir`.
    pub fn new(state_dir: &Path, slice_dir: &Path) -> io::Result<SliceMounts> {
        let state_dir = state_dir.canonicalize()?;
        let slice_dir = slice_dir.canonicalize()?;
        let usage = slice_dir.join(USAGE_FILE);
        let usage = match usage.exists() {
            true => Some(c_path(&usage)?),
            false => None,
        };
        Ok(SliceMounts {
            root: c_path(Path::new("/"))?,
            state_dir: c_path(&state_dir)?,
            slice_dir: c_path(&slice_dir)?,
            usage,
        })
    }

    /// Where the command finds its slice.
    pub fn visible_dir(&self) -> &std::ffi::CStr {
        &self.state_dir
    }

    /// In the forked child, before exec: a new mount namespace with the slice's mounts. Only
    /// async-signal-safe system calls on the prepared paths.
    pub fn enter(&self) -> io::Result<()> {
        // SAFETY: unshare takes flags only.
        check(unsafe { libc::unshare(libc::CLONE_NEWNS) })?;
        // Our mounts must not propagate to the host; the host's still reach us.
        mount_null(&self.root, libc::MS_REC | libc::MS_SLAVE)?;
        // The slice, read-only with `usage` read-write, is assembled on itself first (the
        // source paths are hidden once the state directory is covered), then bound whole,
        // with its `usage` submount, over the state directory.
        mount(&self.slice_dir, &self.slice_dir, libc::MS_BIND)?;
        if let Some(usage) = &self.usage {
            mount(usage, usage, libc::MS_BIND)?;
        }
        mount_null(
            &self.slice_dir,
            libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY,
        )?;
        mount(
            &self.slice_dir,
            &self.state_dir,
            libc::MS_BIND | libc::MS_REC,
        )
    }
}

fn mount(src: &CString, dst: &CString, flags: libc::c_ulong) -> io::Result<()> {
    // SAFETY: `src` and `dst` are NUL-terminated paths alive for the call; fstype and data are
    // null, which bind mounts allow.
    check(unsafe {
        libc::mount(
            src.as_ptr(),
            dst.as_ptr(),
            std::ptr::null(),
            flags,
            std::ptr::null(),
        )
    })
}

/// A mount operation on `dst` alone (a remount, a propagation change).
fn mount_null(dst: &CString, flags: libc::c_ulong) -> io::Result<()> {
    // SAFETY: as in `mount`; remounts and propagation changes take no source.
    check(unsafe {
        libc::mount(
            std::ptr::null(),
            dst.as_ptr(),
            std::ptr::null(),
            flags,
            std::ptr::null(),
        )
    })
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
