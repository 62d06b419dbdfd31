//! Logging to stderr, level from `GPUSLICE_LOG` (`off`, `error`, `warn` (default), `info`,
//! `debug`) read once. Never used on the launch fast path.

use std::sync::atomic::{AtomicU8, Ordering::Relaxed};

/// Level of a message.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub enum Level {
    /// Something the user must know (enforcement degraded).
    Error = 1,
    /// Unusual but handled.
    Warn = 2,
    /// One line per decision (mode chosen, caps).
    Info = 3,
    /// Per call.
    Debug = 4,
}

static LEVEL: AtomicU8 = AtomicU8::new(0xff);

fn level() -> u8 {
    let l = LEVEL.load(Relaxed);
    if l != 0xff {
        return l;
    }
    let l = match std::env::var("GPUSLICE_LOG").as_deref() {
        Ok("off") | Ok("0") => 0,
        Ok("error") => 1,
        Ok("info") => 3,
        Ok("debug") | Ok("trace") => 4,
        _ => 2,
    };
    LEVEL.store(l, Relaxed);
    l
}

/// Whether `l` is enabled.
pub fn enabled(l: Level) -> bool {
    (l as u8) <= level()
}

/// Writes one line `gpuslice: <msg>` to stderr with a single write(2).
pub fn emit(l: Level, msg: std::fmt::Arguments<'_>) {
    if !enabled(l) {
        return;
    }
    let line = format!("gpuslice[{}]: {msg}\n", std::process::id());
    // SAFETY: writes a valid buffer to fd 2; the result is deliberately ignored.
    unsafe {
        libc::write(2, line.as_ptr().cast(), line.len());
    }
}

/// `log!(Level::Warn, "...", args)`.
#[macro_export]
macro_rules! log {
    ($l:expr, $($a:tt)*) => {
        $crate::log::emit($l, format_args!($($a)*))
    };
}
