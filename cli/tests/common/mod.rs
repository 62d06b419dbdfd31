//! The simulated node with the CLI of this build, for the CLI's end-to-end tests.

use gpuslice_test_support::{NodeConfig, SimNode};
use std::process::Command;

/// A [`SimNode`] that also runs `gpuslice`.
pub struct Node(pub SimNode);

impl std::ops::Deref for Node {
    type Target = SimNode;
    fn deref(&self) -> &SimNode {
        &self.0
    }
}

impl Node {
    /// Starts the node (`gs-<tag>-<pid>`).
    pub fn with(tag: &str, cfg: NodeConfig) -> Node {
        Node(SimNode::start(tag, cfg))
    }

    /// `gpuslice <args>` on this node.
    pub fn gpuslice(&self, args: &[&str]) -> Command {
        let mut c = self.command(env!("CARGO_BIN_EXE_gpuslice"));
        c.args(args);
        c
    }

    /// `gpuslice status --json`.
    pub fn status_json(&self) -> serde_json::Value {
        let o = self.gpuslice(&["status", "--json"]).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    }
}
