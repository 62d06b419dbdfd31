//! `/etc/ld.so.preload` for the container: the interposer first, then every entry the image's
//! own file already had. The image's file is read from the bundle's root filesystem without
//! following symbolic links (a hostile image must not make the runtime read a host file).

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Largest image `ld.so.preload` read.
pub const MAX_PRELOAD: u64 = 64 * 1024;

/// The image's entries, when it has the file.
#[derive(Debug, thiserror::Error)]
pub enum PreloadError {
    /// `etc` or `etc/ld.so.preload` in the root filesystem is a symbolic link.
    #[error("{0}: a symbolic link in the image; its preload entries are not read")]
    Symlink(String),
    /// Not a regular file, too large, or unreadable.
    #[error("{path}: {reason}")]
    Unreadable {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
}

/// Reads `<rootfs>/etc/ld.so.preload`; `Ok(None)` when the image has none.
pub fn read_image_preload(rootfs: &Path) -> Result<Option<String>, PreloadError> {
    let etc = rootfs.join("etc");
    match std::fs::symlink_metadata(&etc) {
        Err(_) => return Ok(None),
        Ok(m) if m.file_type().is_symlink() => {
            return Err(PreloadError::Symlink(etc.display().to_string()))
        }
        Ok(_) => {}
    }
    let path = etc.join("ld.so.preload");
    let shown = path.display().to_string();
    let unreadable = |reason: String| PreloadError::Unreadable {
        path: shown.clone(),
        reason,
    };
    let f = match File::options()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(&path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(PreloadError::Symlink(shown.clone()))
        }
        Err(e) => return Err(unreadable(e.to_string())),
    };
    let meta = f.metadata().map_err(|e| unreadable(e.to_string()))?;
    if !meta.is_file() {
        return Err(unreadable("not a regular file".into()));
    }
    if meta.len() > MAX_PRELOAD {
        return Err(unreadable(format!(
            "{} bytes, more than {MAX_PRELOAD}",
            meta.len()
        )));
    }
    let mut text = String::new();
    f.take(MAX_PRELOAD)
        .read_to_string(&mut text)
        .map_err(|e| unreadable(e.to_string()))?;
    Ok(Some(text))
}

/// The merged file: `ours` on the first line, then the image's entries (whitespace- or
/// colon-separated, as ld.so reads them; `#` comments dropped) without repeating `ours`.
pub fn merge(image: Option<&str>, ours: &str) -> String {
    let mut out = format!("{ours}\n");
    if let Some(text) = image {
        for line in text.lines() {
            let line = line.split('#').next().unwrap_or("");
            for entry in line.split(|c: char| c.is_whitespace() || c == ':') {
                if !entry.is_empty() && entry != ours {
                    out.push_str(entry);
                    out.push('\n');
                }
            }
        }
    }
    out
}

/// `LD_PRELOAD` with `ours` first, keeping an existing value.
pub fn merge_env(existing: Option<&str>, ours: &str) -> String {
    match existing {
        Some(e)
            if e.split(|c: char| c.is_whitespace() || c == ':')
                .any(|x| x == ours) =>
        {
            e.to_string()
        }
        Some(e) if !e.trim().is_empty() => format!("{ours}:{e}"),
        _ => ours.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OURS: &str = "/usr/lib/gpuslice/libgpuslice.so";

    #[test]
    fn merge_keeps_image_entries_after_ours() {
        assert_eq!(merge(None, OURS), format!("{OURS}\n"));
        let image = "/lib/libfoo.so /lib/libbar.so\n# comment\n/usr/lib/gpuslice/libgpuslice.so\n/lib/libbaz.so:/lib/q.so # tail\n";
        assert_eq!(
            merge(Some(image), OURS),
            format!("{OURS}\n/lib/libfoo.so\n/lib/libbar.so\n/lib/libbaz.so\n/lib/q.so\n")
        );
    }

    #[test]
    fn env_merge() {
        assert_eq!(merge_env(None, OURS), OURS);
        assert_eq!(merge_env(Some(""), OURS), OURS);
        assert_eq!(merge_env(Some("/a.so"), OURS), format!("{OURS}:/a.so"));
        let has = format!("/a.so {OURS}");
        assert_eq!(merge_env(Some(&has), OURS), has);
    }

    #[test]
    fn reads_image_file_and_refuses_symlinks() {
        let root = std::env::temp_dir().join(format!("gs-h9-preload-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        assert_eq!(read_image_preload(&root).unwrap(), None);
        std::fs::create_dir_all(root.join("etc")).unwrap();
        assert_eq!(read_image_preload(&root).unwrap(), None);
        std::fs::write(root.join("etc/ld.so.preload"), "/lib/x.so\n").unwrap();
        assert_eq!(
            read_image_preload(&root).unwrap().as_deref(),
            Some("/lib/x.so\n")
        );
        std::fs::remove_file(root.join("etc/ld.so.preload")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", root.join("etc/ld.so.preload")).unwrap();
        assert!(matches!(
            read_image_preload(&root),
            Err(PreloadError::Symlink(_))
        ));
        let _ = std::fs::remove_dir_all(&root);
    }
}
