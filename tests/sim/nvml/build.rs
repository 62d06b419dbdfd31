//! Gives the cdylib the soname of the real library, so it can be installed as
//! `libnvidia-ml.so.1` and found by loaders that look the soname up.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnvidia-ml.so.1");
}
