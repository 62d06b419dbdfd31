//! Builds a link-time stub `libcuda.so` (soname `libcuda.so.1`) for the `gpuslice-workload-linked`
//! binary, the way NVIDIA's toolkit ships `stubs/libcuda.so`: the binary links against the stub and
//! the loader finds the real (or simulated) `libcuda.so.1` at run time. The exported names come from
//! the driver table in `src/driver.rs`, so the stub can never drift from what the binary uses.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let table = std::fs::read_to_string("src/driver.rs").expect("reading src/driver.rs");
    println!("cargo:rerun-if-changed=src/driver.rs");
    let names: Vec<String> = table
        .lines()
        .filter_map(|l| {
            let (_, rest) = l.split_once("\" / \"")?;
            Some(rest.split('"').next()?.to_string())
        })
        .collect();
    assert!(names.len() > 10, "driver table not found in src/driver.rs");

    let mut c = String::new();
    let mut rs = String::from("extern \"C\" {\n");
    let mut lookup = String::from(
        "/// Address of a linked driver symbol by export name.\n\
         pub fn lookup(name: &str) -> Option<*mut std::ffi::c_void> {\n    match name {\n",
    );
    for n in &names {
        writeln!(
            c,
            "int {n}(void) {{ return 34; /* CUDA_ERROR_STUB_LIBRARY */ }}"
        )
        .unwrap();
        writeln!(rs, "    fn {n}();").unwrap();
        writeln!(
            lookup,
            "        \"{n}\" => Some({n} as *mut std::ffi::c_void),"
        )
        .unwrap();
    }
    rs.push_str("}\n");
    lookup.push_str("        _ => None,\n    }\n}\n");
    std::fs::write(out.join("stub.c"), c).expect("writing stub.c");
    std::fs::write(out.join("linked.rs"), rs + &lookup).expect("writing linked.rs");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args(["-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o"])
        .arg(out.join("libcuda.so"))
        .arg(out.join("stub.c"))
        .status()
        .expect("running the C compiler for the libcuda stub");
    assert!(status.success(), "building the libcuda stub failed");
    println!(
        "cargo:rustc-link-arg-bin=gpuslice-workload-linked=-L{}",
        out.display()
    );
    println!("cargo:rustc-link-arg-bin=gpuslice-workload-linked=-lcuda");
}
