//! The arbiter's admission policy as the plugin publishes and prepares with it, following the
//! context footprints the arbiter keeps in `<state-dir>/contexts.json` (issue 32): the arbiter
//! measures them at each start (a driver upgrade, a GPU replaced, a first start after the
//! plugin's), and the capacity published from a stale figure would let the scheduler place
//! claims the arbiter refuses, or withhold memory it would admit.
//!
//! [`PolicySource::current`] looks at the file's identity (inode, size, modification time; the
//! arbiter replaces it by a rename, so every write is a new inode) on each call — a `stat`, at
//! each publication poll, prepare and device-plugin refresh — and reads it again only when that
//! changed. The DRA publisher republishes when the policy it last published differs
//! ([`crate::dra::publish::Publisher::run`]); the device plugin recomputes its units at its next
//! refresh and every `ListAndWatch` stream sends them.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};

use gpuslice_admission::contexts::{node_policy, FILE};
use gpuslice_admission::fit::Policy;
use gpuslice_api::config::AdmissionConfig;

/// The identity of `contexts.json` last read: (inode, size, mtime ns); `None` = absent.
type Stamp = Option<(u64, u64, i128)>;

/// Where the policy comes from.
#[derive(Debug)]
pub struct PolicySource {
    /// The node configuration and state directory to follow (`None`: a fixed policy).
    follow: Option<(AdmissionConfig, PathBuf)>,
    /// The identity of the file behind `policy`, and the policy.
    state: Mutex<(Stamp, Policy)>,
}

impl PolicySource {
    /// A policy that never changes (tests, and callers that set it whole).
    pub fn fixed(policy: Policy) -> PolicySource {
        PolicySource {
            follow: None,
            state: Mutex::new((None, policy)),
        }
    }

    /// The policy of `config` with the footprints of `state_dir/contexts.json`, read now and
    /// again whenever the file changes.
    pub fn following(config: &AdmissionConfig, state_dir: &std::path::Path) -> PolicySource {
        let stamp = stamp_of(state_dir);
        PolicySource {
            follow: Some((config.clone(), state_dir.to_path_buf())),
            state: Mutex::new((stamp, node_policy(config, state_dir))),
        }
    }

    /// The policy now: read again first when `contexts.json` changed since the last read.
    pub fn current(&self) -> Policy {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((config, dir)) = &self.follow {
            let now = stamp_of(dir);
            if now != st.0 {
                let next = node_policy(config, dir);
                if next != st.1 {
                    tracing::info!(
                        "{}: context charges now {:?} (was {:?}); capacity follows",
                        dir.join(FILE).display(),
                        next.charges,
                        st.1.charges
                    );
                }
                *st = (now, next);
            }
        }
        st.1.clone()
    }
}

fn stamp_of(dir: &std::path::Path) -> Stamp {
    let m = std::fs::metadata(dir.join(FILE)).ok()?;
    let mtime = i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec());
    Some((m.ino(), m.size(), mtime))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuslice_admission::contexts::{resolve, save};
    use gpuslice_admission::inventory::DeviceInfo;

    const MI: u64 = 1 << 20;

    #[test]
    fn the_policy_follows_the_arbiters_measurement_when_it_changes() {
        let dir = std::env::temp_dir().join(format!("gs-polsrc-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let devs = [DeviceInfo {
            index: 0,
            uuid: "GPU-0".into(),
            name: "H200".into(),
            memory_total: 141 << 30,
        }];
        let measure = |bytes: u64| {
            let (list, _) = resolve(&devs, "580", Ok(vec![(0, bytes)]), None);
            save(&dir, &list).expect("contexts.json");
        };
        let config = AdmissionConfig::default();
        let src = PolicySource::following(&config, &dir);
        assert_eq!(src.current().charge_on(0), 904 * MI, "none yet: assumed");
        measure(1252 * MI);
        assert_eq!(
            src.current().charge_on(0),
            1508 * MI,
            "the arbiter measured"
        );
        measure(300 * MI);
        assert_eq!(src.current().charge_on(0), 556 * MI, "measured again");
        std::fs::remove_file(dir.join(FILE)).expect("rm");
        assert_eq!(src.current().charge_on(0), 904 * MI, "gone: assumed again");
        // A fixed source never reads anything.
        measure(1252 * MI);
        let fixed = PolicySource::fixed(Policy::default());
        assert_eq!(fixed.current().charge_on(0), 512 * MI);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
