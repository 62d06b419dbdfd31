//! The interposer's modules form layers: the graph drawn from their `crate::` paths (in code,
//! not comments) has no circle. Bottom to top: `log`, `guard`, `real` / `elf` / `dl` (finding
//! the real functions), `driver` (queries of the real driver), `state` (the memory gate: caps,
//! charges, tables), `charge` (the call-site steps every allocating wrapper takes), then the
//! export modules (`cuda`, `pool`, `graph`, `array`, `context`, `launch`, `nvml*`), and `table`
//! and `gate` above them. See `src/lib.rs`.

use gpuslice_test_support::layers::Graph;
use std::path::Path;

#[test]
fn module_imports_have_no_circle() {
    let g = Graph::of(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(
        g.tops.contains_key("cuda"),
        "the scan found no imports: {:?}",
        g.files
    );
    if let Some(c) = g.cycle() {
        panic!("modules import in a circle: {}", c.join(" -> "));
    }
    // The memory gate sits below every export module.
    for above in [
        "cuda", "pool", "graph", "array", "context", "launch", "table",
    ] {
        assert!(!g.imports("state", above), "state imports {above}");
    }
}
