//! One kubelet plugin mode per node. The DRA mode publishes each GPU's memory as ResourceSlice
//! capacity, the device-plugin mode as units of an extended resource; the scheduler keeps the
//! two accounts apart, so with both running it would promise the same memory twice (a claim and
//! a Pod's units on the same bytes, the arbiter refusing whichever container comes second). Each
//! mode therefore holds an exclusive lock on `<state dir>/kubelet-plugin.lock` (the arbiter's
//! state directory, which both need for `arbiter.sock`) for as long as it runs; the second mode
//! to start is refused with a message naming the one that holds it. The lock is `flock(2)`: it
//! goes with the process, so a crashed plugin never blocks its successor.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// The lock file's name in the state directory.
pub const FILE: &str = "kubelet-plugin.lock";

/// The held lock; released on drop (or exit).
#[derive(Debug)]
pub struct ModeLock {
    _file: File,
    /// The lock file.
    pub path: PathBuf,
}

/// Why the lock was not taken.
#[derive(Debug, thiserror::Error)]
pub enum ModeLockError {
    /// Another plugin holds it (the message names it and says what to do).
    #[error("another gpuslice-kubelet-plugin runs on this node ({holder}, lock {}): the DRA and device-plugin modes would offer the same GPU memory to the scheduler twice, so only one mode may run per node — stop it, or run this node in one mode only", path.display())]
    Held {
        /// What the holder wrote (`--mode dra, pid 7`), or `mode unknown`.
        holder: String,
        /// The lock file.
        path: PathBuf,
    },
    /// The lock file could not be made, opened, locked or written.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// `creating`, `opening`, `locking`, `writing`.
        what: &'static str,
        /// The directory or file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// Takes the node's kubelet-plugin lock for `mode` (`dra`, `device-plugin`), writing
/// `mode pid` into it; an error naming the holder when another plugin runs.
pub fn acquire(state_dir: &Path, mode: &str) -> Result<ModeLock, ModeLockError> {
    let path = state_dir.join(FILE);
    let io = |what, path: &Path| {
        let path = path.to_path_buf();
        move |source| ModeLockError::Io { what, path, source }
    };
    std::fs::create_dir_all(state_dir).map_err(io("creating", state_dir))?;
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(io("opening", &path))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = holder.trim();
            return Err(ModeLockError::Held {
                holder: if holder.is_empty() {
                    "mode unknown"
                } else {
                    holder
                }
                .to_string(),
                path,
            });
        }
        Err(TryLockError::Error(e)) => return Err(io("locking", &path)(e)),
    }
    let record = format!("--mode {mode}, pid {}\n", std::process::id());
    file.set_len(0)
        .and_then(|()| file.seek(SeekFrom::Start(0)).map(|_| ()))
        .and_then(|()| file.write_all(record.as_bytes()))
        .map_err(io("writing", &path))?;
    Ok(ModeLock { _file: file, path })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_second_mode_is_refused_naming_the_first_and_may_start_once_it_is_gone() {
        let dir = std::env::temp_dir().join(format!("gs-modelock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let dra = acquire(&dir, "dra").unwrap();
        let e = acquire(&dir, "device-plugin").unwrap_err();
        assert!(matches!(e, ModeLockError::Held { .. }), "{e:?}");
        let e = e.to_string();
        assert!(
            e.contains("--mode dra, pid") && e.contains("same GPU memory") && e.contains(FILE),
            "{e}"
        );
        drop(dra);
        let dp = acquire(&dir, "device-plugin").unwrap();
        drop(dp);
        // A state directory that cannot be made: the error names it.
        let file = dir.join("not-a-dir");
        std::fs::write(&file, b"").unwrap();
        let e = acquire(&file.join("state"), "dra").unwrap_err();
        assert!(
            matches!(
                e,
                ModeLockError::Io {
                    what: "creating",
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("not-a-dir/state"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
