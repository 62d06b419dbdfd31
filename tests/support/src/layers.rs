//! The module graph of a crate drawn from its sources: every `crate::` / `super::` path in code
//! (not comments, not unit tests) is an edge from the file that names it to the module it names.
//! Suites use it to check that a crate's modules form layers ([`Graph::cycle`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// Edges between files (module paths, `state::handle`) and between top-level modules.
#[derive(Debug, Default)]
pub struct Graph {
    /// File → the files it imports from.
    pub files: BTreeMap<String, BTreeSet<String>>,
    /// Top-level module → the top-level modules it imports from.
    pub tops: BTreeMap<String, BTreeSet<String>>,
}

impl Graph {
    /// The graph of the library whose sources are in `src` (the crate root, which declares and
    /// re-exports, is left out: it is above everything; `main.rs` is the binary).
    pub fn of(src: &Path) -> Graph {
        let mut mods = BTreeMap::new();
        modules(src, &[], &mut mods);
        let resolve = |segs: &[String]| -> Option<String> {
            (1..=segs.len())
                .rev()
                .map(|n| segs[..n].join("::"))
                .find(|m| mods.contains_key(m))
        };
        let mut g = Graph::default();
        for (m, text) in &mods {
            if m.is_empty() {
                continue;
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
                g.files.entry(m.clone()).or_default().insert(to.clone());
                let (a, b) = (here[0].clone(), to.split("::").next().unwrap().to_string());
                if a != b {
                    g.tops.entry(a).or_default().insert(b);
                }
            }
        }
        g
    }

    /// A circle among the files or, failing that, among the top-level modules, as the path
    /// that closes it; `None` when they form layers.
    pub fn cycle(&self) -> Option<Vec<String>> {
        cycle(&self.files).or_else(|| cycle(&self.tops))
    }

    /// Whether top-level module `from` imports from `to`.
    pub fn imports(&self, from: &str, to: &str) -> bool {
        self.tops.get(from).is_some_and(|s| s.contains(to))
    }
}

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

/// A circle in `edges`, as the path that closes it.
pub fn cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_circle_and_reads_paths_in_code_only() {
        let mut e: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        e.entry("a".into()).or_default().insert("b".into());
        e.entry("b".into()).or_default().insert("c".into());
        assert_eq!(cycle(&e), None);
        e.entry("c".into()).or_default().insert("a".into());
        assert_eq!(
            cycle(&e),
            Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
        );
        let code = code_of("use crate::x::Y; // crate::z\nuse crate::{p, q::r};\n");
        let found: Vec<Vec<String>> = paths(&code).into_iter().map(|(_, s)| s).collect();
        assert_eq!(
            found,
            vec![
                vec!["x".to_string(), "Y".into()],
                vec!["p".into()],
                vec!["q".into(), "r".into()]
            ]
        );
    }
}
