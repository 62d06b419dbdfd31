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

/// Takes the node's kubelet-plugin lock for `mode` (`dra`, `device-plugin`), writing
/// `mode pid` into it; an error naming the holder when another plugin runs.
pub fn acquire(state_dir: &Path, mode: &str) -> Result<ModeLock, String> {
    let path = state_dir.join(FILE);
    std::fs::create_dir_all(state_dir)
        .map_err(|e| format!("creating {}: {e}", state_dir.display()))?;
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| format!("opening {}: {e}", path.display()))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = holder.trim();
            return Err(format!(
                "another gpuslice-kubelet-plugin runs on this node ({}, lock {}): the DRA and device-plugin modes would offer the same GPU memory to the scheduler twice, so only one mode may run per node — stop it, or run this node in one mode only",
                if holder.is_empty() { "mode unknown" } else { holder },
                path.display()
            ));
        }
        Err(TryLockError::Error(e)) => return Err(format!("locking {}: {e}", path.display())),
    }
    let record = format!("--mode {mode}, pid {}\n", std::process::id());
    file.set_len(0)
        .and_then(|()| file.seek(SeekFrom::Start(0)).map(|_| ()))
        .and_then(|()| file.write_all(record.as_bytes()))
        .map_err(|e| format!("writing {}: {e}", path.display()))?;
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
        assert!(
            e.contains("--mode dra, pid") && e.contains("same GPU memory") && e.contains(FILE),
            "{e}"
        );
        drop(dra);
        let dp = acquire(&dir, "device-plugin").unwrap();
        drop(dp);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
