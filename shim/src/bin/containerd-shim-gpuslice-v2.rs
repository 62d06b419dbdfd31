//! `containerd-shim-gpuslice-v2`: not built yet. This placeholder refuses to run so nothing pretends to work;
//! the real binary is tracked in issue #5.

fn main() {
    eprintln!(
        "containerd-shim-gpuslice-v2: not implemented yet (tracked in issue #5); refusing to run"
    );
    std::process::exit(2);
}
