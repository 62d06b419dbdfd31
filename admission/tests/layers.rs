//! The admission crate's modules form layers (`src/lib.rs`): no import circle, and the lower
//! layers (the inventory, one device's fit) never reach up to admission, placement or the
//! context probe.

use gpuslice_test_support::layers::Graph;
use std::path::Path;

#[test]
fn module_imports_have_no_circle_and_keep_their_layers() {
    let g = Graph::of(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(
        g.imports("admission", "fit") && g.imports("contexts", "files"),
        "the scan found no imports: {:?}",
        g.files
    );
    if let Some(c) = g.cycle() {
        panic!("modules import in a circle: {}", c.join(" -> "));
    }
    for above in ["admission", "placement", "contexts", "nvml"] {
        assert!(!g.imports("fit", above), "fit imports {above}");
        assert!(!g.imports("inventory", above), "inventory imports {above}");
    }
    assert!(
        !g.imports("placement", "admission"),
        "placement imports admission"
    );
}
