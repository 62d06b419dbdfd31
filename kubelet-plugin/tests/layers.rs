//! The plugin's modules form layers: the graph drawn from their `crate::` and `super::` paths
//! (in code, not comments) has no circle; the two plugins (`dra`, `deviceplugin`) sit side by
//! side on the shared modules at the top of `src/` and import neither each other nor are
//! imported by what they share (the layout `src/lib.rs` describes).

use gpuslice_test_support::layers::Graph;
use std::path::Path;

#[test]
fn module_imports_have_no_circle_and_the_plugins_stay_apart() {
    let g = Graph::of(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(
        g.files.contains_key("dra::driver") && g.files.contains_key("deviceplugin::service"),
        "the scan found no imports: {:?}",
        g.files
    );
    if let Some(c) = g.cycle() {
        panic!("modules import in a circle: {}", c.join(" -> "));
    }
    let plugins = ["dra", "deviceplugin"];
    assert!(
        !g.imports("dra", "deviceplugin"),
        "dra imports deviceplugin"
    );
    assert!(
        !g.imports("deviceplugin", "dra"),
        "deviceplugin imports dra"
    );
    assert!(g.imports("dra", "capacity") && g.imports("deviceplugin", "capacity"));
    for (shared, _) in g
        .tops
        .iter()
        .filter(|(m, _)| !plugins.contains(&m.as_str()))
    {
        for p in plugins {
            assert!(!g.imports(shared, p), "shared module {shared} imports {p}");
        }
    }
}
