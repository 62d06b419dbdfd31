//! The device-plugin install (`packaging/kubernetes/overlays/device-plugin`) and its example
//! (`packaging/kubernetes/examples/device-plugin`), rendered offline with `kubectl kustomize` and
//! strictly checked against the Kubernetes API types (no cluster ran): the `device-plugin`
//! container (its host paths — kubelet's device-plugin directory and no other kubelet path —
//! each documented in docs/privileges.md; no API token), the node configuration (the unit, by
//! gpuslice's own parser), and the example Pod, allocated the way kubelet would with the
//! plugin's own placement code and read by the runtime's own request reading into a
//! 16 GiB / 40 % / high slice on one GPU.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use gpuslice_admission::fit::Policy;
use gpuslice_admission::inventory::DeviceInfo;
use gpuslice_api::{Config, DeviceSelector, MemoryRequest, Priority};
use gpuslice_deploy_tests::{
    doc_section, host_mounts, kubectl_or_skip, named, objects, render_strict, repo_root, s, strs,
    IMAGE_PLACEHOLDER,
};
use gpuslice_kubelet_plugin::capacity::PublishPolicy;
use gpuslice_kubelet_plugin::deviceplugin::units::{units_of, UnitPolicy};
use gpuslice_kubelet_plugin::deviceplugin::{place, RESOURCE};
use gpuslice_kubelet_plugin::gpu::Gpu;
use gpuslice_oci::select::{select, Selection};
use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;

const GI: u64 = 1 << 30;

fn node_config(objs: &[Value]) -> (&Value, Config) {
    let cm = objects(objs, "ConfigMap")
        .into_iter()
        .find(|o| s(&o["metadata"]["name"]).starts_with("gpuslice-config"))
        .unwrap();
    let cfg = Config::from_toml_str(s(&cm["data"]["config.toml"]), Path::new("config.toml"))
        .unwrap_or_else(|e| panic!("{e}"));
    (cm, cfg)
}

#[test]
fn device_plugin_overlay_renders_and_mounts_only_the_device_plugin_directory() {
    let Some(kubectl) = kubectl_or_skip(
        "device_plugin_overlay_renders_and_mounts_only_the_device_plugin_directory",
    ) else {
        return;
    };
    let objs = render_strict(&kubectl, "overlays/device-plugin");
    let kinds: BTreeSet<&str> = objs.iter().map(|o| s(&o["kind"])).collect();
    // A device plugin talks to kubelet only: no RBAC, no DRA objects.
    assert_eq!(
        kinds,
        BTreeSet::from([
            "ConfigMap",
            "DaemonSet",
            "Namespace",
            "RuntimeClass",
            "ServiceAccount"
        ])
    );
    let ds = objects(&objs, "DaemonSet")[0];
    let spec = &ds["spec"]["template"]["spec"];
    let ru = &ds["spec"]["updateStrategy"]["rollingUpdate"];
    assert_eq!(ru["maxSurge"], 0, "{ru}");
    let mains: BTreeSet<&str> = spec["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| s(&c["name"]))
        .collect();
    assert_eq!(mains, BTreeSet::from(["arbiter", "device-plugin"]));
    let plugin = named(&spec["containers"], "device-plugin");
    let arbiter = named(&spec["containers"], "arbiter");
    assert_eq!(plugin["image"], arbiter["image"]);
    assert_eq!(s(&plugin["image"]), IMAGE_PLACEHOLDER);
    let cmd = strs(&plugin["command"]);
    assert_eq!(cmd[0], "/usr/bin/gpuslice-kubelet-plugin");
    assert!(cmd.contains(&"--mode=device-plugin"), "{cmd:?}");
    assert!(cmd.contains(&"--config=/etc/gpuslice/config.toml"));
    // The unit comes from the node configuration, not a flag.
    assert!(!cmd.iter().any(|a| a.starts_with("--unit")), "{cmd:?}");
    assert!(plugin["env"]
        .as_array()
        .unwrap()
        .iter()
        .all(|e| e["name"] != "GPUSLICE_GPU_MEMORY_UNIT"));
    assert_eq!(
        named(&plugin["env"], "NODE_NAME")["valueFrom"]["fieldRef"]["fieldPath"],
        "spec.nodeName"
    );
    assert_eq!(plugin["securityContext"]["readOnlyRootFilesystem"], true);
    assert!(plugin["resources"]["limits"]["memory"].is_string());

    // Its host paths: exactly these, each with its reason in docs/privileges.md (the device
    // plugin's rows of the gpuslice-kubelet-plugin table).
    let section = doc_section("privileges.md", "### `gpuslice-kubelet-plugin`");
    let privileges: Vec<&str> = section
        .lines()
        .filter(|l| l.starts_with("| device plugin"))
        .collect();
    let host = host_mounts(spec, plugin);
    for p in host.keys() {
        assert!(
            privileges.iter().any(|l| l.contains(&format!("`{p}`"))),
            "hostPath {p} of device-plugin has no device-plugin row in docs/privileges.md's gpuslice-kubelet-plugin table"
        );
    }
    let lib = "/";
    assert_eq!(
        host.keys().copied().collect::<Vec<_>>(),
        [lib, "/run/gpuslice", "/var/lib/kubelet/device-plugins"]
    );
    for (p, (inside, ro)) in &host {
        if *p == lib {
            assert_eq!((*inside, *ro), ("/host", true));
        } else {
            assert_eq!((inside, *ro), (p, false), "{p}");
        }
    }
    assert_eq!(
        named(&spec["volumes"], "kubelet-device-plugins")["hostPath"]["type"],
        "Directory"
    );
    // No API token anywhere in the Pod.
    assert_eq!(spec["automountServiceAccountToken"], false);
    for c in spec["containers"]
        .as_array()
        .unwrap()
        .iter()
        .chain(spec["initContainers"].as_array().unwrap())
    {
        assert!(
            !c["volumeMounts"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|m| s(&m["mountPath"]).contains("serviceaccount")),
            "{}: token mount",
            c["name"]
        );
    }

    // The node configuration: the base's, with the unit set (1 GiB) for the plugin to read.
    let (cm, cfg) = node_config(&objs);
    assert_eq!(cfg.kubernetes.device_plugin_unit.0, GI);
    assert!(
        !cfg.admission.dra_only,
        "the device plugin needs no dra_only"
    );
    let mount = plugin["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["mountPath"] == "/etc/gpuslice")
        .unwrap();
    assert!(
        named(&spec["volumes"], s(&mount["name"]))["configMap"]["name"] == cm["metadata"]["name"]
    );
    let base = Config::from_toml_str(
        &std::fs::read_to_string(repo_root().join("packaging/kubernetes/base/config.toml"))
            .unwrap(),
        Path::new("base/config.toml"),
    )
    .unwrap();
    assert_eq!(
        cfg, base,
        "overlays/device-plugin/config.toml drifted from the base's"
    );
    let text = s(&cm["data"]["config.toml"]);
    assert!(text.contains("device_plugin_unit = \"1Gi\""), "{text}");
}

#[test]
fn device_plugin_example_pod_becomes_a_16gi_40_percent_high_slice_on_one_gpu() {
    let Some(kubectl) = kubectl_or_skip(
        "device_plugin_example_pod_becomes_a_16gi_40_percent_high_slice_on_one_gpu",
    ) else {
        return;
    };
    let objs = render_strict(&kubectl, "examples/device-plugin");
    // The Pod and the ConfigMap with its train.py (tests/examples_run.rs checks the script).
    assert_eq!(objs.len(), 2);
    assert_eq!(objects(&objs, "ConfigMap").len(), 1);
    let pod: Pod = serde_json::from_value(objects(&objs, "Pod")[0].clone()).unwrap();
    let spec = pod.spec.as_ref().unwrap();
    assert_eq!(spec.runtime_class_name.as_deref(), Some("gpuslice"));
    let limits = spec.containers[0]
        .resources
        .as_ref()
        .unwrap()
        .limits
        .clone()
        .unwrap();
    let units: i32 = limits[RESOURCE].0.parse().unwrap();
    assert_eq!(units, 16);
    let annotations: BTreeMap<String, String> = pod.metadata.annotations.clone().unwrap();
    assert!(
        !annotations.contains_key("gpuslice.io/memory"),
        "the limit sets the memory"
    );

    // kubelet's device manager on the H100-class + A100-class node with the overlay's unit:
    // the preferred allocation, then Allocate, by the plugin's own code.
    let gpus: Vec<Gpu> = [
        ("NVIDIA H100 80GB HBM3", 80 * GI),
        ("NVIDIA A100-SXM4-40GB", 40 * GI),
    ]
    .iter()
    .enumerate()
    .map(|(i, (name, mem))| Gpu {
        info: DeviceInfo {
            index: i as u32,
            uuid: format!("GPU-{i}0000000-aaaa-bbbb-cccc-dddddddddddd"),
            name: (*name).into(),
            memory_total: *mem,
        },
        minor: i as u32,
        architecture: None,
        compute_capability: None,
        driver_version: None,
    })
    .collect();
    let policy = UnitPolicy {
        unit: GI,
        policy: Policy::default(),
        publish: PublishPolicy::default(),
    };
    let node: Vec<_> = gpus.iter().map(|g| units_of(&policy, g)).collect();
    let available: Vec<String> = node
        .iter()
        .flat_map(|g| (0..g.units).map(|n| format!("{}::{n}", g.uuid)))
        .collect();
    let ids = place::preferred(&node, GI, &available, &[], units).unwrap();
    let a = place::allocate(&node, GI, &ids).unwrap();
    // The emptier fit is left alone: 16 go to the A100 (36 → 20 units), the fuller one.
    assert_eq!(a.uuid, gpus[1].info.uuid);
    let env: Vec<(String, String)> = a.envs().into_iter().collect();
    // What the runtime reads at container creation: the Pod's annotations and that env.
    let Selection::Slice(req, _) = select(&annotations, &env).unwrap() else {
        panic!("no slice")
    };
    assert_eq!(req.memory, Some(MemoryRequest::Bytes(16 * GI)));
    assert_eq!(req.compute, Some(40));
    assert_eq!(req.priority, Priority::High);
    assert!(
        matches!(&req.devices, DeviceSelector::List(l) if l.len() == 1),
        "{:?}",
        req.devices
    );
    // The same Pod with a disagreeing memory annotation is refused.
    let mut bad = annotations.clone();
    bad.insert("gpuslice.io/memory".into(), "8Gi".into());
    let e = select(&bad, &env).unwrap_err().to_string();
    assert!(e.contains("disagrees with the allocation"), "{e}");
}
