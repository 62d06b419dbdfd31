//! Fuzz target `cdi_spec`: the CDI path of `gpuslice cdi generate` — gpuslice's spec document
//! built from node facts (GPU indices and UUIDs, host paths, hook arguments), its lowest
//! `cdiVersion`, validation with the `container-device-interface` crate, and rendering as JSON
//! and YAML — plus arbitrary CDI text read the way an engine reads a spec file.
//!
//! Input: the first byte picks the mode: 0 = JSON text, 1 = YAML text (read as an engine
//! reads a spec file), otherwise the rest is decoded (`arbitrary`) into node facts.
//!
//! Invariants: no panic; a spec that validates renders (JSON and YAML) to text that the CDI
//! crate reads back and accepts again under the same name, with the same `cdiVersion`; a
//! lowest version, once chosen, is one the crate accepts for that spec.

#![no_main]

use std::path::{Path, PathBuf};

use arbitrary::{Arbitrary, Unstructured};
use container_device_interface::specs::config::Spec as RawSpec;
use gpuslice_cdi::spec::{Device, DeviceNode, Edits, Hook, Mount};
use gpuslice_cdi::{hook_args, Format, Options, Spec, KIND};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Gpu {
    index: u32,
    uuid: String,
    minor: u32,
    host_path: Option<String>,
}

/// A gpuslice spec built from node facts.
#[derive(Arbitrary, Debug)]
struct Input {
    gpus: Vec<Gpu>,
    libraries: Vec<(String, String)>,
    interposer: String,
    hook: String,
    state_dir: String,
    config: Option<String>,
    extra_env: Vec<String>,
    kind: Option<String>,
}

fn read_text(text: &[u8], yaml: bool, name: &Path) {
    let raw: Option<RawSpec> = if yaml {
        serde_yaml_ng::from_slice(text).ok()
    } else {
        serde_json::from_slice(text).ok()
    };
    if let Some(raw) = raw {
        let _ = container_device_interface::version::minimum_required_version(&raw);
        let _ = container_device_interface::spec::new_spec(&raw, &name.to_path_buf(), 0);
    }
}

fn build(input: Input) -> Option<Spec> {
    let Input {
        gpus,
        libraries,
        interposer,
        hook,
        state_dir,
        config,
        extra_env,
        kind,
    } = input;
    let opts = Options {
        driver_root: PathBuf::from("/"),
        dev_root: PathBuf::from("/dev"),
        interposer: PathBuf::from(&interposer),
        preload_file: PathBuf::from("/var/lib/gpuslice/ld.so.preload"),
        hook: PathBuf::from(&hook),
        state_dir: PathBuf::from(state_dir),
        config: config.map(PathBuf::from),
    };
    let bind = |host: &str, container: &str| Mount {
        host_path: host.to_string(),
        container_path: container.to_string(),
        options: ["ro", "nosuid", "nodev", "bind"].map(String::from).to_vec(),
    };
    let mut common = Edits {
        env: extra_env,
        ..Edits::default()
    };
    for (host, container) in &libraries {
        common.mounts.push(bind(host, container));
    }
    common
        .mounts
        .push(bind(&interposer, gpuslice_cdi::CONTAINER_INTERPOSER));
    for (name, stage) in [
        ("createRuntime", "create-runtime"),
        ("poststop", "poststop"),
    ] {
        common.hooks.push(Hook {
            hook_name: name.into(),
            path: hook.clone(),
            args: hook_args(&opts, stage),
            timeout: 10,
        });
    }
    let mut devices = Vec::new();
    let mut all = Edits::default();
    for g in gpus.iter().take(8) {
        let edits = Edits {
            env: vec![format!("GPUSLICE_CDI_GPU_{}={}", g.index, g.uuid)],
            device_nodes: vec![DeviceNode {
                path: format!("/dev/nvidia{}", g.minor),
                host_path: g.host_path.clone(),
                kind: "c".into(),
                major: 195,
                minor: i64::from(g.minor),
            }],
            ..Edits::default()
        };
        all.env.extend(edits.env.iter().cloned());
        all.device_nodes.extend(edits.device_nodes.iter().cloned());
        for name in [g.index.to_string(), g.uuid.clone()] {
            devices.push(Device {
                name,
                container_edits: edits.clone(),
            });
        }
    }
    devices.push(Device {
        name: "all".into(),
        container_edits: all,
    });
    Some(Spec {
        cdi_version: String::new(),
        kind: kind.unwrap_or_else(|| KIND.into()),
        devices,
        container_edits: common,
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode < 2 {
        let yaml = mode == 1;
        let name = if yaml {
            "/etc/cdi/x.yaml"
        } else {
            "/etc/cdi/x.json"
        };
        read_text(rest, yaml, Path::new(name));
        return;
    }
    let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(rest)) else {
        return;
    };
    let Some(mut spec) = build(input) else {
        return;
    };
    if spec.set_lowest_version().is_err() {
        return;
    }
    let version = spec.cdi_version.clone();
    for format in [Format::Json, Format::Yaml] {
        let name = PathBuf::from(format!("/var/run/cdi/gpuslice.{}", format.extension()));
        let Ok(()) = spec.validate(&name) else {
            continue;
        };
        let text = spec.render(format).expect("a valid spec renders");
        let raw: RawSpec = match format {
            Format::Json => serde_json::from_str(&text).expect("rendered JSON reads back"),
            Format::Yaml => serde_yaml_ng::from_str(&text).expect("rendered YAML reads back"),
        };
        if let Err(e) = container_device_interface::spec::new_spec(&raw, &name, 0) {
            panic!("rendered {format:?} no longer valid: {e:#}\n{text}");
        }
        let read_version = match format {
            Format::Json => serde_json::from_str::<serde_json::Value>(&text)
                .ok()
                .and_then(|v| v.get("cdiVersion")?.as_str().map(String::from)),
            Format::Yaml => serde_yaml_ng::from_str::<serde_yaml_ng::Value>(&text)
                .ok()
                .and_then(|v| v.get("cdiVersion")?.as_str().map(String::from)),
        };
        assert_eq!(read_version.as_deref(), Some(version.as_str()));
    }
});
