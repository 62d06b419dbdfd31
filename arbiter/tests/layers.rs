//! The arbiter's modules form layers: the graph drawn from their `crate::` and `super::` paths
//! (in code, not comments) has no circle, between files nor between top-level modules. The
//! layering it checks is described in `arbiter/src/lib.rs` and `docs/architecture.md`.

use gpuslice_test_support::layers::Graph;
use std::path::Path;

#[test]
fn module_imports_have_no_circle() {
    let g = Graph::of(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(
        g.files.contains_key("state::handle") && g.tops.contains_key("server"),
        "the scan found no imports: {:?}",
        g.files
    );
    if let Some(c) = g.cycle() {
        panic!("modules import in a circle: {}", c.join(" -> "));
    }
    // The state sits below the daemon's loops and endpoints, never on them.
    for above in ["server", "metrics", "reclaim", "backstop", "shutdown"] {
        assert!(!g.imports("state", above), "state imports {above}");
    }
}
