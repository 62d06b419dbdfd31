//! Gives the simulated driver the soname of the real one, so that binaries linked against it
//! record `libcuda.so.1` and find the simulator through the usual library path.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so.1");
    println!("cargo:rerun-if-changed=build.rs");
}
