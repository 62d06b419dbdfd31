//! Re-entrancy guard: while a thread runs inside one of our wrappers (calling the real driver),
//! nested calls that reach our exports again pass straight through.

use std::cell::Cell;

thread_local! {
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// Whether this thread is inside a wrapper.
pub fn inside() -> bool {
    INSIDE.try_with(|c| c.get()).unwrap_or(true)
}

/// Marks the thread as inside until the returned value drops; `None` if it already was.
pub fn enter() -> Option<Guard> {
    INSIDE
        .try_with(|c| {
            if c.get() {
                None
            } else {
                c.set(true);
                Some(Guard)
            }
        })
        .ok()
        .flatten()
}

/// See [`enter`].
pub struct Guard;

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = INSIDE.try_with(|c| c.set(false));
    }
}
