//! The exported wrappers and the lookup table (`table::WRAPPED`, what `dlsym` and
//! `cuGetProcAddress` answer with) must name the same functions: a wrapper left out of the table
//! would let `dlsym` or `cuGetProcAddress` reach the real driver function and skip the cap, and a
//! table entry without an export would hand out a name the loader cannot bind. Read from the
//! built `libgpuslice.so`'s dynamic symbol table.

use object::{Object, ObjectSymbol};
use std::collections::BTreeSet;
use std::path::PathBuf;

/// Exports that are ours but not wrappers of a driver function: the loader overrides.
const NOT_IN_TABLE: &[&str] = &["dlsym", "dlvsym"];

fn library() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("deps dir");
    deps.parent().expect("profile dir").join("libgpuslice.so")
}

#[test]
fn every_export_is_in_the_table_and_every_entry_is_exported() {
    let path = library();
    let bytes = std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (cargo build -p gpuslice-interposer)",
            path.display()
        )
    });
    let file = object::File::parse(&*bytes).expect("an ELF file");
    let exported: BTreeSet<String> = file
        .dynamic_symbols()
        .filter(|s| s.is_definition() && s.is_global() && s.kind() == object::SymbolKind::Text)
        .filter_map(|s| s.name().ok().map(str::to_string))
        .filter(|n| !NOT_IN_TABLE.contains(&n.as_str()))
        .collect();
    let table: BTreeSet<String> = gpuslice::table::WRAPPED
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert!(table.len() > 50, "table: {}", table.len());
    let missing: Vec<&String> = exported.difference(&table).collect();
    assert!(
        missing.is_empty(),
        "exported but not in table::WRAPPED (dlsym / cuGetProcAddress would miss them): {missing:?}"
    );
    let unexported: Vec<&String> = table.difference(&exported).collect();
    assert!(
        unexported.is_empty(),
        "in table::WRAPPED but not exported by {}: {unexported:?}",
        path.display()
    );
    // The signatures declared once in the ABI crate are those of exactly these wrappers.
    let declared: BTreeSet<String> = gpuslice_cuda_abi::exports::WRAPPED
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(
        declared, table,
        "gpuslice_cuda_abi::exports::WRAPPED and table::WRAPPED differ"
    );
    for n in NOT_IN_TABLE {
        assert!(
            file.dynamic_symbols().any(|s| s.name() == Ok(n)),
            "{n} is not exported"
        );
    }
}
