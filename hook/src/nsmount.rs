//! Mounting the slice into a container that is being created, from outside the runtime:
//! `gpuslice-hook mount-slice` (hidden) enters the container's mount namespace
//! (`setns` on `/proc/<pid>/ns/mnt`) and binds the host's slice directory at
//! `<rootfs>/run/gpuslice` read-only, with its `usage` file bound read-write on top — the
//! same layout `gpuslice-runtime` puts in `config.json`.
//!
//! It runs as a child process of the hook because `setns(CLONE_NEWNS)` needs a
//! single-threaded caller, and the hook has threads (bounded stdin reads). At createRuntime /
//! prestart, runc has mounted the rootfs (bind-mounted on itself at its host path) and
//! `/run`'s tmpfs inside the new namespace but not yet pivoted into it, so the host's
//! slice directory is still reachable by its host path from inside that namespace.

use std::ffi::CString;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use gpuslice_region::layout::{CONTAINER_SLICE_DIR, USAGE_FILE};

fn cstr(p: &Path) -> Result<CString> {
    CString::new(p.as_os_str().as_encoded_bytes())
        .map_err(|_| anyhow!("{} contains a NUL byte", p.display()))
}

fn mount(src: &Path, dst: &Path, flags: libc::c_ulong) -> Result<()> {
    let (s, d) = (cstr(src)?, cstr(dst)?);
    // SAFETY: valid NUL-terminated strings; null fstype/data are allowed for bind/remount.
    let rc = unsafe {
        libc::mount(
            s.as_ptr(),
            d.as_ptr(),
            std::ptr::null(),
            flags,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        bail!(
            "mount {} on {} (flags {flags:#x}): {}",
            src.display(),
            dst.display(),
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

/// The target inside `rootfs`, refusing symbolic links on the way (a hostile image must not
/// redirect the mount onto a host path).
fn target(rootfs: &Path) -> Result<PathBuf> {
    let mut p = rootfs.to_path_buf();
    // The slice directory's components below the root (`run`, `gpuslice`).
    for part in CONTAINER_SLICE_DIR.split('/').filter(|p| !p.is_empty()) {
        p.push(part);
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                bail!(
                    "{} is a symbolic link in the image; refusing to mount the slice there",
                    p.display()
                )
            }
            Ok(m) if m.is_dir() => {}
            Ok(_) => bail!("{} exists and is not a directory", p.display()),
            Err(_) => std::fs::create_dir(&p).with_context(|| format!("mkdir {}", p.display()))?,
        }
    }
    Ok(p)
}

/// Body of `mount-slice`: must be called while single-threaded (from `main`, first thing).
pub fn mount_slice(pid: u32, rootfs: &Path, slice_dir: &Path) -> Result<()> {
    let ns = std::fs::File::open(format!("/proc/{pid}/ns/mnt"))
        .with_context(|| format!("open /proc/{pid}/ns/mnt"))?;
    // SAFETY: a valid namespace fd; the process is single-threaded (checked by the kernel).
    if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNS) } != 0 {
        bail!(
            "setns into the mount namespace of pid {pid}: {}",
            std::io::Error::last_os_error()
        );
    }
    if !slice_dir.join(USAGE_FILE).is_file() {
        bail!(
            "the slice directory {} is not visible inside the container's mount namespace",
            slice_dir.display()
        );
    }
    let dst = target(rootfs)?;
    mount(slice_dir, &dst, libc::MS_BIND)?;
    mount(
        Path::new("none"),
        &dst,
        libc::MS_BIND
            | libc::MS_REMOUNT
            | libc::MS_RDONLY
            | libc::MS_NOSUID
            | libc::MS_NODEV
            | libc::MS_NOEXEC,
    )?;
    let usage = dst.join(USAGE_FILE);
    mount(&slice_dir.join(USAGE_FILE), &usage, libc::MS_BIND)?;
    mount(
        Path::new("none"),
        &usage,
        libc::MS_BIND | libc::MS_REMOUNT | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
    )?;
    Ok(())
}

/// Runs `mount-slice` in a child process, bounded by `timeout`.
pub fn mount_slice_in_child(
    pid: u32,
    rootfs: &Path,
    slice_dir: &Path,
    timeout: Duration,
) -> Result<()> {
    let exe = std::env::current_exe().context("finding gpuslice-hook's own executable")?;
    let mut child = Command::new(exe)
        .arg("mount-slice")
        .arg("--pid")
        .arg(pid.to_string())
        .arg("--rootfs")
        .arg(rootfs)
        .arg("--slice-dir")
        .arg(slice_dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context("starting gpuslice-hook mount-slice")?;
    let start = Instant::now();
    loop {
        if let Some(st) = child.try_wait().context("waiting for mount-slice")? {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                use std::io::Read;
                let _ = e.read_to_string(&mut err);
            }
            if st.success() {
                return Ok(());
            }
            let msg = err.trim().trim_start_matches("gpuslice-hook: ");
            bail!(
                "{}",
                if msg.is_empty() {
                    format!("mount-slice exited with {st}")
                } else {
                    msg.to_string()
                }
            );
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            bail!("mount-slice did not finish within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
