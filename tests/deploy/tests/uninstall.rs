//! `packaging/kubernetes/overlays/uninstall` rendered: strictly valid, its ConfigMap carries
//! `uninstall.sh` as it is in the tree (the script itself is run on a scratch root by the e2e
//! suite, `tests/e2e/tests/uninstall.rs`), the init container runs it with containerd's config
//! directory at its own path and the node's `/` at `/host` (`GPUSLICE_HOST_ROOT`), on the same
//! nodes as the agent, and every image is the one placeholder a site overlay sets.

use gpuslice_deploy_tests::{
    host_mounts, kubectl_or_skip, kubernetes_dir, named, objects, render_strict, s, unset_images,
    IMAGE_PLACEHOLDER,
};

#[test]
fn the_uninstall_overlay_runs_the_script_on_every_agent_node() {
    let Some(kubectl) = kubectl_or_skip("uninstall overlay") else {
        return;
    };
    let objs = render_strict(&kubectl, "overlays/uninstall");
    let kinds: Vec<&str> = objs.iter().map(|o| s(&o["kind"])).collect();
    assert_eq!(kinds, ["Namespace", "ConfigMap", "DaemonSet"], "{objs:#?}");

    let cm = objects(&objs, "ConfigMap")[0];
    let script =
        std::fs::read_to_string(kubernetes_dir().join("overlays/uninstall/uninstall.sh")).unwrap();
    assert_eq!(s(&cm["data"]["uninstall.sh"]), script);

    let ds = objects(&objs, "DaemonSet")[0];
    let spec = &ds["spec"]["template"]["spec"];
    let init = named(&spec["initContainers"], "uninstall");
    assert_eq!(
        init["command"],
        serde_json::json!(["/bin/sh", "/etc/gpuslice-uninstall/uninstall.sh"])
    );
    assert_eq!(
        s(&named(&init["env"], "GPUSLICE_HOST_ROOT")["value"]),
        "/host"
    );
    let mounts = host_mounts(spec, init);
    assert_eq!(
        mounts.get("/etc/containerd"),
        Some(&("/etc/containerd", false))
    );
    assert_eq!(mounts.get("/"), Some(&("/host", false)));
    assert_eq!(
        spec["hostPID"], true,
        "the containerd restart enters pid 1's namespace"
    );
    assert_eq!(init["securityContext"]["privileged"], true);

    let agent = render_strict(&kubectl, "base");
    let agent_ds = objects(&agent, "DaemonSet")[0];
    let agent_spec = &agent_ds["spec"]["template"]["spec"];
    assert_eq!(spec["nodeSelector"], agent_spec["nodeSelector"]);
    assert_eq!(spec["tolerations"], agent_spec["tolerations"]);
    assert_eq!(
        unset_images(&objs).len(),
        2,
        "both containers: {IMAGE_PLACEHOLDER}"
    );
    assert_eq!(s(&ds["metadata"]["namespace"]), "gpuslice-system");
}
