//! xtask's modules form layers: the graph drawn from their `crate::` and `super::` paths (in
//! code, not comments) has no circle, between files nor between top-level modules (`main.rs`
//! declares them and is above everything). The benchmarks are one folder, `bench/`, whose
//! shared parts sit at its top (`bench/mod.rs`) and which nothing else imports from.

use gpuslice_test_support::layers::Graph;
use std::path::Path;

#[test]
fn module_imports_have_no_circle() {
    let g = Graph::of(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(
        g.tops.contains_key("bench") && g.files.keys().any(|f| f.starts_with("bench::")),
        "the scan found no imports: {:?}",
        g.files
    );
    if let Some(c) = g.cycle() {
        panic!("modules import in a circle: {}", c.join(" -> "));
    }
    for (m, _) in g.tops.iter().filter(|(m, _)| m.as_str() != "bench") {
        assert!(!g.imports(m, "bench"), "{m} imports from bench");
    }
}
