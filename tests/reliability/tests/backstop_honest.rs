//! The backstop must never act on honest tenants: two interposed tenants saturating the device
//! at 30/70 for 10 s (nothing bypasses the interposer, nothing is hostile) must leave no
//! backstop action in the arbiter's log. Known failure, found while running the reliability
//! trials (`docs/reliability.md`, "Findings"): the lease check flags the 30 % slice ("ran kernels
//! without the lease") and names both tenants' pids; with `lease = "kill"` both would be killed.
//! The backstop belongs to `arbiter/src/backstop.rs`; run with `--ignored` to see it.

use gpuslice_reliability::node::profile_dir;
use gpuslice_reliability::{field, Node, Tenant};
use std::time::Duration;

#[test]
#[ignore = "known backstop bug: honest interposed tenants are flagged for launching without the lease"]
fn honest_tenants_are_never_flagged() {
    let n = Node::start("honest").expect("node");
    let a = n.admit("a", "\"memory\":\"512Mi\",\"compute\":30");
    let b = n.admit("b", "\"memory\":\"512Mi\",\"compute\":70");
    let w = profile_dir().join("gpuslice-workload");
    let mut ts: Vec<Tenant> = [&a, &b]
        .iter()
        .map(|d| {
            let mut c = n.tenant_command(&w, d);
            c.args([
                "--via",
                "dlsym",
                "saturate",
                "--kernel-us",
                "1000",
                "--depth",
                "2",
                "--seconds",
                "10",
            ]);
            Tenant::spawn(c).expect("tenant")
        })
        .collect();
    for t in ts.iter_mut() {
        let line = t.expect("kernels=", Duration::from_secs(60)).expect("done");
        assert!(field::<u64>(&line, "kernels").unwrap_or(0) > 1000, "{line}");
    }
    let log = n.log();
    let actions: Vec<_> = log.lines().filter(|l| l.contains("backstop:")).collect();
    assert!(
        actions.is_empty(),
        "backstop acted on honest tenants:\n{}",
        actions.join("\n")
    );
}
