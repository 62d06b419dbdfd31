//! The system calls the arbiter needs beyond Linux 4.4, with their fallbacks, for old kernels
//! (RHEL 8's 4.18) and sandboxes that report an old one (gVisor reports 4.4.0):
//!
//! | call | since | used for | fallback |
//! |---|---|---|---|
//! | `futex_waitv` | 5.16 | scheduler: wait on every slice's demand word at once | `FUTEX_WAIT` on one word in slices of [`FALLBACK_SLICE`], re-checking the others between slices (`sched::futex`) |
//! | `pidfd_open` | 5.3 | reclaim: learn a watched process died without re-reading `/proc` | `/proc/<pid>/stat` each tick (pid + start time) |
//! | `pidfd_open` + `pidfd_send_signal` | 5.3 / 5.1 | backstop: signal exactly the judged process | start time re-read from `/proc/<pid>/stat`, then `kill(2)` |
//!
//! `GPUSLICE_FORCE_SYSCALL_FALLBACKS=1` forces every fallback (CI runs the real-GPU kit's dry
//! run with it). `docs/kernels.md` is the user-facing account, with the race window the
//! `kill(2)` fallback leaves.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU8, Ordering::Relaxed};
use std::sync::OnceLock;
use std::time::Duration;

/// The switch that forces every fallback.
pub const FORCE_ENV: &str = "GPUSLICE_FORCE_SYSCALL_FALLBACKS";

/// How long one single-word wait of the `futex_waitv` fallback lasts before the other words
/// are re-checked: the extra wake-up latency a slice without the waited word can see.
pub const FALLBACK_SLICE: Duration = Duration::from_micros(250);

/// Whether [`FORCE_ENV`] is `1` (read once per process).
pub fn forced() -> bool {
    static F: OnceLock<bool> = OnceLock::new();
    *F.get_or_init(|| std::env::var(FORCE_ENV).is_ok_and(|v| v.trim() == "1"))
}

/// Whether `e` says the kernel (or a seccomp filter, or a sandbox) lacks the call.
pub fn unsupported(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSYS) | Some(libc::EPERM))
}

/// `ENOSYS`, what a forced fallback reports.
fn forced_error() -> io::Error {
    io::Error::from_raw_os_error(libc::ENOSYS)
}

/// `pidfd_open(pid, 0)`; `ENOSYS` when fallbacks are forced.
pub fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    if forced() {
        return Err(forced_error());
    }
    let pid = libc::pid_t::try_from(pid).map_err(io::Error::other)?;
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1; no memory is passed.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = i32::try_from(fd).map_err(io::Error::other)?;
    // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

const UNKNOWN: u8 = 0;
const HAVE: u8 = 1;
const LACK: u8 = 2;
static WAITV: AtomicU8 = AtomicU8::new(UNKNOWN);

/// Whether `futex_waitv` is to be used: not when forced, not once the kernel said `ENOSYS`.
pub fn use_futex_waitv() -> bool {
    !forced() && WAITV.load(Relaxed) != LACK
}

/// Records the answer of a `futex_waitv` call (`ENOSYS`: use the fallback from now on).
pub fn note_futex_waitv(e: Option<&io::Error>) {
    let lacking = e.is_some_and(|e| e.raw_os_error() == Some(libc::ENOSYS));
    WAITV.store(if lacking { LACK } else { HAVE }, Relaxed);
}

/// `futex_waitv` with no words: `EINVAL` where the call exists, `ENOSYS` where it does not.
fn probe_futex_waitv() -> bool {
    // SAFETY: zero entries: the kernel reads no memory.
    let r = unsafe { gpuslice_region::futex::waitv(&[], None) };
    !r.is_err_and(|e| e.raw_os_error() == Some(libc::ENOSYS))
}

/// The running kernel's release (`uname -r`).
pub fn kernel_release() -> String {
    // SAFETY: utsname is plain bytes; uname fills it.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-struct.
    if unsafe { libc::uname(&mut u) } != 0 {
        return "unknown".into();
    }
    let bytes: Vec<u8> = u
        .release
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c.cast_unsigned())
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// One line per fallback in use on this kernel (empty when every call is there), for the
/// arbiter's start-up log. Probes each call once.
pub fn fallbacks_in_use() -> Vec<String> {
    let kernel = kernel_release();
    let why = |call: &str, since: &str| {
        if forced() {
            format!("{call} not used ({FORCE_ENV}=1)")
        } else {
            format!("{call} (Linux {since}) missing on kernel {kernel}")
        }
    };
    let mut out = Vec::new();
    let waitv = !forced() && probe_futex_waitv();
    note_futex_waitv((!waitv).then(forced_error).as_ref());
    if !waitv {
        out.push(format!(
            "{}: the scheduler waits on one futex at a time, re-checking the others every {} µs",
            why("futex_waitv", "5.16"),
            FALLBACK_SLICE.as_micros()
        ));
    }
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() }.cast_unsigned();
    match pidfd_open(me) {
        Ok(_) => {}
        Err(e) if forced() || unsupported(&e) => out.push(format!(
            "{}: reclaim re-reads /proc/<pid>/stat each tick; the backstop checks the start time, \
             then signals with kill(2) (docs/kernels.md: the race window)",
            why("pidfd_open", "5.3")
        )),
        Err(_) => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_that_mean_missing() {
        assert!(unsupported(&io::Error::from_raw_os_error(libc::ENOSYS)));
        assert!(unsupported(&io::Error::from_raw_os_error(libc::EPERM)));
        assert!(!unsupported(&io::Error::from_raw_os_error(libc::ESRCH)));
    }

    #[test]
    fn waitv_enosys_switches_to_the_fallback_for_good() {
        // This kernel (≥ 5.16 here) has the call; `fallbacks_in_use` would record that too.
        note_futex_waitv(None);
        assert_eq!(use_futex_waitv(), !forced());
        note_futex_waitv(Some(&forced_error()));
        assert!(!use_futex_waitv());
        note_futex_waitv(Some(&io::Error::from_raw_os_error(libc::EINTR)));
        assert_eq!(use_futex_waitv(), !forced());
    }

    #[test]
    fn pidfd_open_of_a_gone_pid_fails() {
        // pid 0x3fffffff is above every pid_max.
        let e = pidfd_open(0x3fff_ffff).unwrap_err();
        assert!(matches!(
            e.raw_os_error(),
            Some(libc::ESRCH) | Some(libc::EINVAL) | Some(libc::ENOSYS)
        ));
        assert!(pidfd_open(u32::MAX).is_err(), "not a pid_t");
    }

    #[test]
    fn fallbacks_are_named_when_forced_and_absent_on_a_new_kernel() {
        let lines = fallbacks_in_use();
        if forced() {
            // GPUSLICE_FORCE_SYSCALL_FALLBACKS=1 cargo test …: both fallbacks, saying why.
            assert_eq!(lines.len(), 2, "{lines:?}");
            assert!(lines.iter().all(|l| l.contains(FORCE_ENV)), "{lines:?}");
            assert!(!use_futex_waitv());
        } else {
            // This build machine runs Linux >= 5.16.
            assert!(lines.is_empty(), "{lines:?}");
            assert!(use_futex_waitv());
        }
    }

    #[test]
    fn kernel_release_is_read() {
        let k = kernel_release();
        assert!(k.chars().next().is_some_and(|c| c.is_ascii_digit()), "{k}");
    }
}
