//! `gpuslice-arbiter`: not built yet. This placeholder refuses to run so nothing pretends to work;
//! the real binary is tracked in issue #4.

fn main() {
    eprintln!("gpuslice-arbiter: not implemented yet (tracked in issue #4); refusing to run");
    std::process::exit(2);
}
