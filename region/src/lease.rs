//! The lease protocol's grant-tagged counters, both halves: the launch gate's (tenant side)
//! and the scheduler's (arbiter side). The `usage` words `pending`, `near` and `busy` each hold
//! a grant id in their high half and a count of processes in their low half: a process counts
//! itself in under the grant it launched under ([`enter`]) and out once its work is drained,
//! down to its last kernel, or quiet ([`leave`]); the scheduler reads the word against the
//! grant it decides about ([`settled`], [`all_left`]). A word tagged with another grant is
//! restarted by the first process of the new grant, so the counts of an old grant never leak
//! into a new one, and a process leaving under an old grant never lowers a new one's count.
//! Generic over [`Word64`] so that `tests/lease_model.rs` runs it on `loom` atomics. See
//! `docs/region.md` and `docs/scheduling.md`.

use crate::atomics::Word64;
use std::sync::atomic::Ordering::{AcqRel, Acquire};

/// The word for `count` processes under `grant`.
pub const fn tagged(grant: u32, count: u32) -> u64 {
    ((grant as u64) << 32) | count as u64
}

/// The grant a word counts under.
pub const fn tag(v: u64) -> u32 {
    (v >> 32) as u32
}

/// The count of a word.
pub const fn count(v: u64) -> u32 {
    (v & 0xffff_ffff) as u32
}

/// Counts one more process in under `grant` (a word tagged with another grant restarts at
/// one under `grant`).
pub fn enter<W: Word64>(w: &W, grant: u32) {
    let mut cur = w.get(Acquire);
    loop {
        let new = if tag(cur) == grant {
            tagged(grant, count(cur).wrapping_add(1))
        } else {
            tagged(grant, 1)
        };
        match w.cas(cur, new, AcqRel) {
            Ok(_) => return,
            Err(x) => cur = x,
        }
    }
}

/// Counts one process out under `grant`: nothing when the word counts under another grant or
/// is already 0 under this one.
pub fn leave<W: Word64>(w: &W, grant: u32) {
    let mut cur = w.get(Acquire);
    loop {
        if tag(cur) != grant || count(cur) == 0 {
            return;
        }
        match w.cas(cur, cur - 1, AcqRel) {
            Ok(_) => return,
            Err(x) => cur = x,
        }
    }
}

/// The scheduler's reading of `pending` for a drain of `grant`: everything counted in under it
/// has left — 0 under it, another grant's tag (processes leave at exit; a later registration
/// retags), or a count above `max` processes, which is no count (tenant-written bytes).
pub const fn settled(v: u64, grant: u32, max: u32) -> bool {
    tag(v) != grant || count(v) == 0 || count(v) > max
}

/// Whether every process counted in under `grant` has left (`near`: down to its last kernel;
/// `busy`: quiet). Another grant's tag — as an older gate leaves it — is not.
pub const fn all_left(v: u64, grant: u32) -> bool {
    tag(v) == grant && count(v) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn counts_under_one_grant_and_restarts_under_the_next() {
        let w = AtomicU64::new(0);
        enter(&w, 7);
        enter(&w, 7);
        assert_eq!(w.get(Acquire), tagged(7, 2));
        leave(&w, 7);
        assert!(!all_left(w.get(Acquire), 7));
        assert!(!settled(w.get(Acquire), 7, 64));
        leave(&w, 7);
        assert!(all_left(w.get(Acquire), 7) && settled(w.get(Acquire), 7, 64));
        // Leaving again, or under a stale grant, changes nothing.
        leave(&w, 7);
        enter(&w, 8);
        leave(&w, 7);
        assert_eq!(w.get(Acquire), tagged(8, 1));
        // Grant 7's drain is over once another grant tagged the word; 8's is not.
        assert!(settled(w.get(Acquire), 7, 64));
        assert!(!settled(w.get(Acquire), 8, 64));
        assert!(!all_left(w.get(Acquire), 7));
        // A count no slice can have is not a count.
        assert!(settled(tagged(8, 65), 8, 64));
    }
}
