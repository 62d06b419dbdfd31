//! Whether the interposer can be preloaded in a container's image, decided before anything runs
//! in it. What the loader does otherwise depends on the failure: a preload it cannot open or
//! map (a missing file, another architecture) is skipped with a warning and the program runs
//! **without** the interposer, uncapped; a glibc older than the interposer's needs stops every
//! program of the container with "version `GLIBC_2.34' not found" (measured in a Debian 11
//! image: `tests/reliability/tests/old_glibc.rs`); a musl or static program ignores it. So every
//! library the interposer needs versions from (`libc.so.6`, `libgcc_s.so.1`,
//! the loader…) is looked up in the image's system library directories and its version
//! definitions read; a missing library, a missing version or another architecture refuses the
//! container, with a message naming the image's glibc and the floor.
//!
//! The image's files are reached without leaving its root: every symbolic link is resolved
//! inside the root filesystem (`..` stops at the root, absolute targets start from it;
//! `gpuslice_cdi::driver_root::resolve_in_root`), so a hostile image cannot make the runtime
//! read a host file.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use gpuslice_cdi::driver_root::resolve_in_root;

use crate::elf_versions::{version_defs, version_needs, GlibcVersion, VersionDefs, FLOOR};

/// Where glibc-based distributions keep the libraries the loader finds without configuration
/// (Debian/Ubuntu multiarch, RHEL/SUSE lib64, Arch/merged layouts).
pub const LIB_DIRS: [&str; 6] = [
    "lib/x86_64-linux-gnu",
    "usr/lib/x86_64-linux-gnu",
    "lib64",
    "usr/lib64",
    "lib",
    "usr/lib",
];

/// Largest library file read.
const MAX_LIB: u64 = 64 << 20;

/// What was found: the image's glibc release, or nothing to check yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every needed version is defined; the image's glibc release.
    Loads(Option<GlibcVersion>),
    /// The root filesystem is empty (not mounted yet): nothing can be decided now.
    NotMounted,
}

/// Why the interposer cannot be preloaded in the image. Messages name the image's file, its
/// glibc and what the interposer needs.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The interposer itself cannot be read or parsed.
    #[error("interposer {path}: {reason}")]
    Interposer {
        /// The host file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// No glibc: a static, musl (Alpine) or distroless-static image.
    #[error(
        "the image has no glibc (no libc.so.6 under /{}): a static, musl or distroless-static \
         image cannot preload the interposer, which needs glibc {FLOOR} or newer",
        LIB_DIRS.join(", /")
    )]
    NoGlibc,
    /// A library the interposer needs is not in the image.
    #[error(
        "the image lacks {lib} (searched /{}), which the interposer needs (image glibc: symbol \
         versions up to GLIBC_{glibc})",
        LIB_DIRS.join(", /")
    )]
    MissingLibrary {
        /// The soname.
        lib: String,
        /// The image's glibc release, as read from its `libc.so.6`.
        glibc: String,
    },
    /// A library of the image is for another architecture.
    #[error("{path} in the image is for ELF machine {found}, the interposer for {ours}")]
    Architecture {
        /// The file, inside the image.
        path: String,
        /// Its `e_machine`.
        found: u16,
        /// The interposer's.
        ours: u16,
    },
    /// A library lacks versions the interposer needs: the image's glibc is too old.
    #[error(
        "the image's glibc ({path}, symbol versions up to GLIBC_{glibc}) lacks {missing} that \
         the interposer needs (gpuslice's floor is glibc {FLOOR})"
    )]
    TooOld {
        /// The library, inside the image.
        path: String,
        /// The newest `GLIBC_x.y` its `libc.so.6` defines (a release without new symbols,
        /// such as 2.31, shows as the one before).
        glibc: String,
        /// The versions it lacks, with a symbol needing each: `GLIBC_2.34 (dlopen)`.
        missing: String,
    },
    /// A library of the image cannot be read or parsed.
    #[error("{path} in the image: {reason}")]
    Unreadable {
        /// The file, inside the image.
        path: String,
        /// Why.
        reason: String,
    },
}

/// Decides whether `interposer` (a host file) can be preloaded in the root filesystem `rootfs`.
pub fn check(rootfs: &Path, interposer: &Path) -> Result<Verdict, LoadError> {
    let empty = std::fs::read_dir(rootfs).map_or(true, |mut d| d.next().is_none());
    if empty {
        return Ok(Verdict::NotMounted);
    }
    let ours = read_limited(File::open(interposer), interposer).map_err(|reason| {
        LoadError::Interposer {
            path: interposer.to_path_buf(),
            reason,
        }
    })?;
    let interposer_err = |e: crate::elf_versions::ElfError| LoadError::Interposer {
        path: interposer.to_path_buf(),
        reason: e.to_string(),
    };
    let our_machine = version_defs(&ours).map_err(interposer_err)?.machine;
    let needs = version_needs(&ours).map_err(interposer_err)?;
    let (libc_path, libc) = find(rootfs, "libc.so.6", our_machine)?.ok_or(LoadError::NoGlibc)?;
    let glibc = libc.newest_glibc();
    let shown = glibc.map_or_else(|| "?".to_string(), |g| g.to_string());
    let mut files: Vec<&str> = needs.iter().map(|n| n.file.as_str()).collect();
    files.dedup();
    for file in files {
        let (path, defs) = if file == "libc.so.6" {
            (libc_path.clone(), libc.clone())
        } else {
            find(rootfs, file, our_machine)?.ok_or_else(|| LoadError::MissingLibrary {
                lib: file.to_string(),
                glibc: shown.clone(),
            })?
        };
        let missing: Vec<String> = needs
            .iter()
            .filter(|n| n.file == file && !defs.versions.contains(&n.version))
            .map(|n| match n.symbols.first() {
                Some(s) => format!("{} ({s})", n.version),
                None => n.version.clone(),
            })
            .collect();
        if !missing.is_empty() {
            return Err(LoadError::TooOld {
                path,
                glibc: shown,
                missing: missing.join(", "),
            });
        }
    }
    Ok(Verdict::Loads(glibc))
}

/// The first `soname` in [`LIB_DIRS`]: its path inside the image and what it defines.
fn find(
    rootfs: &Path,
    soname: &str,
    machine: u16,
) -> Result<Option<(String, VersionDefs)>, LoadError> {
    for dir in LIB_DIRS {
        let inside = format!("/{dir}/{soname}");
        // Symbolic links resolved inside the image, as `gpuslice cdi generate` does on a driver
        // root; `None` unless a regular file is found.
        let Some(host) = resolve_in_root(rootfs, &inside) else {
            continue;
        };
        let file = File::options()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(&host);
        let unreadable = |reason: String| LoadError::Unreadable {
            path: inside.clone(),
            reason,
        };
        let bytes = match file {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            f => read_limited(f, &host).map_err(unreadable)?,
        };
        let defs = version_defs(&bytes).map_err(|e| unreadable(e.to_string()))?;
        if defs.machine != machine {
            return Err(LoadError::Architecture {
                path: inside,
                found: defs.machine,
                ours: machine,
            });
        }
        return Ok(Some((inside, defs)));
    }
    Ok(None)
}

/// Reads a regular file of at most [`MAX_LIB`] bytes.
fn read_limited(file: std::io::Result<File>, path: &Path) -> Result<Vec<u8>, String> {
    let f = file.map_err(|e| e.to_string())?;
    let meta = f.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err(format!("{}: not a regular file", path.display()));
    }
    if meta.len() > MAX_LIB {
        return Err(format!("{} bytes, more than {MAX_LIB}", meta.len()));
    }
    let mut bytes = Vec::new();
    f.take(MAX_LIB)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    Ok(bytes)
}
