//! What the suites, the benchmarks and the demo that run the real processes on the simulated
//! GPU share: the build's profile directory ([`profile_dir`]), one `gpuslice-arbiter` process of
//! any build ([`Arbiter`]: the e2e suites run the dist tree's), a simulated node running one
//! build's programs ([`SimNode`], [`Build`]), tenants on it ([`sim_tenants`]), bounded waits
//! ([`wait`]), the one scratch directory ([`Scratch`]), a crate's module graph ([`layers`]), what
//! the packaging ships ([`packaging`]) and, with the `kubelet` feature, kubelet's side of the
//! device plugin API (`kubelet`). Test code only: failures panic with what was missing or late.

pub mod arbiter;
#[cfg(feature = "kubelet")]
pub mod kubelet;
pub mod layers;
pub mod node;
pub mod packaging;
pub mod scratch;
pub mod sim_tenants;
pub mod wait;

pub use arbiter::Arbiter;
pub use node::{profile_dir, Build, NodeConfig, SimNode};
pub use scratch::Scratch;

/// The last `n` lines of `text` (a daemon's log, for failure messages).
pub fn tail_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
