//! An orderly stop on SIGTERM / SIGINT (systemd's stop, Ctrl-C): the signals are blocked in
//! every thread (before any is started) and taken by one thread with `sigwait`, which waits for
//! the request in progress (the state lock), logs the stop, removes the control socket, so that
//! clients then say "not running" instead of "connection refused", and exits 0. Slice records
//! stay in the state directory: the next start restores them.

use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use crate::state::State;

/// The signals that stop the daemon, blocked in the calling thread and so in every thread it
/// starts afterwards. Call it first thing in `main`, before any thread exists.
#[derive(Clone, Copy)]
pub struct StopSignals(libc::sigset_t);

impl std::fmt::Debug for StopSignals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StopSignals(SIGTERM, SIGINT)")
    }
}

/// Blocks SIGTERM and SIGINT (see [`StopSignals`]).
pub fn block() -> io::Result<StopSignals> {
    // SAFETY: `set` is a local sigset_t initialised by sigemptyset before use; the signal
    // numbers are valid; pthread_sigmask only reads `set` and is given no old-set pointer.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        Ok(StopSignals(set))
    }
}

/// Starts the thread that stops the daemon on one of `signals`.
pub fn spawn(signals: StopSignals, state: Arc<Mutex<State>>, socket: PathBuf) -> io::Result<()> {
    std::thread::Builder::new()
        .name("shutdown".into())
        .spawn(move || {
            let mut sig: libc::c_int = 0;
            // SAFETY: the set was initialised by `block`, `sig` is a valid out pointer, and the
            // signals are blocked in every thread, so sigwait is the only taker.
            let rc = unsafe { libc::sigwait(&signals.0, &mut sig) };
            let name = match sig {
                libc::SIGTERM => "SIGTERM",
                libc::SIGINT => "SIGINT",
                _ => "a stop signal",
            };
            if rc != 0 {
                tracing::error!("sigwait failed ({rc}); stopping");
            }
            // Wait for the request being served, then take no more.
            let st = state.lock().unwrap_or_else(PoisonError::into_inner);
            let slices = st.admission().slices().count();
            match std::fs::remove_file(&socket) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => tracing::warn!("cannot remove {}: {e}", socket.display()),
            }
            tracing::info!(
                "{name}: stopping; {slices} slice(s) kept in the state directory for the next start"
            );
            std::process::exit(0);
        })
        .map(|_| ())
}
