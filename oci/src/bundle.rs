//! Reading and rewriting a bundle's `config.json`: in place and atomically (temporary file in
//! the same directory, `rename`), keeping the file's mode and owner. No `fsync`: a bundle lives
//! only as long as its container (engines keep bundles under `/run`, and recreate them after a
//! crash), so durability buys nothing, while an `fsync` on a disk costs milliseconds of every
//! container's start (`docs/benchmarks.md`, Container start). Readers see the old file or the
//! new one, never a mix (`rename`).

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The spec's file name in a bundle.
pub const CONFIG_JSON: &str = "config.json";

/// `<bundle>/config.json`.
pub fn config_path(bundle: &Path) -> PathBuf {
    bundle.join(CONFIG_JSON)
}

/// The root filesystem named by `root.path` (relative to the bundle unless absolute).
pub fn rootfs(bundle: &Path, root_path: &Path) -> PathBuf {
    if root_path.is_absolute() {
        root_path.to_path_buf()
    } else {
        bundle.join(root_path)
    }
}

/// Replaces `path` with `bytes` atomically, keeping mode and owner of the old file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let meta = fs::metadata(path)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.gpuslice-{}", std::process::id()));
    let result = (|| {
        let mut f = fs::File::options()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.set_permissions(fs::Permissions::from_mode(meta.mode() & 0o7777))?;
        if let Err(e) = std::os::unix::fs::fchown(&f, Some(meta.uid()), Some(meta.gid())) {
            // Only root may give a file away; an unprivileged caller keeps its own files.
            if e.raw_os_error() != Some(libc::EPERM) {
                return Err(e);
            }
        }
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}
