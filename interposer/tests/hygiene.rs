//! Hygiene checks that need no GPU: no panicking construct in the library's non-test code (the
//! wrappers are `extern "C"`; the profiles abort on panic, so a panic would kill the app), and
//! `GPUSLICE_LOG` is read once.

use std::path::Path;

/// Library sources without their `#[cfg(test)]` modules.
fn sources() -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "rs") {
            let text = std::fs::read_to_string(&p).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap_or("").to_string();
            out.push((p.display().to_string(), code));
        }
    }
    assert!(out.len() >= 10, "sources found: {}", out.len());
    out
}

#[test]
fn no_panicking_calls_on_c_paths() {
    let banned = [
        ".unwrap()",
        ".expect(",
        "panic!(",
        "unreachable!(",
        "todo!(",
        "unimplemented!(",
    ];
    for (file, code) in sources() {
        for (n, line) in code.lines().enumerate() {
            let l = line.trim_start();
            if l.starts_with("//") {
                continue;
            }
            for b in banned {
                assert!(!l.contains(b), "{file}:{}: `{b}` in `{l}`", n + 1);
            }
        }
    }
}

#[test]
fn log_level_is_read_once() {
    std::env::set_var("GPUSLICE_LOG", "debug");
    assert!(gpuslice::log::enabled(gpuslice::log::Level::Debug));
    std::env::set_var("GPUSLICE_LOG", "off");
    assert!(
        gpuslice::log::enabled(gpuslice::log::Level::Debug),
        "a later change of GPUSLICE_LOG must not be seen"
    );
}
