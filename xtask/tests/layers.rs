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

/// The benchmarks and the demo run test-support's harness (`gpuslice_test_support::Arbiter`
/// and `SimNode`), not a wrapper of their own: no type of xtask is named like them.
#[test]
fn one_arbiter_harness() {
    let mut found = Vec::new();
    let mut stack = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("src")];
    let mut files = 0;
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).expect("xtask/src") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            files += 1;
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            for (n, line) in text.lines().enumerate() {
                let words: Vec<&str> = line.split_whitespace().collect();
                let defines = words.windows(2).any(|w| {
                    ["struct", "enum", "type", "trait"].contains(&w[0])
                        && ["Arbiter", "SimNode"]
                            .iter()
                            .any(|name| w[1].trim_end_matches(['{', ';', '<', '(']) == *name)
                });
                if defines {
                    found.push(format!("{}:{}: {line}", p.display(), n + 1));
                }
            }
        }
    }
    assert!(files > 20, "the scan read only {files} files");
    assert!(
        found.is_empty(),
        "a second arbiter or node harness in xtask (use gpuslice_test_support's):\n{}",
        found.join("\n")
    );
}
