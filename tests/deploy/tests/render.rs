//! `packaging/kubernetes` rendered offline with `kubectl kustomize` (Debian sid's kubectl, from
//! `scripts/install-engines.sh`): every object of the base, of each overlay and of the examples
//! is strictly checked against the Kubernetes 1.36 API types, then the deployment's own rules:
//! RuntimeClass, DaemonSet placement and wiring, probes, resources, the privileges each
//! container may have (and docs/kubernetes.md naming them and every hostPath), the node
//! configuration parsed by gpuslice's own parser, and the example Pods' requests parsed by the
//! runtime's own selection code.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use gpuslice_api::{Config, MemoryRequest, Priority};
use gpuslice_deploy_tests::{
    kubectl_or_skip, kubernetes_dir, objects, render, render_site, render_strict, repo_root, s,
    strs, write_site_dir, IMAGE_PLACEHOLDER,
};
use gpuslice_oci::select::{select, Selection};
use serde_json::Value;

const GI: u64 = 1 << 30;

/// What one rendering must look like.
struct Expect {
    dir: &'static str,
    style: &'static str,
    /// Containers allowed (and expected) to be privileged.
    privileged: &'static [&'static str],
    /// Last path component of `runtime.low_level`.
    low_level: &'static str,
    inject_devices: bool,
    runtime_class: Option<&'static str>,
}

const BASE: Expect = Expect {
    dir: "base",
    style: "binary-name",
    privileged: &["cdi", "arbiter"],
    low_level: "runc",
    inject_devices: true,
    runtime_class: None,
};

/// Capabilities each container may add (docs/kubernetes.md, "Privileges").
const ALLOWED_CAPS: &[(&str, &[&str])] = &[
    ("install", &["SYS_ADMIN", "SYS_CHROOT", "SYS_PTRACE"]),
    ("cdi", &["SYS_ADMIN", "SYS_CHROOT", "SYS_PTRACE"]),
    ("arbiter", &["SYS_PTRACE", "KILL"]),
];

fn docs() -> String {
    std::fs::read_to_string(repo_root().join("docs/kubernetes.md"))
        .expect("docs/kubernetes.md exists")
}

fn named<'a>(list: &'a Value, name: &str) -> Option<&'a Value> {
    list.as_array()?.iter().find(|c| c["name"] == name)
}

fn env_of(c: &Value) -> BTreeMap<String, String> {
    c["env"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| (s(&e["name"]).to_string(), s(&e["value"]).to_string()))
                .collect()
        })
        .unwrap_or_default()
}

fn check_rendering(e: &Expect) {
    let Some(kubectl) = kubectl_or_skip(e.dir) else {
        return;
    };
    let objs = render_strict(&kubectl, e.dir);
    let dir = e.dir;
    let kinds: BTreeSet<&str> = objs.iter().map(|o| s(&o["kind"])).collect();
    assert_eq!(
        kinds,
        BTreeSet::from([
            "ConfigMap",
            "DaemonSet",
            "Namespace",
            "RuntimeClass",
            "ServiceAccount"
        ]),
        "{dir}"
    );

    // Namespace: everything namespaced lives in gpuslice-system.
    for o in &objs {
        match s(&o["kind"]) {
            "Namespace" => assert_eq!(o["metadata"]["name"], "gpuslice-system", "{dir}"),
            "RuntimeClass" => assert!(o["metadata"]["namespace"].is_null(), "{dir}"),
            k => assert_eq!(o["metadata"]["namespace"], "gpuslice-system", "{dir}: {k}"),
        }
    }

    // RuntimeClass.
    let rcs = objects(&objs, "RuntimeClass");
    assert_eq!(rcs.len(), 1, "{dir}");
    let rc = rcs[0];
    assert_eq!(rc["metadata"]["name"], "gpuslice", "{dir}");
    assert_eq!(rc["handler"], "gpuslice", "{dir}");

    // DaemonSet placement.
    let dss = objects(&objs, "DaemonSet");
    assert_eq!(dss.len(), 1, "{dir}");
    let ds = dss[0];
    let tpl = &ds["spec"]["template"];
    let spec = &tpl["spec"];
    let sel = ds["spec"]["selector"]["matchLabels"].as_object().unwrap();
    assert!(!sel.is_empty(), "{dir}: empty selector");
    for (k, v) in sel {
        assert_eq!(&tpl["metadata"]["labels"][k], v, "{dir}: selector {k}");
    }
    assert_eq!(
        spec["nodeSelector"]["nvidia.com/gpu.present"], "true",
        "{dir}"
    );
    let gpu_taint = spec["tolerations"].as_array().unwrap().iter().any(|t| {
        t["key"] == "nvidia.com/gpu" && t["effect"] == "NoSchedule" && t["operator"] == "Exists"
    });
    assert!(
        gpu_taint,
        "{dir}: no toleration of the nvidia.com/gpu taint"
    );
    // Pods of the class go where the agent runs.
    assert_eq!(
        rc["scheduling"]["nodeSelector"]["nvidia.com/gpu.present"], "true",
        "{dir}"
    );
    assert_eq!(
        rc["scheduling"]["tolerations"], spec["tolerations"],
        "{dir}: RuntimeClass and DaemonSet tolerate different taints"
    );
    assert_eq!(spec["runtimeClassName"].as_str(), e.runtime_class, "{dir}");

    // Host namespaces: pid only.
    assert_eq!(spec["hostPID"], true, "{dir}");
    assert!(
        spec["hostNetwork"].is_null() || spec["hostNetwork"] == false,
        "{dir}"
    );
    assert!(
        spec["hostIPC"].is_null() || spec["hostIPC"] == false,
        "{dir}"
    );

    // ServiceAccount: exists, no API token.
    let sa_name = s(&spec["serviceAccountName"]);
    let sa = objects(&objs, "ServiceAccount")
        .into_iter()
        .find(|o| o["metadata"]["name"] == sa_name)
        .unwrap_or_else(|| panic!("{dir}: ServiceAccount {sa_name} not rendered"));
    assert_eq!(sa["automountServiceAccountToken"], false, "{dir}");
    assert_eq!(spec["automountServiceAccountToken"], false, "{dir}");

    // Containers, in order.
    let inits: Vec<&str> = spec["initContainers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| s(&c["name"]))
        .collect();
    assert_eq!(inits, ["install", "cdi"], "{dir}");
    let mains: Vec<&str> = spec["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| s(&c["name"]))
        .collect();
    assert_eq!(mains, ["arbiter"], "{dir}");
    let all: Vec<&Value> = spec["initContainers"]
        .as_array()
        .unwrap()
        .iter()
        .chain(spec["containers"].as_array().unwrap())
        .collect();

    // Volumes: every mount names a volume; ConfigMaps exist; hostPaths documented.
    let volumes = spec["volumes"].as_array().unwrap();
    let vol_names: BTreeSet<&str> = volumes.iter().map(|v| s(&v["name"])).collect();
    let cm_names: BTreeSet<&str> = objects(&objs, "ConfigMap")
        .iter()
        .map(|o| s(&o["metadata"]["name"]))
        .collect();
    let doc = docs();
    for v in volumes {
        if let Some(cm) = v["configMap"]["name"].as_str() {
            assert!(cm_names.contains(cm), "{dir}: ConfigMap {cm} not rendered");
        }
        if let Some(p) = v["hostPath"]["path"].as_str() {
            assert!(
                doc.contains(&format!("`{p}`")),
                "{dir}: hostPath {p} is not listed in docs/kubernetes.md"
            );
        }
    }
    for c in &all {
        for m in c["volumeMounts"].as_array().into_iter().flatten() {
            assert!(
                vol_names.contains(s(&m["name"])),
                "{dir}: {} mounts unknown volume {}",
                c["name"],
                m["name"]
            );
        }
    }

    // Images, resources, privileges.
    for c in &all {
        let name = s(&c["name"]);
        // The placeholder, untagged: the site overlay's one `images:` entry sets it all.
        assert_eq!(
            s(&c["image"]),
            IMAGE_PLACEHOLDER,
            "{dir}: {name} image {}",
            c["image"]
        );
        let res = &c["resources"];
        for r in ["cpu", "memory"] {
            assert!(res["requests"][r].is_string(), "{dir}: {name} requests.{r}");
        }
        assert!(
            res["limits"]["memory"].is_string(),
            "{dir}: {name} limits.memory"
        );
        let sc = &c["securityContext"];
        let privileged = sc["privileged"] == true;
        assert_eq!(
            privileged,
            e.privileged.contains(&name),
            "{dir}: {name} privileged={privileged}, expected only {:?}",
            e.privileged
        );
        assert!(
            doc.contains(&format!("`{name}`")),
            "{dir}: container {name} is not described in docs/kubernetes.md"
        );
        if !privileged {
            assert!(
                strs(&sc["capabilities"]["drop"]).contains(&"ALL"),
                "{dir}: {name} does not drop ALL capabilities"
            );
            let allowed = ALLOWED_CAPS
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, c)| *c)
                .unwrap_or(&[]);
            for cap in strs(&sc["capabilities"]["add"]) {
                assert!(allowed.contains(&cap), "{dir}: {name} adds {cap}");
                assert!(
                    doc.contains(&format!("CAP_{cap}")),
                    "{dir}: CAP_{cap} not explained in docs/kubernetes.md"
                );
            }
            // The arbiter without `privileged` gets only what it adds, and keeps what it needs:
            // reclaim's ptrace check and the backstop's default `kill` action.
            if name == "arbiter" {
                let added = strs(&sc["capabilities"]["add"]);
                for need in ["SYS_PTRACE", "KILL"] {
                    assert!(added.contains(&need), "{dir}: arbiter does not add {need}");
                }
            }
        }
    }

    // The installer.
    let install = named(&spec["initContainers"], "install").unwrap();
    let ienv = env_of(install);
    assert_eq!(ienv["GPUSLICE_CONTAINERD_STYLE"], e.style, "{dir}");
    if e.style == "shim" {
        let link = &ienv["GPUSLICE_SHIM_LINK_DIR"];
        assert!(
            strs(&Value::Array(
                install["volumeMounts"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|m| m["mountPath"].clone())
                    .collect()
            ))
            .contains(&link.as_str()),
            "{dir}: GPUSLICE_SHIM_LINK_DIR {link} is not a mount"
        );
    }
    let script_cm = objects(&objs, "ConfigMap")
        .into_iter()
        .find(|o| s(&o["metadata"]["name"]).starts_with("gpuslice-install"))
        .expect("installer ConfigMap");
    let script = s(&script_cm["data"]["install.sh"]);
    assert_eq!(
        script,
        std::fs::read_to_string(kubernetes_dir().join("base/install.sh")).unwrap(),
        "{dir}"
    );
    assert!(strs(&install["command"]).contains(&"/etc/gpuslice-install/install.sh"));

    // CDI generation in the host's mount namespace.
    let cdi = named(&spec["initContainers"], "cdi").unwrap();
    let cmd = strs(&cdi["command"]);
    assert_eq!(
        &cmd[..5],
        ["nsenter", "--target", "1", "--mount", "--"],
        "{dir}"
    );
    assert_eq!(
        &cmd[5..],
        [
            "/opt/gpuslice/bin/gpuslice",
            "cdi",
            "generate",
            "--output",
            "/var/run/cdi/gpuslice.yaml"
        ],
        "{dir}"
    );

    // The node configuration, by gpuslice's own parser.
    let cfg_cm = objects(&objs, "ConfigMap")
        .into_iter()
        .find(|o| s(&o["metadata"]["name"]).starts_with("gpuslice-config"))
        .expect("config ConfigMap");
    let cfg = Config::from_toml_str(s(&cfg_cm["data"]["config.toml"]), Path::new("config.toml"))
        .unwrap_or_else(|err| panic!("{dir}: {err}"));
    assert_eq!(cfg.state_dir, PathBuf::from("/run/gpuslice"), "{dir}");
    assert_eq!(
        cfg.runtime.low_level.file_name().unwrap(),
        e.low_level,
        "{dir}"
    );
    assert_eq!(cfg.runtime.inject_devices, e.inject_devices, "{dir}");

    // The arbiter: probes, port, state and cgroup mounts, no CPU limit.
    let arb = named(&spec["containers"], "arbiter").unwrap();
    assert_eq!(
        strs(&arb["livenessProbe"]["exec"]["command"]),
        ["/usr/bin/gpuslice", "status", "--json"],
        "{dir}"
    );
    let ready = &arb["readinessProbe"]["httpGet"];
    assert_eq!(ready["path"], "/healthz", "{dir}");
    let port = named(&arb["ports"], s(&ready["port"]))
        .unwrap_or_else(|| panic!("{dir}: readiness port {} not declared", ready["port"]));
    assert!(cfg.metrics.enabled, "{dir}");
    assert_eq!(
        port["containerPort"],
        cfg.metrics.listen.port(),
        "{dir}: port differs from [metrics] listen"
    );
    assert!(
        !cfg.metrics.listen.ip().is_loopback(),
        "{dir}: a loopback metrics address is unreachable for the readiness probe"
    );
    assert!(arb["resources"]["limits"]["cpu"].is_null(), "{dir}");
    let mounts: BTreeMap<&str, &Value> = arb["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (s(&m["mountPath"]), m))
        .collect();
    let host_path = |mount: &str| {
        let m = mounts
            .get(mount)
            .unwrap_or_else(|| panic!("{dir}: arbiter has no {mount}"));
        let v = volumes.iter().find(|v| v["name"] == m["name"]).unwrap();
        s(&v["hostPath"]["path"]).to_string()
    };
    assert_eq!(host_path("/run/gpuslice"), "/run/gpuslice", "{dir}");
    assert_eq!(host_path("/sys/fs/cgroup"), "/sys/fs/cgroup", "{dir}");
    assert_eq!(mounts["/sys/fs/cgroup"]["readOnly"], true, "{dir}");
}

#[test]
fn base_renders_and_follows_the_rules() {
    check_rendering(&BASE);
}

#[test]
fn containerd_overlay_renders_and_follows_the_rules() {
    check_rendering(&Expect {
        dir: "overlays/containerd",
        ..BASE
    });
}

#[test]
fn containerd_shim_overlay_renders_and_follows_the_rules() {
    check_rendering(&Expect {
        dir: "overlays/containerd-shim",
        style: "shim",
        ..BASE
    });
}

#[test]
fn k3s_overlay_renders_and_configures_k3s_own_containerd() {
    check_rendering(&Expect {
        dir: "overlays/k3s",
        ..BASE
    });
    let Some(kubectl) = kubectl_or_skip("k3s overlay") else {
        return;
    };
    let objs = render_strict(&kubectl, "overlays/k3s");
    let spec = &objects(&objs, "DaemonSet")[0]["spec"]["template"]["spec"];
    let install = named(&spec["initContainers"], "install").unwrap();
    let env = env_of(install);
    let dir = "/var/lib/rancher/k3s/agent/etc/containerd";
    assert_eq!(
        env["GPUSLICE_CONTAINERD_CONFIG"],
        format!("{dir}/config.toml")
    );
    assert_eq!(
        env["GPUSLICE_CONTAINERD_TEMPLATE"],
        format!("{dir}/config.toml.tmpl")
    );
    assert_eq!(env["GPUSLICE_CONTAINERD_UNIT"], "k3s-agent");
    // k3s's directory at the same path, and not the /etc/containerd k3s does not read.
    let host = gpuslice_deploy_tests::host_mounts(spec, install);
    assert_eq!(host.get(dir), Some(&(dir, false)));
    assert!(!host.contains_key("/etc/containerd"), "{host:?}");
    assert!(named(&spec["volumes"], "host-etc-containerd").is_none());
    // The component works for the scheduler-aware modes too, from a site overlay.
    let site = serde_json::json!({
        "resources": ["../gpuslice/packaging/kubernetes/overlays/dra"],
        "components": ["../gpuslice/packaging/kubernetes/components/k3s"],
    });
    let objs = render_site(&kubectl, &write_site_dir(&site, "dra-k3s"));
    let spec = &objects(&objs, "DaemonSet")[0]["spec"]["template"]["spec"];
    assert!(named(&spec["containers"], "kubelet-plugin").is_some());
    let install = named(&spec["initContainers"], "install").unwrap();
    assert_eq!(env_of(install)["GPUSLICE_CONTAINERD_UNIT"], "k3s-agent");
    let host = gpuslice_deploy_tests::host_mounts(spec, install);
    assert!(
        host.contains_key(dir) && !host.contains_key("/etc/containerd"),
        "{host:?}"
    );
}

#[test]
fn nvidia_operator_overlay_renders_and_follows_the_rules() {
    check_rendering(&Expect {
        dir: "overlays/nvidia-operator",
        privileged: &[],
        low_level: "nvidia-container-runtime",
        inject_devices: false,
        runtime_class: Some("nvidia"),
        ..BASE
    });
}

#[test]
fn the_nvidia_overlay_removes_the_host_library_path() {
    let Some(kubectl) = kubectl_or_skip("nvidia overlay") else {
        return;
    };
    let objs = render_strict(&kubectl, "overlays/nvidia-operator");
    let ds = objects(&objs, "DaemonSet")[0];
    let spec = &ds["spec"]["template"]["spec"];
    assert!(named(&spec["volumes"], "driver-root").is_none());
    let arb = named(&spec["containers"], "arbiter").unwrap();
    let env = env_of(arb);
    assert!(!env.contains_key("GPUSLICE_DRIVER_ROOT"));
    assert!(!env.contains_key("GPUSLICE_NVML_LIBRARY"));
    assert_eq!(env["NVIDIA_VISIBLE_DEVICES"], "all");
    assert_eq!(arb["securityContext"]["allowPrivilegeEscalation"], false);
}

/// Selection of one container of an example Pod, as containerd presents it to gpuslice-runtime.
fn selection(pod: &Value, container: &Value) -> Selection {
    let mut ann: BTreeMap<String, String> = pod["metadata"]["annotations"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), s(v).to_string()))
                .collect()
        })
        .unwrap_or_default();
    ann.insert(
        "io.kubernetes.cri.container-name".into(),
        s(&container["name"]).into(),
    );
    ann.insert(
        "io.kubernetes.cri.container-type".into(),
        "container".into(),
    );
    let env: Vec<(String, String)> = env_of(container).into_iter().collect();
    select(&ann, &env).unwrap_or_else(|e| panic!("{}: {e}", pod["metadata"]["name"]))
}

#[test]
fn examples_share_one_gpu_with_valid_requests() {
    let Some(kubectl) = kubectl_or_skip("examples") else {
        return;
    };
    let objs = render_strict(&kubectl, "examples");
    let pods = objects(&objs, "Pod");
    assert_eq!(pods.len(), 2);
    let mut slices = BTreeMap::new();
    for pod in &pods {
        let name = s(&pod["metadata"]["name"]);
        assert_eq!(pod["spec"]["runtimeClassName"], "gpuslice", "{name}");
        for k in pod["metadata"]["annotations"].as_object().unwrap().keys() {
            if k.starts_with("gpuslice.io/") {
                assert!(
                    gpuslice_api::request::keys::ALL.contains(&k.as_str())
                        || k == gpuslice_oci::select::CONTAINERS,
                    "{name}: unknown key {k}"
                );
            }
        }
        for c in pod["spec"]["containers"].as_array().unwrap() {
            let cname = format!("{name}/{}", s(&c["name"]));
            match selection(pod, c) {
                Selection::Slice(r, _) => {
                    r.validate().unwrap_or_else(|e| panic!("{cname}: {e}"));
                    slices.insert(cname, Some(r));
                }
                Selection::Nothing => {
                    slices.insert(cname, None);
                }
                Selection::Sandbox => panic!("{cname}: taken for a sandbox"),
            }
        }
    }
    let names: Vec<&str> = slices.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "inference/log-shipper",
            "inference/server",
            "trainer/trainer"
        ]
    );
    // The sidecar is not listed in gpuslice.io/containers: no slice.
    assert_eq!(slices["inference/log-shipper"], None);
    let server = slices["inference/server"].as_ref().expect("server slice");
    assert_eq!(server.memory, Some(MemoryRequest::Bytes(16 * GI)));
    assert_eq!(server.compute, Some(40));
    assert_eq!(server.priority, Priority::High);
    assert_eq!(server.model.as_deref(), Some("H100"));
    let trainer = slices["trainer/trainer"].as_ref().expect("trainer slice");
    assert_eq!(trainer.memory, Some(MemoryRequest::Bytes(40 * GI)));
    assert_eq!(trainer.compute, Some(50));
    assert_eq!(trainer.priority, Priority::Normal);
    // They fit one 80 GB H100 together: guarantees and caps add up.
    let compute: u32 = [server, trainer]
        .iter()
        .map(|r| u32::from(r.compute.unwrap()))
        .sum();
    assert!(compute <= 100, "{compute} % guaranteed");
    let memory: u64 = [server, trainer]
        .iter()
        .map(|r| match r.memory {
            Some(MemoryRequest::Bytes(b)) => b + (512 << 20), // plus the context reserve
            ref other => panic!("absolute caps expected, got {other:?}"),
        })
        .sum();
    assert!(
        memory <= 80 * GI,
        "{memory} bytes of caps on an 80 GiB device"
    );
    // The trainer is placed beside the inference server.
    let trainer_pod = pods
        .iter()
        .find(|p| p["metadata"]["name"] == "trainer")
        .unwrap();
    let term = &trainer_pod["spec"]["affinity"]["podAffinity"]
        ["requiredDuringSchedulingIgnoredDuringExecution"][0];
    assert_eq!(term["labelSelector"]["matchLabels"]["app"], "inference");
    assert_eq!(term["topologyKey"], "kubernetes.io/hostname");
    let inference = pods
        .iter()
        .find(|p| p["metadata"]["name"] == "inference")
        .unwrap();
    assert_eq!(inference["metadata"]["labels"]["app"], "inference");
}

#[test]
fn the_installer_scripts_are_valid_sh() {
    for script in ["base/install.sh", "overlays/uninstall/uninstall.sh"] {
        let out = std::process::Command::new("sh")
            .arg("-n")
            .arg(kubernetes_dir().join(script))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{script}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn a_broken_kustomization_fails_with_kubectls_message() {
    let Some(kubectl) = kubectl_or_skip("broken kustomization") else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("gs-deploy-broken-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("kustomization.yaml"),
        "resources:\n  - missing.yaml\n",
    )
    .unwrap();
    let err = render(&kubectl, &dir).unwrap_err().to_string();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(err.starts_with("kubectl kustomize "), "{err}");
    assert!(err.contains("missing.yaml"), "{err}");
}
