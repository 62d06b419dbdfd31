//! A file only its owner may read, replaced atomically.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Writes `<dir>/<name>` atomically, mode 0600: a synced `.<name>.tmp` renamed over it, so a
/// reader sees the old file or the new one, never a part.
pub fn write_private(dir: &Path, name: &str, body: &[u8]) -> io::Result<()> {
    let tmp = dir.join(format!(".{name}.tmp"));
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(body)?;
    f.sync_all()?;
    fs::rename(&tmp, dir.join(name))
}
