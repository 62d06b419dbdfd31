//! No distribution's library directory in the manifests (issue 35): every hostPath of every
//! rendering is one that exists on Debian/Ubuntu, RHEL/AL2023 and COS alike, and the containers
//! that load NVML find it through the node's loader cache under the node's `/`
//! (`GPUSLICE_DRIVER_ROOT`, `gpuslice_cdi::driver_root`), never through a fixed directory.

use gpuslice_deploy_tests::{
    host_mounts, kubectl_or_skip, named, objects, render_strict, s, AGENT_DIRS,
};

/// Whether `path` is a library directory only some distributions have (Debian's multiarch
/// `lib/<triplet>`, RHEL's `lib64`, COS's driver directory) or lies under one.
fn distribution_specific(path: &str) -> bool {
    let p = path.trim_end_matches('/');
    [
        "/lib",
        "/lib64",
        "/usr/lib",
        "/usr/lib64",
        "/usr/lib32",
        "/home/kubernetes",
    ]
    .iter()
    .any(|d| p == *d || p.starts_with(&format!("{d}/")))
        || p.contains("-linux-gnu")
}

#[test]
fn library_directories_of_each_distribution_are_recognised() {
    for p in [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu/",
        "/usr/lib64",
        "/lib64",
        "/home/kubernetes/bin/nvidia/lib64",
        "/usr/local/nvidia/lib64-linux-gnu",
    ] {
        assert!(distribution_specific(p), "{p}");
    }
    for p in [
        "/",
        "/run/gpuslice",
        "/var/lib/kubelet/plugins_registry",
        "/usr/local/bin",
        "/usr/library",
    ] {
        assert!(!distribution_specific(p), "{p}");
    }
}

#[test]
fn no_rendering_mounts_a_distribution_specific_host_path() {
    let Some(kubectl) = kubectl_or_skip("host paths") else {
        return;
    };
    for dir in AGENT_DIRS {
        let objs = render_strict(&kubectl, dir);
        let ds = objects(&objs, "DaemonSet")[0];
        let spec = &ds["spec"]["template"]["spec"];
        for v in spec["volumes"].as_array().unwrap() {
            if let Some(p) = v["hostPath"]["path"].as_str() {
                assert!(
                    !distribution_specific(p),
                    "{dir}: volume {} is {p}",
                    v["name"]
                );
            }
        }
        for c in spec["containers"].as_array().unwrap() {
            let name = s(&c["name"]);
            let env = c["env"].as_array().cloned().unwrap_or_default();
            assert!(
                !env.iter().any(|e| e["name"] == "GPUSLICE_NVML_LIBRARY"),
                "{dir}: {name} names NVML's path"
            );
            let Some(root) = env.iter().find(|e| e["name"] == "GPUSLICE_DRIVER_ROOT") else {
                continue;
            };
            // The driver root is the node's / mounted there, read-only, seeing later mounts.
            let root = s(&root["value"]);
            let host = host_mounts(spec, c);
            assert_eq!(host.get("/"), Some(&(root, true)), "{dir}: {name}");
            let m = c["volumeMounts"]
                .as_array()
                .unwrap()
                .iter()
                .find(|m| m["mountPath"] == root)
                .unwrap();
            assert_eq!(m["mountPropagation"], "HostToContainer", "{dir}: {name}");
            assert_eq!(
                named(&spec["volumes"], s(&m["name"]))["hostPath"]["type"],
                "Directory",
                "{dir}: {name}"
            );
        }
        // Every container that loads NVML from the node gets it this way; the nvidia-operator
        // overlay gets it from NVIDIA's runtime instead.
        let wants: Vec<&str> = match *dir {
            "overlays/nvidia-operator" => vec![],
            "overlays/dra" => vec!["arbiter", "kubelet-plugin"],
            "overlays/device-plugin" => vec!["arbiter", "device-plugin"],
            _ => vec!["arbiter"],
        };
        for name in ["arbiter", "kubelet-plugin", "device-plugin"] {
            let Some(c) = spec["containers"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["name"] == name)
            else {
                continue;
            };
            let has = c["env"]
                .as_array()
                .is_some_and(|e| e.iter().any(|e| e["name"] == "GPUSLICE_DRIVER_ROOT"));
            assert_eq!(has, wants.contains(&name), "{dir}: {name}");
        }
    }
}
