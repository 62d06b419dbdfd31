//! `docs/architecture.md` is the map of the tree: this test (test only) checks that it names
//! every workspace member and the fuzz workspace in its table, every `cargo xtask` subcommand,
//! and every test suite, so a new crate, command or suite cannot be left off it.

use crate::shell::root;
use clap::CommandFactory;
use std::fs;

/// The quoted entries of the `members = [ … ]` list of a Cargo manifest.
fn members(manifest: &str) -> Vec<String> {
    let Some(start) = manifest.find("members = [") else {
        return Vec::new();
    };
    let list = &manifest[start..];
    let list = &list[..list.find(']').unwrap_or(list.len())];
    list.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

fn page() -> String {
    fs::read_to_string(root().join("docs/architecture.md")).expect("docs/architecture.md")
}

#[test]
fn every_workspace_member_has_a_row() {
    let page = page();
    let manifest = fs::read_to_string(root().join("Cargo.toml")).expect("Cargo.toml");
    let mut dirs = members(&manifest);
    assert!(dirs.len() > 10, "members not found in Cargo.toml: {dirs:?}");
    dirs.push("fuzz".into());
    let rows: Vec<&str> = page.lines().filter(|l| l.starts_with("| `")).collect();
    let missing: Vec<&String> = dirs
        .iter()
        .filter(|d| {
            !rows
                .iter()
                .any(|r| r.starts_with(&format!("| `{d}/`")) || r.starts_with(&format!("| `{d}` ")))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "docs/architecture.md has no row for {missing:?}"
    );
}

#[test]
fn every_subcommand_and_suite_is_named() {
    let page = page();
    let xtask = &page[page.find("## xtask").expect("an xtask section")..];
    let cmds: Vec<String> = crate::Cli::command()
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect();
    assert!(cmds.len() >= 8, "{cmds:?}");
    let missing: Vec<&String> = cmds
        .iter()
        .filter(|c| !xtask.contains(&format!("`{c}")))
        .collect();
    assert!(
        missing.is_empty(),
        "the xtask section does not name {missing:?}"
    );
    let suites: Vec<&str> = crate::suites::names().collect();
    assert!(suites.len() >= 10, "{suites:?}");
    let missing: Vec<&&str> = suites
        .iter()
        .filter(|s| !xtask.contains(&format!("`{s}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "the xtask section does not name suites {missing:?}"
    );
}

#[test]
fn members_reads_the_list_only() {
    let m = "[workspace]\nmembers = [\n  \"a\",\n  \"b/c\", # x\n]\nexclude = [\"z\"]\n";
    assert_eq!(members(m), vec!["a".to_string(), "b/c".to_string()]);
    assert!(members("[package]\nname = \"x\"\n").is_empty());
}
