//! The arbiter's modules form layers: the graph drawn from their `crate::` and `super::` paths
//! (in code, not comments) has no circle, between files nor between top-level modules. The
//! layering it checks is described in `arbiter/src/lib.rs` and `docs/architecture.md`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// Module path (`state::handle`; the crate root is "") → source file, for every file in `src/`.
fn modules(dir: &Path, prefix: &[String], out: &mut BTreeMap<String, String>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        if path.is_dir() {
            let mut p = prefix.to_vec();
            p.push(name);
            modules(&path, &p, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let mut p = prefix.to_vec();
            match name.as_str() {
                "mod" => {}
                "lib" if prefix.is_empty() => {}
                "main" if prefix.is_empty() => continue, // the binary, not the library
                _ => p.push(name),
            }
            out.insert(p.join("::"), fs::read_to_string(&path).unwrap());
        }
    }
}

/// The code of a file without comments and without its unit tests (`#[cfg(test)] mod tests`,
/// whose `super::` is the file itself).
fn code_of(src: &str) -> String {
    let src = src.split("#[cfg(test)]\nmod tests").next().unwrap_or(src);
    src.lines()
        .map(|l| l.split_once("//").map_or(l, |(code, _)| code))
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The paths named after each `crate::` / `super::` in `code`, as (root, segments).
fn paths(code: &str) -> Vec<(&'static str, Vec<String>)> {
    let mut out = Vec::new();
    for root in ["crate", "super"] {
        let pat = format!("{root}::");
        let mut at = 0;
        while let Some(i) = code[at..].find(&pat) {
            let start = at + i;
            at = start + pat.len();
            let before = code[..start].chars().next_back();
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                continue;
            }
            let rest = &code[at..];
            let heads: Vec<&str> = match rest.strip_prefix('{') {
                Some(group) => group[..group.find('}').unwrap_or(group.len())]
                    .split(',')
                    .map(str::trim)
                    .collect(),
                None => vec![rest],
            };
            for h in heads {
                let segs: Vec<String> = h
                    .split("::")
                    .map(ident)
                    .take_while(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect();
                out.push((if root == "crate" { "crate" } else { "super" }, segs));
            }
        }
    }
    out
}

fn cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn dfs(
        u: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(u.to_string(), 1);
        stack.push(u.to_string());
        for v in edges.get(u).into_iter().flatten() {
            match state.get(v.as_str()) {
                Some(1) => {
                    let from = stack.iter().position(|s| s == v).unwrap();
                    let mut c = stack[from..].to_vec();
                    c.push(v.clone());
                    return Some(c);
                }
                Some(_) => {}
                None => {
                    if let Some(c) = dfs(v, edges, state, stack) {
                        return Some(c);
                    }
                }
            }
        }
        stack.pop();
        state.insert(u.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for u in edges.keys() {
        if !state.contains_key(u.as_str()) {
            if let Some(c) = dfs(u, edges, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

#[test]
fn module_imports_have_no_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut mods = BTreeMap::new();
    modules(&src, &[], &mut mods);
    let resolve = |segs: &[String]| -> Option<String> {
        (1..=segs.len())
            .rev()
            .map(|n| segs[..n].join("::"))
            .find(|m| mods.contains_key(m))
    };
    let mut files: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut tops: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, text) in &mods {
        if m.is_empty() {
            continue; // the crate root declares and re-exports; it is above everything
        }
        let here: Vec<String> = m.split("::").map(str::to_string).collect();
        for (root, segs) in paths(&code_of(text)) {
            let mut full = if root == "super" {
                here[..here.len() - 1].to_vec()
            } else {
                Vec::new()
            };
            full.extend(segs);
            let Some(to) = resolve(&full) else { continue };
            if &to == m || to.is_empty() {
                continue;
            }
            files.entry(m.clone()).or_default().insert(to.clone());
            let (a, b) = (here[0].clone(), to.split("::").next().unwrap().to_string());
            if a != b {
                tops.entry(a).or_default().insert(b);
            }
        }
    }
    assert!(
        files.contains_key("state::handle") && tops.contains_key("server"),
        "the scan found no imports: {files:?}"
    );
    if let Some(c) = cycle(&files) {
        panic!("files import in a circle: {}", c.join(" -> "));
    }
    if let Some(c) = cycle(&tops) {
        panic!("modules import in a circle: {}", c.join(" -> "));
    }
    // The state sits below the daemon's loops and endpoints, never on them.
    for above in ["server", "metrics", "reclaim", "backstop", "shutdown"] {
        assert!(
            !tops.get("state").is_some_and(|s| s.contains(above)),
            "state imports {above}"
        );
    }
}
