//! The DRA install (`packaging/kubernetes/overlays/dra`) and its example
//! (`packaging/kubernetes/examples/dra`), rendered offline with `kubectl kustomize` and strictly
//! checked against the Kubernetes 1.36 API types (no cluster ran): DeviceClass, RBAC and the
//! own-node admission policy, the kubelet-plugin container (its host paths, each documented in
//! docs/privileges.md; the only API token; `maxSurge: 0`), the node configuration
//! (`dra_only`, by gpuslice's own parser), and the example claim, allocated the way the
//! scheduler would, planned by the plugin's own code into a 16 GiB / 40 % / high slice.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use gpuslice_admission::fit::Policy;
use gpuslice_admission::inventory::DeviceInfo;
use gpuslice_api::{Config, MemoryRequest, Priority};
use gpuslice_deploy_tests::{
    doc_section, host_mounts, kubectl_or_skip, named, objects, render_strict, repo_root, s, strs,
    IMAGE_PLACEHOLDER,
};
use gpuslice_kubelet_plugin::capacity::{offer, PublishPolicy, MEMORY_STEP};
use gpuslice_kubelet_plugin::dra::claim::ClaimRef;
use gpuslice_kubelet_plugin::dra::plan;
use gpuslice_kubelet_plugin::gpu::Gpu;
use gpuslice_kubelet_plugin::quantity;
use k8s_openapi::api::resource::v1::{
    AllocationResult, DeviceAllocationConfiguration, DeviceAllocationResult,
    DeviceRequestAllocationResult, ResourceClaim, ResourceClaimStatus, ResourceClaimTemplate,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::Value;

const GI: u64 = 1 << 30;

fn one<'a>(objs: &'a [Value], kind: &str) -> &'a Value {
    let v = objects(objs, kind);
    assert_eq!(v.len(), 1, "one {kind}");
    v[0]
}

#[test]
fn dra_overlay_renders_and_follows_the_rules() {
    let Some(kubectl) = kubectl_or_skip("dra_overlay_renders_and_follows_the_rules") else {
        return;
    };
    let objs = render_strict(&kubectl, "overlays/dra");
    let kinds: BTreeSet<&str> = objs.iter().map(|o| s(&o["kind"])).collect();
    assert_eq!(
        kinds,
        BTreeSet::from([
            "ClusterRole",
            "ClusterRoleBinding",
            "ConfigMap",
            "DaemonSet",
            "DeviceClass",
            "Namespace",
            "RuntimeClass",
            "ServiceAccount",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        ])
    );

    // DeviceClass: the contract's name and selector.
    let dc = one(&objs, "DeviceClass");
    assert_eq!(dc["metadata"]["name"], "gpuslice.io");
    assert!(dc["metadata"]["namespace"].is_null());
    assert_eq!(
        dc["spec"]["selectors"][0]["cel"]["expression"],
        "device.driver == \"gpuslice.io\""
    );

    // RBAC: ResourceSlices (create/update/delete/list/watch), ResourceClaims (get) and Nodes
    // (get: the slices' owner), no more.
    let role = one(&objs, "ClusterRole");
    let mut rules: BTreeMap<String, BTreeSet<&str>> = BTreeMap::new();
    for r in role["rules"].as_array().unwrap() {
        let group = strs(&r["apiGroups"]);
        for res in strs(&r["resources"]) {
            let want: &[&str] = if res == "nodes" {
                &[""]
            } else {
                &["resource.k8s.io"]
            };
            assert_eq!(group, want, "{r}");
            rules
                .entry(res.to_string())
                .or_default()
                .extend(strs(&r["verbs"]));
        }
    }
    assert_eq!(
        rules.keys().collect::<Vec<_>>(),
        ["nodes", "resourceclaims", "resourceslices"]
    );
    assert_eq!(rules["nodes"], BTreeSet::from(["get"]));
    assert_eq!(rules["resourceclaims"], BTreeSet::from(["get"]));
    for v in ["create", "update", "delete", "list", "watch"] {
        assert!(rules["resourceslices"].contains(v), "resourceslices {v}");
    }
    assert!(
        !rules["resourceslices"].contains("patch")
            && !rules["resourceslices"].contains("deletecollection")
    );
    let ds = one(&objs, "DaemonSet");
    let spec = &ds["spec"]["template"]["spec"];
    let sa = s(&spec["serviceAccountName"]);
    let ns = s(&ds["metadata"]["namespace"]);
    let binding = one(&objs, "ClusterRoleBinding");
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    assert_eq!(binding["roleRef"]["kind"], "ClusterRole");
    let subj = &binding["subjects"][0];
    assert_eq!(
        (s(&subj["kind"]), s(&subj["name"]), s(&subj["namespace"])),
        ("ServiceAccount", sa, ns)
    );

    // Own node only: the policy matches exactly this service account, and is bound (Deny).
    let vap = one(&objs, "ValidatingAdmissionPolicy");
    let cond = s(&vap["spec"]["matchConditions"][0]["expression"]);
    assert!(
        cond.contains(&format!("\"system:serviceaccount:{ns}:{sa}\"")),
        "{cond}"
    );
    let rule = &vap["spec"]["matchConstraints"]["resourceRules"][0];
    assert_eq!(strs(&rule["resources"]), ["resourceslices"]);
    assert_eq!(strs(&rule["operations"]), ["CREATE", "UPDATE", "DELETE"]);
    let exprs: Vec<&str> = vap["spec"]["validations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| s(&v["expression"]))
        .collect();
    assert!(
        exprs.contains(&"variables.userNodeName == variables.objectNodeName"),
        "{exprs:?}"
    );
    let vapb = one(&objs, "ValidatingAdmissionPolicyBinding");
    assert_eq!(vapb["spec"]["policyName"], vap["metadata"]["name"]);
    assert_eq!(strs(&vapb["spec"]["validationActions"]), ["Deny"]);

    // The DaemonSet: one agent per node at any time, the plugin beside the arbiter.
    let ru = &ds["spec"]["updateStrategy"]["rollingUpdate"];
    assert_eq!(ru["maxSurge"], 0, "{ru}");
    assert_eq!(ru["maxUnavailable"], 1, "{ru}");
    let mains: BTreeSet<&str> = spec["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| s(&c["name"]))
        .collect();
    assert_eq!(mains, BTreeSet::from(["arbiter", "kubelet-plugin"]));
    let plugin = named(&spec["containers"], "kubelet-plugin");
    // The same image as the arbiter (the site overlay's one images: entry sets both).
    let arbiter = named(&spec["containers"], "arbiter");
    assert_eq!(
        s(&plugin["image"]),
        IMAGE_PLACEHOLDER,
        "{}",
        plugin["image"]
    );
    assert_eq!(plugin["image"], arbiter["image"]);
    let cmd = strs(&plugin["command"]);
    assert_eq!(cmd[0], "/usr/bin/gpuslice-kubelet-plugin");
    assert!(cmd.contains(&"--mode=dra"), "{cmd:?}");
    // The node spec it derives claim specs from is the one the cdi init container writes.
    let cdi = named(&spec["initContainers"], "cdi");
    let out = strs(&cdi["command"]).last().copied().unwrap();
    assert!(
        cmd.contains(&format!("--node-cdi-spec={out}").as_str()),
        "{cmd:?}"
    );
    let node_name = named(&plugin["env"], "NODE_NAME");
    assert_eq!(
        node_name["valueFrom"]["fieldRef"]["fieldPath"],
        "spec.nodeName"
    );
    assert_eq!(plugin["securityContext"]["readOnlyRootFilesystem"], true);
    assert!(plugin["resources"]["limits"]["memory"].is_string());

    // Its host paths: exactly these, at the same path inside, each with its reason in
    // docs/privileges.md.
    let volumes = spec["volumes"].as_array().unwrap();
    let volume = |name: &str| volumes.iter().find(|v| v["name"] == name).unwrap();
    let privileges = doc_section("privileges.md", "### `gpuslice-kubelet-plugin`");
    let host = host_mounts(spec, plugin);
    for p in host.keys() {
        assert!(
            privileges.contains(&format!("`{p}`")),
            "hostPath {p} of kubelet-plugin has no row in docs/privileges.md's gpuslice-kubelet-plugin section"
        );
    }
    let lib = "/";
    assert_eq!(
        host.keys().copied().collect::<Vec<_>>(),
        [
            lib,
            "/run/gpuslice",
            "/var/lib/kubelet/plugins/gpuslice.io",
            "/var/lib/kubelet/plugins_registry",
            "/var/run/cdi",
        ]
    );
    for (p, (inside, ro)) in &host {
        if *p == lib {
            assert_eq!((*inside, *ro), ("/host", true));
        } else {
            assert_eq!(inside, p, "{p} is mounted at {inside}");
        }
    }
    // The API token: the plugin's alone (the Pod mounts none).
    assert_eq!(spec["automountServiceAccountToken"], false);
    let token = "/var/run/secrets/kubernetes.io/serviceaccount";
    for c in spec["containers"]
        .as_array()
        .unwrap()
        .iter()
        .chain(spec["initContainers"].as_array().unwrap())
    {
        let has = c["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|m| m["mountPath"] == token);
        assert_eq!(
            has,
            c["name"] == "kubelet-plugin",
            "{}: token mount",
            c["name"]
        );
    }
    let projected = &volume("kube-api-access")["projected"]["sources"];
    assert!(projected[0]["serviceAccountToken"]["path"] == "token");

    // The node configuration: the arbiter admits DRA claims only.
    let cfg_cm = objects(&objs, "ConfigMap")
        .into_iter()
        .find(|o| s(&o["metadata"]["name"]).starts_with("gpuslice-config"))
        .unwrap();
    let cfg =
        Config::from_toml_str(s(&cfg_cm["data"]["config.toml"]), Path::new("config.toml")).unwrap();
    assert!(cfg.admission.dra_only);
    assert!(cmd.contains(&"--config=/etc/gpuslice/config.toml"));
    let cfg_mount = plugin["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["mountPath"] == "/etc/gpuslice")
        .unwrap();
    assert!(volume(s(&cfg_mount["name"]))["configMap"]["name"] == cfg_cm["metadata"]["name"]);
    // The base's settings otherwise.
    let base: Config = Config::from_toml_str(
        &std::fs::read_to_string(repo_root().join("packaging/kubernetes/base/config.toml"))
            .unwrap(),
        Path::new("base/config.toml"),
    )
    .unwrap();
    let mut expect = base.clone();
    expect.admission.dra_only = true;
    assert_eq!(
        cfg, expect,
        "overlays/dra/config.toml drifted from the base's"
    );
}

#[test]
fn dra_example_claim_plans_to_a_16gi_40_percent_high_priority_slice() {
    let Some(kubectl) =
        kubectl_or_skip("dra_example_claim_plans_to_a_16gi_40_percent_high_priority_slice")
    else {
        return;
    };
    let objs = render_strict(&kubectl, "examples/dra");
    let tpl_json = one(&objs, "ResourceClaimTemplate");
    let pod = one(&objs, "Pod");
    assert_eq!(pod["spec"]["runtimeClassName"], "gpuslice");
    let rc = &pod["spec"]["resourceClaims"][0];
    assert_eq!(
        rc["resourceClaimTemplateName"],
        tpl_json["metadata"]["name"]
    );
    let c = &pod["spec"]["containers"][0];
    assert_eq!(c["resources"]["claims"][0]["name"], rc["name"]);
    assert_eq!(
        pod["metadata"]["namespace"],
        tpl_json["metadata"]["namespace"]
    );

    let tpl: ResourceClaimTemplate = serde_json::from_value(tpl_json.clone()).unwrap();
    let devices = tpl.spec.spec.devices.clone().unwrap();
    let req = &devices.requests.as_ref().unwrap()[0];
    let exactly = req.exactly.as_ref().unwrap();
    assert_eq!(exactly.device_class_name, "gpuslice.io");
    let asked = exactly.capacity.as_ref().unwrap().requests.clone().unwrap();
    let memory = quantity::of(&asked["memory"]).unwrap();
    assert_eq!(memory, 16 * GI);
    assert_eq!(memory % MEMORY_STEP, 0, "not on the memory policy's step");
    assert_eq!(quantity::of(&asked["compute"]).unwrap(), 40);

    // The claim as the scheduler allocates it on an H100-class GPU of node-a: consumed = asked
    // (+ slices 1 by its policy's default), the template's config copied as FromClaim.
    let node = "node-a";
    let gpu = Gpu {
        info: DeviceInfo {
            index: 0,
            uuid: "GPU-00000000-aaaa-bbbb-cccc-dddddddddddd".into(),
            name: "NVIDIA H100 80GB HBM3".into(),
            memory_total: 80 * GI,
        },
        minor: 0,
        architecture: None,
        compute_capability: None,
        driver_version: None,
    };
    let o = offer(&Policy::default(), &PublishPolicy::default(), &gpu.info);
    let mut consumed = asked.clone();
    consumed.insert("slices".into(), Quantity("1".into()));
    let config = devices
        .config
        .unwrap()
        .into_iter()
        .map(|c| DeviceAllocationConfiguration {
            source: "FromClaim".into(),
            requests: c.requests,
            opaque: c.opaque,
        })
        .collect();
    let uid = "1a2b3c4d-0000-4000-8000-000000000001";
    let mut meta = tpl.metadata.clone();
    meta.name = Some("dra-trainer-gpu-x7k2p".into());
    meta.uid = Some(uid.into());
    let claim = ResourceClaim {
        metadata: meta,
        spec: tpl.spec.spec.clone(),
        status: Some(ResourceClaimStatus {
            allocation: Some(AllocationResult {
                devices: Some(DeviceAllocationResult {
                    results: Some(vec![DeviceRequestAllocationResult {
                        request: req.name.clone(),
                        driver: "gpuslice.io".into(),
                        pool: node.into(),
                        device: "gpu-0".into(),
                        consumed_capacity: Some(consumed),
                        share_id: Some("5e6f7a8b".into()),
                        ..Default::default()
                    }]),
                    config: Some(config),
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
    };
    let r = ClaimRef {
        namespace: "default".into(),
        name: "dra-trainer-gpu-x7k2p".into(),
        uid: uid.into(),
    };
    let p = plan::plan(&r, &claim, node, &[(gpu, o)]).unwrap();
    assert_eq!(p.slice.memory, Some(MemoryRequest::Bytes(16 * GI)));
    assert_eq!(p.slice.compute, Some(40));
    assert_eq!(p.slice.priority, Priority::High);
    assert_eq!(p.slice.compute_limit, None);
    assert_eq!(p.device, "gpu-0");
}
