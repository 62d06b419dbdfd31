//! `gpuslice-runtime`: not built yet. This placeholder refuses to run so nothing pretends to work;
//! the real binary is tracked in issue #5.

fn main() {
    eprintln!("gpuslice-runtime: not implemented yet (tracked in issue #5); refusing to run");
    std::process::exit(2);
}
