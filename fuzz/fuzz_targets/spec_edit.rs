//! Fuzz target `spec_edit`: arbitrary `config.json` bytes through the bundle step every
//! gpuslice entry point runs (`gpuslice_oci::prepare_bundle`, as `gpuslice-runtime create`
//! calls it), against a fake arbiter in this process that admits every request with one fixed
//! assignment.
//!
//! Input: the first byte picks the mode. Mode 0: the rest is `config.json` as is. Otherwise the
//! rest is parsed as JSON and, when it is an object, given a fixed request
//! (`gpuslice.io/memory: 1Gi`) so that most runs reach the edit itself.
//!
//! Invariants: no panic; a spec that asks for nothing (or is refused, or fails) comes back
//! byte-for-byte unchanged; a failed create releases every slice it admitted; an edited spec
//! parses, keeps every top-level key and every annotation, asks for the same request, and has
//! the interposer, slice, usage and preload mounts, `LD_PRELOAD`, `GPUSLICE_SLICE_DIR`,
//! `CUDA_VISIBLE_DEVICES` and both hooks.

#![no_main]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use gpuslice_api::protocol::{ResponseEnvelope, SOCKET_NAME};
use gpuslice_api::{AssignedDevice, Config, Request, RequestEnvelope, Response};
use gpuslice_oci::elf_versions::minimal_elf;
use gpuslice_oci::select::{select, Selection};
use gpuslice_oci::spec::SpecDoc;
use gpuslice_oci::{prepare_bundle, Outcome, Settings};
use libfuzzer_sys::fuzz_target;

static ADMITS: AtomicUsize = AtomicUsize::new(0);
static RELEASES: AtomicUsize = AtomicUsize::new(0);
const UUID: &str = "GPU-00000000-fuzz-0000-0000-000000000000";

struct World {
    bundle: PathBuf,
    settings: Settings,
}

fn answer(line: &[u8], slice_dir: &Path) -> Response {
    match serde_json::from_slice::<RequestEnvelope>(line).map(|e| e.request) {
        Ok(Request::Admit { slice_id, .. }) => {
            ADMITS.fetch_add(1, Ordering::SeqCst);
            Response::Admitted {
                slice_id,
                slice_dir: slice_dir.to_path_buf(),
                devices: vec![AssignedDevice {
                    index: 0,
                    uuid: UUID.into(),
                    name: "Fuzz GPU".into(),
                    memory_total: 80 << 30,
                    memory_cap: Some(1 << 30),
                    memory_best_effort: None,
                }],
                existing: false,
            }
        }
        Ok(Request::Release { slice_id }) => {
            RELEASES.fetch_add(1, Ordering::SeqCst);
            Response::Released { slice_id }
        }
        _ => Response::Error {
            code: gpuslice_api::ErrorCode::BadRequest,
            message: "fake arbiter: unexpected request".into(),
        },
    }
}

/// The fake arbiter: one thread, one connection at a time, one answer per line.
fn serve(listener: UnixListener, slice_dir: PathBuf) {
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        let Ok(mut out) = conn.try_clone() else {
            continue;
        };
        let mut lines = BufReader::new(conn);
        let mut line = Vec::new();
        while lines.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
            let mut text = serde_json::to_vec(&ResponseEnvelope::new(answer(&line, &slice_dir)))
                .expect("serialise");
            text.push(b'\n');
            if out.write_all(&text).is_err() {
                break;
            }
            line.clear();
        }
    }
}

fn world() -> &'static World {
    static W: OnceLock<World> = OnceLock::new();
    W.get_or_init(|| {
        let base = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let root = base.join(format!("gpuslice-fuzz-spec-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let state = root.join("state");
        let slice_dir = state.join("slice");
        let bundle = root.join("bundle");
        for d in [&slice_dir, &bundle] {
            std::fs::create_dir_all(d).expect("mkdir");
        }
        let interposer = root.join("libgpuslice.so");
        let hook = root.join("gpuslice-hook");
        // A header-only x86-64 ELF: the image check (`gpuslice_oci::loadable`) reads it.
        std::fs::write(&interposer, minimal_elf(62)).expect("interposer");
        std::fs::write(&hook, b"").expect("hook");
        let listener = UnixListener::bind(state.join(SOCKET_NAME)).expect("bind fake arbiter");
        std::thread::spawn(move || serve(listener, slice_dir));
        let mut config = Config::default();
        config.interposer = Some(interposer);
        config.runtime.hook = Some(hook);
        let settings = Settings::from_config(config, None, Some(state));
        World { bundle, settings }
    })
}

/// The input as `config.json` bytes.
fn config_bytes(data: &[u8]) -> Option<Vec<u8>> {
    let (&mode, rest) = data.split_first()?;
    if mode == 0 {
        return Some(rest.to_vec());
    }
    let mut v: serde_json::Value = serde_json::from_slice(rest).ok()?;
    let top = v.as_object_mut()?;
    let ann = top
        .entry("annotations")
        .or_insert_with(|| serde_json::json!({}));
    if let Some(a) = ann.as_object_mut() {
        a.insert("gpuslice.io/memory".into(), "1Gi".into());
    }
    serde_json::to_vec(&v).ok()
}

fn env_has(doc: &SpecDoc, key: &str, pred: impl Fn(&str) -> bool) -> bool {
    doc.env().iter().any(|(k, v)| k == key && pred(v))
}

fuzz_target!(|data: &[u8]| {
    let w = world();
    let Some(input) = config_bytes(data) else {
        return;
    };
    let path = w.bundle.join("config.json");
    std::fs::write(&path, &input).expect("write config.json");
    let admits = ADMITS.load(Ordering::SeqCst);
    let releases = RELEASES.load(Ordering::SeqCst);
    let mut warnings = Vec::new();
    let result = prepare_bundle(&w.bundle, "fuzz-ctr", &w.settings, &mut warnings);
    let after = std::fs::read(&path).expect("read config.json");
    let admitted = ADMITS.load(Ordering::SeqCst) - admits;
    let released = RELEASES.load(Ordering::SeqCst) - releases;
    match result {
        Ok(Outcome::Unchanged(why)) => {
            assert!(after == input, "unchanged ({why}) but rewritten");
            assert_eq!(admitted, 0, "admitted for a spec that asks nothing");
        }
        Ok(Outcome::Open) => panic!("fail-open with a reachable arbiter"),
        Ok(Outcome::Sliced { fresh, .. }) => {
            assert!(fresh && admitted == 1 && released == 0);
            let before = SpecDoc::parse(&input).expect("input parsed once");
            let doc = SpecDoc::parse(&after).expect("edited spec parses");
            let (Some(old), Some(new)) = (before.0.as_object(), doc.0.as_object()) else {
                panic!("top level not an object");
            };
            for k in old.keys() {
                assert!(new.contains_key(k), "top-level key {k:?} dropped");
            }
            assert_eq!(
                before.annotations(),
                doc.annotations(),
                "annotations changed"
            );
            let request = |d: &SpecDoc| match select(&d.annotations(), &d.env()) {
                Ok(Selection::Slice(r, _)) => r,
                other => panic!("edited spec no longer asks: {other:?}"),
            };
            assert_eq!(
                request(&before),
                request(&doc),
                "request changed by the edit"
            );
            for m in [
                "/usr/lib/gpuslice/libgpuslice.so",
                "/run/gpuslice",
                "/run/gpuslice/usage",
                "/etc/ld.so.preload",
            ] {
                assert!(doc.has_mount(m), "mount {m} missing");
            }
            assert!(env_has(&doc, "LD_PRELOAD", |v| v
                .split([':', ' '])
                .any(|p| p == "/usr/lib/gpuslice/libgpuslice.so")));
            assert!(env_has(&doc, "GPUSLICE_SLICE_DIR", |v| v == "/run/gpuslice"));
            assert!(env_has(&doc, "CUDA_VISIBLE_DEVICES", |v| v == UUID));
            for stage in ["createRuntime", "poststop"] {
                let n = doc
                    .0
                    .pointer(&format!("/hooks/{stage}"))
                    .and_then(|h| h.as_array())
                    .map_or(0, Vec::len);
                assert!(n >= 1, "hook {stage} missing");
            }
        }
        Err(e) => {
            assert!(after == input, "failed ({e}) but config.json was rewritten");
            assert_eq!(admitted, released, "failed ({e}) but the slice was kept");
            assert!(!e.to_string().is_empty());
        }
    }
});
