//! Fuzz target `engine_config`: `gpuslice configure containerd|docker|crio` over an arbitrary
//! existing configuration (containerd config versions 1/2/3 with or without a drop-in,
//! Docker's `daemon.json`, a CRI-O drop-in): parse → plan the edit → write → plan again.
//!
//! Input: the first byte picks the engine and the options (style, default runtime, CDI,
//! in-place, version of a new file); the rest is the existing main file (none when empty).
//!
//! Invariants: no panic; a refusal leaves the file as it was; every planned file is valid TOML
//! (or JSON for Docker) that names the gpuslice runtime; running the command again on its own
//! output changes nothing (idempotent).

#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use gpuslice_cli::configure::{containerd, crio, docker, ConfigureError, FileChange};
use libfuzzer_sys::fuzz_target;

fn scratch() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!("gpuslice-fuzz-engine-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        dir
    })
}

enum Engine {
    Containerd(containerd::Options),
    Docker(docker::Options),
    Crio(crio::Options),
}

impl Engine {
    fn plan(&self) -> Result<Vec<FileChange>, ConfigureError> {
        match self {
            Engine::Containerd(o) => containerd::plan(o),
            Engine::Docker(o) => docker::plan(o),
            Engine::Crio(o) => crio::plan(o),
        }
    }
    fn json(&self) -> bool {
        matches!(self, Engine::Docker(_))
    }
}

fn engine(flags: u8, dir: &Path) -> (Engine, PathBuf) {
    let bit = |n: u8| flags & (1 << n) != 0;
    let runtime_path = PathBuf::from("/usr/local/bin/gpuslice-runtime");
    match flags % 3 {
        0 => {
            let config = dir.join("config.toml");
            let o = containerd::Options {
                config: config.clone(),
                drop_in: None,
                in_place: bit(2),
                style: if bit(3) {
                    containerd::Style::Shim
                } else {
                    containerd::Style::BinaryName
                },
                runtime_path,
                default_runtime: bit(4),
                enable_cdi: bit(5),
                new_version: if bit(6) { 3 } else { 2 },
                // Both drop-in forms: containerd 1.x's (the CRI table as loaded) and 2.x's.
                series: Some(if bit(7) { 2 } else { 1 }),
            };
            (Engine::Containerd(o), config)
        }
        1 => {
            let config = dir.join("daemon.json");
            let o = docker::Options {
                config: config.clone(),
                style: if bit(3) {
                    docker::Style::RuntimeType
                } else {
                    docker::Style::Path
                },
                runtime_path,
                default_runtime: bit(4),
                enable_cdi: bit(5),
            };
            (Engine::Docker(o), config)
        }
        _ => {
            let config = dir.join("99-gpuslice.conf");
            let o = crio::Options {
                config: config.clone(),
                runtime_path,
                default_runtime: bit(4),
            };
            (Engine::Crio(o), config)
        }
    }
}

fn check_text(c: &FileChange, json: bool) {
    let main = !c.path.ends_with("conf.d/gpuslice.toml");
    if json {
        let v: serde_json::Value = serde_json::from_str(&c.new).unwrap_or_else(|e| {
            panic!(
                "{}: planned JSON does not parse: {e}\n{}",
                c.path.display(),
                c.new
            )
        });
        assert!(v.is_object());
    } else if let Err(e) = c.new.parse::<toml_edit::DocumentMut>() {
        panic!(
            "{}: planned TOML does not parse: {e}\n{}",
            c.path.display(),
            c.new
        );
    }
    // The drop-in or the edited file names the runtime (the main file of a v2/v3 import may
    // only gain the import line).
    if !main
        || c.path
            .extension()
            .is_some_and(|e| e == "json" || e == "conf")
    {
        assert!(
            c.new.contains("gpuslice"),
            "{} lacks the runtime",
            c.path.display()
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let dir = scratch();
    let _ = std::fs::remove_dir_all(dir.join("conf.d"));
    let (engine, config) = engine(flags, dir);
    if rest.is_empty() {
        let _ = std::fs::remove_file(&config);
    } else {
        std::fs::write(&config, rest).expect("write config");
    }
    let changes = match engine.plan() {
        Ok(c) => c,
        Err(e) => {
            // A refusal reads only: the file is as it was.
            let now = std::fs::read(&config).ok();
            assert_eq!(now.as_deref(), (!rest.is_empty()).then_some(rest), "{e}");
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    assert!(!changes.is_empty());
    for c in &changes {
        check_text(c, engine.json());
        if let Some(parent) = c.path.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(&c.path, &c.new).expect("write planned file");
    }
    match engine.plan() {
        Ok(again) => {
            for c in again {
                assert!(
                    !c.changes(),
                    "second run changes {}:\n{}",
                    c.path.display(),
                    c.diff()
                );
            }
        }
        Err(e) => panic!("second run refuses its own output: {e}"),
    }
});
