//! `cargo xtask gen-procaddr INCLUDE_DIR…`: regenerate `abi/src/procaddr_table.rs`, the
//! `cuGetProcAddress` symbol table, from the `cudaTypedefs.h` (and `cuda.h`) of one or more CUDA
//! toolkits.
//!
//! Each directory must hold `cudaTypedefs.h` and `cuda.h` (NVIDIA's CUDA runtime wheel on PyPI
//! carries both: `pip download --no-deps nvidia-cuda-runtime==13.0.*`, unzip, `nvidia/cu13/include`).
//! Only the derived table (names, versions, flavours, export names) is committed, never the
//! headers.
//!
//! Rules (the driver's export convention, checked against `cuda.h`):
//! - every `PFN_<name>_v<version>[_ptds|_ptsz]` typedef is one variant of `<name>`;
//! - the legacy variants of a name, in version order, are exported as `name`, `name_v2`, …;
//! - a per-thread variant is the legacy export current at its version plus `_ptds` / `_ptsz`;
//! - `cuGraphInstantiate` asked for at `cudaVersion >= 12000` is `cuGraphInstantiateWithFlags`
//!   (cuda.h's `#define cuGraphInstantiate cuGraphInstantiateWithFlags`): the one alias that is
//!   not a suffix.
//!
//! The headers are merged: a variant named by any of them is in the table, so one run over the
//! 12.9 and 13.0 headers covers every `cudaVersion` from 2.0 to 13.x.

use anyhow::{bail, Context, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Where the generated table lives, relative to the workspace root.
pub const OUTPUT: &str = "abi/src/procaddr_table.rs";

/// One variant found in a header.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Variant {
    /// Entry-point name without version or stream suffix.
    pub symbol: String,
    /// Per-thread suffix (`ptds` / `ptsz`), `None` for the legacy flavour.
    pub per_thread: Option<String>,
    /// First `cudaVersion` of the variant.
    pub version: u32,
}

/// One row of the generated table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub symbol: String,
    pub version: u32,
    pub per_thread: bool,
    pub export: String,
}

/// Every `PFN_<name>_v<ver>[_ptds|_ptsz]` typedef in `text` (a cudaTypedefs.h).
pub fn parse_typedefs(text: &str) -> Result<BTreeSet<Variant>> {
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let line = line.trim_start();
        // `typedef … (CUDAAPI *PFN_x_vN)(…)`, and `#define PFN_x PFN_x_vN`: CUDA 12.x declares a
        // few entry points (`cuModuleGetFunctionCount`) only as an unversioned typedef plus
        // such a define.
        let name = if line.starts_with("typedef") {
            line.find("*PFN_").map(|a| identifier(&line[a + 5..]))
        } else if let Some(def) = line.strip_prefix("#define PFN_") {
            // Only `#define PFN_x PFN_x_vN` (the same entry point, versioned): the header's other
            // defines are aliases of typedefs already read, or per-thread macros.
            let mut w = def.split_whitespace();
            match (w.next(), w.next().and_then(|t| t.strip_prefix("PFN_"))) {
                (Some(lhs), Some(rhs)) if rhs.starts_with(&format!("{lhs}_v")) => Some(rhs),
                _ => None,
            }
        } else {
            None
        };
        let Some(name) = name else {
            continue;
        };
        // Unversioned typedefs (`PFN_cuModuleGetFunctionCount`) repeat a versioned name.
        if let Some(v) = parse_pfn(name).with_context(|| format!("in `{line}`"))? {
            out.insert(v);
        }
    }
    if out.is_empty() {
        bail!("no PFN_ typedefs found: is this cudaTypedefs.h?");
    }
    Ok(out)
}

/// The C identifier `s` starts with.
fn identifier(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// `cuMemcpyHtoD_v7000_ptds` → (`cuMemcpyHtoD`, 7000, `ptds`); `None` without `_v<version>`.
fn parse_pfn(name: &str) -> Result<Option<Variant>> {
    let (base, per_thread) = match name.rsplit_once('_') {
        Some((b, s @ ("ptds" | "ptsz"))) => (b, Some(s.to_string())),
        _ => (name, None),
    };
    let Some((symbol, ver)) = base.rsplit_once("_v") else {
        return Ok(None);
    };
    let version: u32 = ver
        .parse()
        .with_context(|| format!("PFN_{name}: version `{ver}` is not a number"))?;
    if symbol.is_empty() || !symbol.starts_with("cu") {
        bail!("PFN_{name}: `{symbol}` is not a driver entry point");
    }
    Ok(Some(Variant {
        symbol: symbol.to_string(),
        per_thread,
        version,
    }))
}

/// `CUDA_VERSION` of a cuda.h (13000 for 13.0).
pub fn cuda_version(cuda_h: &str) -> Result<u32> {
    cuda_h
        .lines()
        .find_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some("#define") && w.next() == Some("CUDA_VERSION"))
                .then(|| w.next().and_then(|v| v.parse().ok()))
                .flatten()
        })
        .context("cuda.h has no `#define CUDA_VERSION <n>`")
}

/// Every `#define cuX cuX_vN` / `#define cuX __CUDA_API_PTDS(cuX_vN)` of a cuda.h, as
/// (name, export the default build binds to).
pub fn parse_defines(cuda_h: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for line in cuda_h.lines() {
        let mut w = line.split_whitespace();
        if w.next() != Some("#define") {
            continue;
        }
        let (Some(name), Some(target), None) = (w.next(), w.next(), w.next()) else {
            continue;
        };
        let target = target
            .strip_prefix("__CUDA_API_PTDS(")
            .or_else(|| target.strip_prefix("__CUDA_API_PTSZ("))
            .and_then(|t| t.strip_suffix(')'))
            .unwrap_or(target);
        if name.starts_with("cu") && target.starts_with(name) && target != name {
            out.push((name.to_string(), target.to_string()));
        }
    }
    out
}

/// The table rows for `variants`, sorted by symbol, flavour (legacy first), version.
pub fn rows(variants: &BTreeSet<Variant>) -> Vec<Row> {
    let mut by_symbol: BTreeMap<&str, Vec<&Variant>> = BTreeMap::new();
    for v in variants {
        by_symbol.entry(&v.symbol).or_default().push(v);
    }
    let mut out = Vec::new();
    for (symbol, vs) in by_symbol {
        // Legacy exports: name, name_v2, name_v3, … in version order.
        let mut legacy: Vec<u32> = vs
            .iter()
            .filter(|v| v.per_thread.is_none())
            .map(|v| v.version)
            .collect();
        legacy.sort_unstable();
        let export_at = |i: usize| {
            if i == 0 {
                symbol.to_string()
            } else {
                format!("{symbol}_v{}", i + 1)
            }
        };
        for (i, &version) in legacy.iter().enumerate() {
            out.push(Row {
                symbol: symbol.to_string(),
                version,
                per_thread: false,
                export: export_at(i),
            });
        }
        if symbol == "cuGraphInstantiate" {
            out.push(Row {
                symbol: symbol.to_string(),
                version: 12000,
                per_thread: false,
                export: "cuGraphInstantiateWithFlags".to_string(),
            });
        }
        let mut per_thread: Vec<(u32, &str)> = vs
            .iter()
            .filter_map(|v| v.per_thread.as_deref().map(|s| (v.version, s)))
            .collect();
        per_thread.sort_unstable();
        for (version, suffix) in per_thread {
            // The legacy export current at this version; the first one if none is that old.
            let current = legacy.iter().rposition(|&l| l <= version).unwrap_or(0);
            out.push(Row {
                symbol: symbol.to_string(),
                version,
                per_thread: true,
                export: format!("{}_{suffix}", export_at(current)),
            });
        }
    }
    out
}

/// Every `#define` of cuda.h whose target is not an export of the table (a broken convention).
pub fn unmatched_defines(rows: &[Row], defines: &[(String, String)]) -> Vec<String> {
    let exports: BTreeSet<&str> = rows.iter().map(|r| r.export.as_str()).collect();
    defines
        .iter()
        .filter(|(name, target)| {
            // Only names the table knows: cuda.h also defines non-entry-point macros.
            rows.iter().any(|r| &r.symbol == name) && !exports.contains(target.as_str())
        })
        .map(|(name, target)| format!("{name} -> {target}"))
        .collect()
}

/// The generated Rust source.
pub fn render(rows: &[Row], sources: &[u32]) -> String {
    let names: Vec<String> = sources
        .iter()
        .map(|v| format!("{}.{}", v / 1000, v % 1000 / 10))
        .collect();
    let mut s = String::new();
    s.push_str(
        "// @generated by `cargo xtask gen-procaddr` (xtask/src/gen_procaddr.rs) from the\n",
    );
    s.push_str(&format!(
        "// cudaTypedefs.h of CUDA {}. Do not edit: re-run the generator.\n\n",
        names.join(" and ")
    ));
    s.push_str("use super::Flavour::{Legacy, PerThread};\nuse super::{e, ProcAddrEntry};\n\n");
    s.push_str(
        "/// The CUDA toolkits (`CUDA_VERSION`) whose headers the table was generated from.\n",
    );
    s.push_str(&format!(
        "pub const SOURCE_HEADERS: &[u32] = &[{}];\n\n",
        sources
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    ));
    s.push_str("/// Every exported variant, sorted by `symbol`, then flavour (legacy first), then version.\n");
    s.push_str("#[rustfmt::skip]\npub static PROC_ADDR_TABLE: &[ProcAddrEntry] = &[\n");
    for r in rows {
        let flavour = if r.per_thread { "PerThread" } else { "Legacy" };
        s.push_str(&format!(
            "    e(\"{}\", {}, {flavour}, \"{}\"),\n",
            r.symbol, r.version, r.export
        ));
    }
    s.push_str("];\n");
    s
}

/// Read every include directory, merge, check against cuda.h and write [`OUTPUT`] under `root`.
pub fn run(root: &Path, dirs: &[std::path::PathBuf]) -> Result<()> {
    if dirs.is_empty() {
        bail!("name at least one include directory holding cudaTypedefs.h and cuda.h");
    }
    let mut all = BTreeSet::new();
    let mut sources = Vec::new();
    let mut defines = Vec::new();
    for dir in dirs {
        let read = |f: &str| {
            std::fs::read_to_string(dir.join(f))
                .with_context(|| format!("reading {}", dir.join(f).display()))
        };
        let typedefs = parse_typedefs(&read("cudaTypedefs.h")?)?;
        let cuda_h = read("cuda.h")?;
        let version = cuda_version(&cuda_h)?;
        eprintln!(
            "gen-procaddr: CUDA {version}: {} typedefs from {}",
            typedefs.len(),
            dir.display()
        );
        all.extend(typedefs);
        sources.push(version);
        defines.extend(parse_defines(&cuda_h));
    }
    sources.sort_unstable();
    sources.dedup();
    let rows = rows(&all);
    let bad = unmatched_defines(&rows, &defines);
    if !bad.is_empty() {
        bail!(
            "cuda.h binds names to exports the convention does not produce: {}",
            bad.join(", ")
        );
    }
    let path = root.join(OUTPUT);
    std::fs::write(&path, render(&rows, &sources))
        .with_context(|| format!("writing {}", path.display()))?;
    eprintln!("gen-procaddr: {} entries → {}", rows.len(), path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "\
typedef CUresult (CUDAAPI *PFN_cuMemAlloc_v3020)(CUdeviceptr_v2 *dptr, size_t bytesize);
typedef CUresult (CUDAAPI *PFN_cuCtxSynchronize_v2000)(void);
typedef CUresult (CUDAAPI *PFN_cuCtxSynchronize_v13000)(CUcontext ctx);
typedef CUresult (CUDAAPI *PFN_cuMemcpyHtoD_v7000_ptds)(CUdeviceptr_v2 d, const void *s, size_t n);
typedef CUresult (CUDAAPI *PFN_cuMemcpyHtoD_v3020)(CUdeviceptr_v2 d, const void *s, size_t n);
#if defined(__CUDA_API_VERSION_INTERNAL)
    typedef CUresult (CUDAAPI *PFN_cuMemAlloc_v2000)(CUdeviceptr_v1 *dptr, unsigned int bytesize);
    typedef CUresult (CUDAAPI *PFN_cuMemcpyHtoD_v2000)(CUdeviceptr_v1 d, const void *s, unsigned int n);
#endif
typedef CUresult (CUDAAPI *PFN_cuGraphInstantiate_v10000)(void);
typedef CUresult (CUDAAPI *PFN_cuGraphInstantiate_v11000)(void);
typedef CUresult (CUDAAPI *PFN_cuLaunchKernel_v7000_ptsz)(void);
typedef CUresult (CUDAAPI *PFN_cuLaunchKernel_v4000)(void);
typedef CUresult (CUDAAPI *PFN_cuModuleGetFunctionCount)(unsigned int *count, CUmodule hmod);
#define PFN_cuModuleGetFunctionCount PFN_cuModuleGetFunctionCount_v12040
#define PFN_cuMemAlloc_v2 __API_TYPEDEF_PTSZ(PFN_cuMemAlloc, 3020, 3020)
#define PFN_cuGraphInstantiate PFN_cuGraphInstantiateWithFlags_v11040
";

    fn row(symbol: &str, version: u32, per_thread: bool, export: &str) -> Row {
        Row {
            symbol: symbol.into(),
            version,
            per_thread,
            export: export.into(),
        }
    }

    #[test]
    fn variants_become_exports_by_the_driver_convention() {
        let rows = rows(&parse_typedefs(HEADER).unwrap());
        assert_eq!(
            rows,
            vec![
                row("cuCtxSynchronize", 2000, false, "cuCtxSynchronize"),
                row("cuCtxSynchronize", 13000, false, "cuCtxSynchronize_v2"),
                row("cuGraphInstantiate", 10000, false, "cuGraphInstantiate"),
                row("cuGraphInstantiate", 11000, false, "cuGraphInstantiate_v2"),
                row(
                    "cuGraphInstantiate",
                    12000,
                    false,
                    "cuGraphInstantiateWithFlags"
                ),
                row("cuLaunchKernel", 4000, false, "cuLaunchKernel"),
                row("cuLaunchKernel", 7000, true, "cuLaunchKernel_ptsz"),
                row("cuMemAlloc", 2000, false, "cuMemAlloc"),
                row("cuMemAlloc", 3020, false, "cuMemAlloc_v2"),
                row("cuMemcpyHtoD", 2000, false, "cuMemcpyHtoD"),
                row("cuMemcpyHtoD", 3020, false, "cuMemcpyHtoD_v2"),
                row("cuMemcpyHtoD", 7000, true, "cuMemcpyHtoD_v2_ptds"),
                row(
                    "cuModuleGetFunctionCount",
                    12040,
                    false,
                    "cuModuleGetFunctionCount"
                ),
            ]
        );
        let src = render(&rows, &[12090, 13000]);
        assert!(src.contains("CUDA 12.9 and 13.0"));
        assert!(src.contains("#[rustfmt::skip]"));
        assert!(
            src.contains("    e(\"cuMemcpyHtoD\", 7000, PerThread, \"cuMemcpyHtoD_v2_ptds\"),\n")
        );
    }

    #[test]
    fn bad_typedefs_and_headers_are_refused() {
        assert!(parse_typedefs("int x;\n").is_err());
        // Unversioned typedefs are skipped; a header of nothing else has no table.
        let err = parse_typedefs("typedef CUresult (CUDAAPI *PFN_cuFoo)(void);\n").unwrap_err();
        assert!(format!("{err:#}").contains("no PFN_ typedefs"));
        let err = parse_typedefs("typedef CUresult (CUDAAPI *PFN_cuFoo_vX)(void);\n").unwrap_err();
        assert!(format!("{err:#}").contains("not a number"));
        assert!(cuda_version("#define CUDA_VERSION\n").is_err());
        assert_eq!(cuda_version("#define CUDA_VERSION 13000\n").unwrap(), 13000);
    }

    #[test]
    fn cuda_h_defines_are_checked_against_the_exports() {
        let rows = rows(&parse_typedefs(HEADER).unwrap());
        let defines = parse_defines(
            "#define cuMemAlloc                          cuMemAlloc_v2\n\
             #define cuMemcpyHtoD   __CUDA_API_PTDS(cuMemcpyHtoD_v2)\n\
             #define cuLaunchKernel   __CUDA_API_PTSZ(cuLaunchKernel_v9)\n\
             #define cuUnknown cuUnknown_v2\n\
             #define CUDA_VERSION 13000\n",
        );
        assert_eq!(defines.len(), 4);
        assert_eq!(
            unmatched_defines(&rows, &defines),
            vec!["cuLaunchKernel -> cuLaunchKernel_v9".to_string()]
        );
    }

    #[test]
    fn run_needs_directories_with_both_headers() {
        let tmp = std::env::temp_dir().join(format!("gen-procaddr-{}", std::process::id()));
        std::fs::create_dir_all(tmp.join("abi/src")).unwrap();
        assert!(run(&tmp, &[]).is_err());
        let err = run(&tmp, &[tmp.join("missing")]).unwrap_err();
        assert!(format!("{err:#}").contains("cudaTypedefs.h"));
        let inc = tmp.join("inc");
        std::fs::create_dir_all(&inc).unwrap();
        std::fs::write(inc.join("cudaTypedefs.h"), HEADER).unwrap();
        std::fs::write(inc.join("cuda.h"), "#define CUDA_VERSION 13000\n").unwrap();
        run(&tmp, &[inc]).unwrap();
        let out = std::fs::read_to_string(tmp.join(OUTPUT)).unwrap();
        assert!(out.contains("SOURCE_HEADERS: &[u32] = &[13000]"));
        assert_eq!(out.matches("    e(").count(), 13);
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}
