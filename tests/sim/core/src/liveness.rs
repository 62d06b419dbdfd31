//! Which process slots belong to running processes, judged the same way from every pid namespace.
//!
//! A slot's owner holds an open-file-description (OFD) write lock on one byte of the state file,
//! at [`LOCK_BASE`]` + slot`, taken through a description of its own. The kernel drops the lock
//! when the last descriptor of that description closes: at exit, `SIGKILL` included, before the
//! process is reaped, which is when the real driver releases a process's memory (its device file
//! descriptors close). A lock is the same lock from every pid namespace that maps the same file,
//! so a reader in one container, or on the host, never judges a live process in another container
//! dead because a pid means something else in its own `/proc`.
//!
//! Judging is kernel-arbitrated: whoever takes a slot's byte lock (a claimant or a reaper) is the
//! only one touching that slot's identity until it lets go, so no table lock is needed.
//!
//! The owner also holds a second byte, at [`OWNER_BASE`]` + slot`, that nobody else ever takes.
//! A reaper holds the first byte while it releases a dead owner's holdings, and may be
//! descheduled there for milliseconds; the second byte still says the owner is gone, so what
//! the simulated driver reports (memory in use, processes) leaves a dead owner out from the
//! moment its descriptors close, as the real driver does, not from when a reaper gets to it. The
//! description is `O_CLOEXEC` (an exec'd program has no slot) and a forked child opens its own on
//! first use and closes the inherited one, so a parent's slot stays alive while any descendant
//! that never used the simulator still holds the parent's descriptor, as device files do.
//!
//! A slot also records the owner's pid namespace (the inode of `/proc/self/ns/pid`), so a reader
//! can name the owner by the pid it has in the reader's own namespace ([`pid_in_my_namespace`]),
//! as NVML does for the real driver.

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Mutex;

/// Byte offset of slot 0's lock byte: far past the end of the file (locks may lie beyond EOF),
/// so it never overlaps anything else that locks the file.
pub const LOCK_BASE: i64 = 1 << 40;

/// Byte offset of slot 0's owner byte: held by the slot's owner for its whole life and taken by
/// nobody else, so it is free exactly when the owner's descriptors have closed.
pub const OWNER_BASE: i64 = 1 << 41;

/// A `struct flock` naming the byte at `off`. `l_pid` stays 0, as OFD commands require.
fn lock_op(ty: libc::c_int, off: i64) -> libc::flock {
    // SAFETY: `flock` is plain data; all-zero is a valid value for every field.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = ty as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = off;
    fl.l_len = 1;
    fl
}

fn fcntl_lock(fd: libc::c_int, cmd: libc::c_int, fl: &mut libc::flock) -> std::io::Result<()> {
    loop {
        // SAFETY: `fl` is a valid, exclusively borrowed `struct flock` for the duration of the
        // call; a bad descriptor only makes the call fail.
        let r = unsafe { libc::fcntl(fd, cmd, fl as *mut libc::flock) };
        if r == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// One description of the state file, used only for slot locks.
#[derive(Debug)]
pub struct LockFile {
    file: File,
}

impl LockFile {
    /// Opens a new description of `path` (close-on-exec).
    pub fn open(path: &Path) -> std::io::Result<LockFile> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)?;
        Ok(LockFile { file })
    }

    fn fd(&self) -> libc::c_int {
        self.file.as_raw_fd()
    }

    /// Takes the write lock on `slot`'s byte without waiting. `Ok(false)`: another description
    /// holds it (the owner is alive, or someone else is claiming or reaping the slot).
    pub fn try_lock(&self, slot: usize) -> std::io::Result<bool> {
        self.try_lock_at(LOCK_BASE + slot as i64)
    }

    /// Takes `slot`'s owner byte (the claimant that now owns the slot; held until exit).
    /// `Ok(false)`: another description holds it (another copy of the simulator in this
    /// process owns the slot already).
    pub fn hold_owner(&self, slot: usize) -> std::io::Result<bool> {
        self.try_lock_at(OWNER_BASE + slot as i64)
    }

    /// Whether another description holds `slot`'s owner byte: the owner's descriptors are
    /// still open. An error reads as held.
    pub fn owner_held_by_other(&self, slot: usize) -> bool {
        self.held_by_other_at(OWNER_BASE + slot as i64)
    }

    fn try_lock_at(&self, off: i64) -> std::io::Result<bool> {
        let mut fl = lock_op(libc::F_WRLCK, off);
        match fcntl_lock(self.fd(), libc::F_OFD_SETLK, &mut fl) {
            Ok(()) => Ok(true),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EACCES)) => {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Drops this description's lock on `slot`'s byte.
    pub fn unlock(&self, slot: usize) {
        let mut fl = lock_op(libc::F_UNLCK, LOCK_BASE + slot as i64);
        let _ = fcntl_lock(self.fd(), libc::F_OFD_SETLK, &mut fl);
    }

    /// Whether another description holds `slot`'s byte (this description's own locks never
    /// count). An error reads as held: a slot is never reaped on a failed check.
    pub fn held_by_other(&self, slot: usize) -> bool {
        self.held_by_other_at(LOCK_BASE + slot as i64)
    }

    fn held_by_other_at(&self, off: i64) -> bool {
        let mut fl = lock_op(libc::F_WRLCK, off);
        match fcntl_lock(self.fd(), libc::F_OFD_GETLK, &mut fl) {
            Ok(()) => i32::from(fl.l_type) != libc::F_UNLCK,
            Err(_) => true,
        }
    }
}

/// Inode of the calling process's pid namespace (0 if `/proc` cannot tell).
pub fn my_pid_namespace() -> u64 {
    pid_namespace_of(Path::new("/proc/self"))
}

fn pid_namespace_of(proc_dir: &Path) -> u64 {
    std::fs::metadata(proc_dir.join("ns/pid"))
        .map(|m| m.ino())
        .unwrap_or(0)
}

/// The innermost pid of a `/proc/<pid>/status` text's `NSpid:` line.
fn innermost_nspid(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))?
        .split_ascii_whitespace()
        .last()?
        .parse()
        .ok()
}

/// The identity a slot records for its owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Owner {
    /// Pid in the owner's own namespace.
    pub pid: u32,
    /// Start time (clock ticks since boot).
    pub start: u64,
    /// Inode of the owner's pid namespace.
    pub pid_ns: u64,
}

/// Owners resolved by this process (keyed by the pid that resolved them: a forked child starts
/// afresh), with the pid each has here or `None` when it is not visible.
type Resolved = Option<(u32, HashMap<Owner, Option<u32>>)>;

static RESOLVED: Mutex<Resolved> = Mutex::new(None);

/// The pid `owner` has in the calling process's pid namespace, or `None` when it is not visible
/// there (a process of a sibling container). Answers are cached per process.
pub fn pid_in_my_namespace(owner: Owner) -> Option<u32> {
    let (me, _) = crate::procs::self_identity();
    let mut cache = RESOLVED.lock().unwrap_or_else(|p| p.into_inner());
    let map = match &mut *cache {
        Some((pid, map)) if *pid == me => map,
        other => {
            *other = Some((me, HashMap::new()));
            &mut other.as_mut().expect("just set").1
        }
    };
    if let Some(hit) = map.get(&owner) {
        return *hit;
    }
    let found = resolve(owner);
    if map.len() > 4096 {
        map.clear();
    }
    map.insert(owner, found);
    found
}

fn resolve(owner: Owner) -> Option<u32> {
    let mine = my_pid_namespace();
    if owner.pid_ns == mine || owner.pid_ns == 0 || mine == 0 {
        return Some(owner.pid);
    }
    // Another namespace: find the process of that namespace whose innermost pid and start
    // time match (visible only from the namespace it lives in or an ancestor of it).
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let dir = entry.path();
        if pid_namespace_of(&dir) != owner.pid_ns {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(dir.join("status")) else {
            continue;
        };
        if innermost_nspid(&status) != Some(owner.pid) {
            continue;
        }
        if crate::procs::stat_of(pid).is_some_and(|(start, _)| start == owner.start) {
            return Some(pid);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nspid_takes_the_innermost() {
        assert_eq!(innermost_nspid("Name:\tx\nNSpid:\t4821\t7\t1\n"), Some(1));
        assert_eq!(innermost_nspid("NSpid:\t42\n"), Some(42));
        assert_eq!(innermost_nspid("Name:\tx\n"), None);
    }

    #[test]
    fn own_namespace_resolves_to_the_same_pid() {
        let (pid, start) = crate::procs::self_identity();
        let owner = Owner {
            pid,
            start,
            pid_ns: my_pid_namespace(),
        };
        assert_eq!(pid_in_my_namespace(owner), Some(pid));
    }

    #[test]
    fn a_namespace_nobody_has_is_not_visible() {
        let owner = Owner {
            pid: 1,
            start: 1,
            pid_ns: u64::MAX - 7,
        };
        assert_eq!(resolve(owner), None);
    }

    #[test]
    fn two_descriptions_conflict_and_one_never_conflicts_with_itself() {
        let dir = std::env::temp_dir().join(format!("sim-lock-{}", std::process::id()));
        std::fs::write(&dir, b"x").unwrap();
        let a = LockFile::open(&dir).unwrap();
        let b = LockFile::open(&dir).unwrap();
        assert!(a.try_lock(3).unwrap());
        assert!(
            a.try_lock(3).unwrap(),
            "a description re-taking its own lock"
        );
        assert!(!a.held_by_other(3), "own locks never count");
        assert!(b.held_by_other(3));
        assert!(!b.try_lock(3).unwrap());
        assert!(!b.held_by_other(4));
        drop(a);
        assert!(
            !b.held_by_other(3),
            "closing the description drops the lock"
        );
        assert!(b.try_lock(3).unwrap());
        std::fs::remove_file(&dir).unwrap();
    }
}
