//! Bounded waits: every wait names what it waited for when it gives up.

use std::io::{BufRead, BufReader};
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// Polls `f` every 20 ms until it holds; panics naming `what` after `limit`.
pub fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(
            t0.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Reads `child`'s stdout (taken from it) until a line containing `key`: when it was read, and
/// the line. Panics after `limit`.
pub fn wait_line(child: &mut Child, key: &str, limit: Duration) -> (Instant, String) {
    let out = child.stdout.take().expect("the child's stdout is piped");
    let (tx, rx) = std::sync::mpsc::channel();
    let wanted = key.to_string();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if line.contains(&wanted) {
                let _ = tx.send((Instant::now(), line));
                return;
            }
        }
    });
    rx.recv_timeout(limit)
        .unwrap_or_else(|_| panic!("no line with {key:?} within {limit:?}"))
}

/// Waits up to `limit` for `child` to exit: when it was seen, and its status.
pub fn wait_exit(child: &mut Child, limit: Duration) -> Option<(Instant, ExitStatus)> {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if let Some(st) = child.try_wait().expect("try_wait") {
            return Some((Instant::now(), st));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}
