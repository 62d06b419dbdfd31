//! Least privilege for gpuslice's root processes: [`restrict_to`] keeps only a given list of
//! Linux capabilities (effective, permitted, bounding; inheritable and ambient emptied) and sets
//! `PR_SET_NO_NEW_PRIVS`. Each binary owns its list and says why per capability; the lists and
//! their reasons are documented in `docs/privileges.md`.
//!
//! Capabilities are per thread: call [`restrict_to`] before any thread is spawned (it refuses a
//! multi-threaded caller rather than leave other threads privileged).

use std::collections::HashSet;

use caps::CapSet;
pub use caps::Capability;

/// Why restricting failed.
#[derive(Debug, thiserror::Error)]
pub enum PrivilegesError {
    /// Other threads exist; they would keep their capabilities.
    #[error("dropping capabilities needs a single-threaded process ({0} threads run)")]
    MultiThreaded(usize),
    /// A capability call failed.
    #[error("{what}: {source}")]
    Caps {
        /// The step.
        what: &'static str,
        /// The error from the caps crate.
        #[source]
        source: caps::errors::CapsError,
    },
    /// `prctl(PR_SET_NO_NEW_PRIVS)` failed.
    #[error("prctl(PR_SET_NO_NEW_PRIVS): {0}")]
    NoNewPrivs(std::io::Error),
}

/// What [`restrict_to`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Restricted {
    /// Not running as root (tests, a user's own arbiter): nothing was changed.
    NotRoot,
    /// Capabilities were dropped; `kept` holds (and `missing` lacked from the start) the rest.
    Dropped {
        /// Kept in the effective, permitted and bounding sets.
        kept: Vec<Capability>,
        /// Asked for but not held when called (e.g. a container without them).
        missing: Vec<Capability>,
    },
}

fn caps_err(what: &'static str) -> impl FnOnce(caps::errors::CapsError) -> PrivilegesError {
    move |source| PrivilegesError::Caps { what, source }
}

/// Names, sorted, for logs: `CAP_SYS_ADMIN, CAP_SYS_CHROOT` or `none`.
pub fn names(list: &[Capability]) -> String {
    let mut v: Vec<String> = list.iter().map(ToString::to_string).collect();
    v.sort();
    if v.is_empty() {
        "none".to_string()
    } else {
        v.join(", ")
    }
}

fn threads() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|n| n.trim().parse().ok())
        })
        .unwrap_or(1)
}

/// Keeps only `keep` (those of it held now) and sets `PR_SET_NO_NEW_PRIVS`. Does nothing when
/// the effective uid is not 0. Must be called while single-threaded.
pub fn restrict_to(keep: &[Capability]) -> Result<Restricted, PrivilegesError> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(Restricted::NotRoot);
    }
    let n = threads();
    if n > 1 {
        return Err(PrivilegesError::MultiThreaded(n));
    }
    let permitted = caps::read(None, CapSet::Permitted).map_err(caps_err("reading permitted"))?;
    let keep: HashSet<Capability> = keep.iter().copied().collect();
    let kept: HashSet<Capability> = keep.intersection(&permitted).copied().collect();
    let mut missing: Vec<Capability> = keep.difference(&permitted).copied().collect();
    missing.sort_by_key(|c| c.index());
    // Bounding first: dropping from it needs CAP_SETPCAP, which goes with the effective set.
    for cap in caps::runtime::thread_all_supported() {
        if !kept.contains(&cap)
            && caps::has_cap(None, CapSet::Bounding, cap).map_err(caps_err("reading bounding"))?
        {
            caps::drop(None, CapSet::Bounding, cap).map_err(caps_err("dropping from bounding"))?;
        }
    }
    if caps::runtime::ambient_set_supported().is_ok() {
        caps::clear(None, CapSet::Ambient).map_err(caps_err("clearing ambient"))?;
    }
    caps::clear(None, CapSet::Inheritable).map_err(caps_err("clearing inheritable"))?;
    // Effective before permitted: the effective set must stay within the permitted one.
    caps::set(None, CapSet::Effective, &kept).map_err(caps_err("setting effective"))?;
    caps::set(None, CapSet::Permitted, &kept).map_err(caps_err("setting permitted"))?;
    // SAFETY: PR_SET_NO_NEW_PRIVS takes integer arguments only; it affects this thread and its
    // future children.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(PrivilegesError::NoNewPrivs(std::io::Error::last_os_error()));
    }
    let mut kept: Vec<Capability> = kept.into_iter().collect();
    kept.sort_by_key(|c| c.index());
    Ok(Restricted::Dropped { kept, missing })
}

/// The capability lists of `docs/privileges.md`'s table: (binary, mode) → capabilities, from
/// rows `| binary | mode | CAP_A, CAP_B |` (`none` for an empty list). For tests that keep
/// the document and the code in step.
pub fn doc_table(markdown: &str) -> Vec<(String, String, Vec<Capability>)> {
    let mut out = Vec::new();
    for line in markdown.lines() {
        let cells: Vec<&str> = line
            .trim()
            .trim_matches('|')
            .split('|')
            .map(str::trim)
            .collect();
        if cells.len() < 3 {
            continue;
        }
        let list = cells[2];
        let parsed: Option<Vec<Capability>> = if list == "none" {
            Some(Vec::new())
        } else {
            list.split(',')
                .map(|c| c.trim().trim_matches('`').parse::<Capability>().ok())
                .collect()
        };
        if let Some(mut caps) = parsed {
            caps.sort_by_key(|c| c.index());
            out.push((
                cells[0].trim_matches('`').to_string(),
                cells[1].to_string(),
                caps,
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_rows_parse() {
        let md = "| Binary | Mode | Kept |\n|---|---|---|\n| `a` | daemon | none |\n\
                  | `b` | x | CAP_SYS_ADMIN, `CAP_KILL` |\n| `c` | y | full set |\n";
        let t = doc_table(md);
        assert_eq!(t.len(), 2, "{t:?}");
        assert_eq!(t[0], ("a".into(), "daemon".into(), vec![]));
        assert_eq!(
            t[1].2,
            vec![Capability::CAP_KILL, Capability::CAP_SYS_ADMIN]
        );
        assert_eq!(names(&t[1].2), "CAP_KILL, CAP_SYS_ADMIN");
        assert_eq!(names(&[]), "none");
    }

    #[test]
    fn non_root_is_left_alone() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            return; // covered by the arbiter's root test
        }
        assert_eq!(restrict_to(&[]).unwrap(), Restricted::NotRoot);
    }
}
