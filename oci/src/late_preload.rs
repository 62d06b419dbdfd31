//! The shim path's second look at the image's `/etc/ld.so.preload`. At `Task.Create` the
//! container's root filesystem is not mounted yet (containerd-shim-runc-v2 mounts
//! `CreateTaskRequest.rootfs` at `<bundle>/rootfs` itself), so [`crate::prepare_bundle`] finds no
//! image file and writes the slice's merged preload with the interposer alone. Once runc-v2's
//! `Create` has returned, the root filesystem is mounted (until `Delete`) and the container's
//! init waits for `Start`: no process of the container has been executed yet. Then the image's
//! entries are read (through the mounted filesystem, so every snapshotter and overlay whiteout
//! is resolved by the kernel) and merged into the slice's preload file **in place** — the
//! container's bind mount of that file pins its inode, so a rename would not be seen.
//!
//! Only `createContainer` hooks (run during `Create`) miss the image's entries; every process
//! of the container (started at `Start`, or later by `Exec`) sees the merged file.

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::bundle::{config_path, rootfs};
use crate::edit::{CONTAINER_INTERPOSER, CONTAINER_PRELOAD, PRELOAD_FILE};
use crate::preload::{merge, read_image_preload, PreloadError, MAX_PRELOAD};
use crate::spec::{SpecDoc, SpecError};

/// Why the image's entries could not be merged (the container still starts, with the
/// interposer alone preloaded; the caller logs this as a warning).
#[derive(Debug, thiserror::Error)]
pub enum LatePreloadError {
    /// `config.json` or the slice's preload file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// `config.json` is not a usable spec.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// The image's file is a symbolic link, not a regular file, or unreadable.
    #[error(transparent)]
    Image(#[from] PreloadError),
    /// The spec binds no gpuslice preload file below the state directory.
    #[error("{0}: no gpuslice ld.so.preload below {1} is mounted at {CONTAINER_PRELOAD}")]
    NotOurs(String, String),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> LatePreloadError + '_ {
    move |source| LatePreloadError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Merges the image's own preload entries (read from the bundle's now-mounted root filesystem)
/// into the slice's merged file — the source of the spec's mount at `/etc/ld.so.preload`, which
/// must be a gpuslice `ld.so.preload` below `state_dir` — rewriting it in place when its content
/// changes. Returns the number of image entries the file now carries.
pub fn merge_after_create(bundle: &Path, state_dir: &Path) -> Result<usize, LatePreloadError> {
    let cfg = config_path(bundle);
    let doc = SpecDoc::parse(&std::fs::read(&cfg).map_err(io(&cfg))?)?;
    let preload = doc
        .mount_source(CONTAINER_PRELOAD)
        .filter(|p| {
            let under = |dir: &Path| {
                let state = std::fs::canonicalize(state_dir).ok();
                let dir = std::fs::canonicalize(dir).ok();
                state.zip(dir).is_some_and(|(s, d)| d.starts_with(s))
            };
            p.is_absolute()
                && p.file_name().is_some_and(|n| n == PRELOAD_FILE)
                && p.parent().is_some_and(under)
        })
        .ok_or_else(|| {
            LatePreloadError::NotOurs(cfg.display().to_string(), state_dir.display().to_string())
        })?;
    let Some(root) = doc.root_path() else {
        return Ok(0);
    };
    let image = read_image_preload(&rootfs(bundle, &root))?;
    let merged = merge(image.as_deref(), CONTAINER_INTERPOSER);
    let entries = merged.lines().count().saturating_sub(1);
    rewrite_in_place(&preload, &merged)?;
    Ok(entries)
}

/// Replaces the content of the existing regular file `path` with `text`, keeping its inode
/// (no symbolic link followed, nothing created). Unchanged content is not written.
pub fn rewrite_in_place(path: &Path, text: &str) -> Result<(), LatePreloadError> {
    let mut f = File::options()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(io(path))?;
    let meta = f.metadata().map_err(io(path))?;
    if !meta.is_file() {
        return Err(io(path)(std::io::Error::other("not a regular file")));
    }
    let mut old = String::new();
    let _ = (&mut f).take(MAX_PRELOAD).read_to_string(&mut old);
    if old == text {
        return Ok(());
    }
    use std::io::{Seek, SeekFrom};
    f.seek(SeekFrom::Start(0)).map_err(io(path))?;
    f.write_all(text.as_bytes()).map_err(io(path))?;
    f.set_len(text.len() as u64).map_err(io(path))?;
    f.sync_all().map_err(io(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuslice_test_support::Scratch;
    use std::os::unix::fs::MetadataExt;

    /// A bundle whose spec binds `<dir>/state/s1/ld.so.preload` (returned) at /etc/ld.so.preload.
    fn bundle_with(dir: &Path, image_preload: Option<&str>) -> std::path::PathBuf {
        let bundle = dir.join("bundle");
        std::fs::create_dir_all(bundle.join("rootfs/etc")).unwrap();
        std::fs::create_dir_all(dir.join("state/s1")).unwrap();
        let spec = serde_json::json!({
            "ociVersion": "1.0.2",
            "root": {"path": "rootfs"},
            "mounts": [
                {"destination": "/etc/ld.so.preload", "source": "/etc/hostname", "type": "bind"},
                {"destination": "/etc/ld.so.preload",
                 "source": dir.join("state/s1/ld.so.preload"), "type": "bind"}
            ]
        });
        std::fs::write(bundle.join("config.json"), spec.to_string()).unwrap();
        if let Some(t) = image_preload {
            std::fs::write(bundle.join("rootfs/etc/ld.so.preload"), t).unwrap();
        }
        bundle
    }

    #[test]
    fn image_entries_merged_into_the_same_inode() {
        let d = Scratch::new("merge");
        let bundle = bundle_with(&d, Some("/lib/own.so\n# c\n/lib/two.so /lib/own.so\n"));
        let preload = d.join("state/s1/ld.so.preload");
        std::fs::write(&preload, format!("{CONTAINER_INTERPOSER}\n")).unwrap();
        let ino = std::fs::metadata(&preload).unwrap().ino();
        assert_eq!(merge_after_create(&bundle, &d.join("state")).unwrap(), 3);
        assert_eq!(
            std::fs::read_to_string(&preload).unwrap(),
            format!("{CONTAINER_INTERPOSER}\n/lib/own.so\n/lib/two.so\n/lib/own.so\n")
        );
        assert_eq!(std::fs::metadata(&preload).unwrap().ino(), ino);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn no_image_file_keeps_ours_only_and_shrinks_a_longer_file() {
        let d = Scratch::new("none");
        let bundle = bundle_with(&d, None);
        let preload = d.join("state/s1/ld.so.preload");
        std::fs::write(
            &preload,
            format!("{CONTAINER_INTERPOSER}\n/stale/entry.so\n"),
        )
        .unwrap();
        assert_eq!(merge_after_create(&bundle, &d.join("state")).unwrap(), 0);
        assert_eq!(
            std::fs::read_to_string(&preload).unwrap(),
            format!("{CONTAINER_INTERPOSER}\n")
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn symlinked_image_file_refused_and_ours_untouched() {
        let d = Scratch::new("link");
        let bundle = bundle_with(&d, None);
        std::os::unix::fs::symlink("/etc/hostname", bundle.join("rootfs/etc/ld.so.preload"))
            .unwrap();
        let preload = d.join("state/s1/ld.so.preload");
        std::fs::write(&preload, format!("{CONTAINER_INTERPOSER}\n")).unwrap();
        let e = merge_after_create(&bundle, &d.join("state")).unwrap_err();
        assert!(
            matches!(e, LatePreloadError::Image(PreloadError::Symlink(_))),
            "{e}"
        );
        assert_eq!(
            std::fs::read_to_string(&preload).unwrap(),
            format!("{CONTAINER_INTERPOSER}\n")
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn missing_preload_config_or_foreign_mount_named() {
        let d = Scratch::new("missing");
        let bundle = bundle_with(&d, Some("/lib/own.so\n"));
        let state = d.join("state");
        let gone = state.join("s1/ld.so.preload");
        let e = merge_after_create(&bundle, &state).unwrap_err();
        assert!(e.to_string().contains(&gone.display().to_string()), "{e}");
        assert!(!gone.exists(), "created the missing file");
        let e = merge_after_create(&d.join("no-bundle"), &state).unwrap_err();
        assert!(e.to_string().contains("config.json"), "{e}");
        // The preload mount's source outside the state directory is not ours: never written.
        let e = merge_after_create(&bundle, &d.join("other-state")).unwrap_err();
        assert!(matches!(e, LatePreloadError::NotOurs(..)), "{e}");
        let link = d.join("link");
        std::os::unix::fs::symlink(bundle.join("config.json"), &link).unwrap();
        assert!(rewrite_in_place(&link, "x").is_err(), "followed a symlink");
        let _ = std::fs::remove_dir_all(&d);
    }
}
