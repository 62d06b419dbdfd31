//! What the suites that run the real processes on the simulated GPU share: the build's profile
//! directory ([`profile_dir`]), a simulated node with a real `gpuslice-arbiter` ([`SimNode`]),
//! bounded waits ([`wait`]), and a crate's module graph ([`layers`]). Test code only: failures panic with what was missing or late.

pub mod layers;
pub mod node;
pub mod wait;

pub use node::{profile_dir, NodeConfig, SimNode};
