//! The CLI's modules form layers: the graph drawn from their `crate::` and `super::` paths (in
//! code, not comments) has no circle, between files nor between top-level modules. `doctor/`
//! keeps its shared row type at the bottom (`doctor/check.rs`), so its checks and its report
//! never import each other in a circle.

use gpuslice_test_support::layers::Graph;
use std::path::Path;

#[test]
fn module_imports_have_no_circle() {
    let g = Graph::of(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(
        g.files.contains_key("run") && g.files.contains_key("doctor::live"),
        "the scan found no imports: {:?}",
        g.files
    );
    if let Some(c) = g.cycle() {
        panic!("modules import in a circle: {}", c.join(" -> "));
    }
    // The checks reach the row type below them, never the report above.
    for check in ["doctor::live", "doctor::owners"] {
        assert!(
            g.files
                .get(check)
                .is_some_and(|s| s.contains("doctor::check")),
            "{check} does not import doctor::check: {:?}",
            g.files.get(check)
        );
        assert!(
            !g.files.get(check).is_some_and(|s| s.contains("doctor")),
            "{check} imports the doctor report"
        );
    }
}
