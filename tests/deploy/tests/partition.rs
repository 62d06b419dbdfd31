//! One GPU, one owner (docs/nvidia-toolkit.md): in every rendering of the agent, the DaemonSet
//! requires `nvidia.com/gpu.deploy.device-plugin NotIn ["true"]` — never on a node where the
//! GPU Operator runs NVIDIA's device plugin — as its only node-affinity term, beside the
//! `nvidia.com/gpu.present` node selector.

use gpuslice_deploy_tests::{kubectl_or_skip, objects, render_strict, s, AGENT_DIRS};
use serde_json::json;

#[test]
fn the_agent_never_lands_where_nvidias_device_plugin_runs() {
    let Some(kubectl) = kubectl_or_skip("partition") else {
        return;
    };
    for dir in AGENT_DIRS {
        let objs = render_strict(&kubectl, dir);
        let ds = objects(&objs, "DaemonSet");
        assert_eq!(ds.len(), 1, "{dir}");
        let spec = &ds[0]["spec"]["template"]["spec"];
        let terms = &spec["affinity"]["nodeAffinity"]
            ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"];
        assert_eq!(
            *terms,
            json!([{"matchExpressions": [{"key": "nvidia.com/gpu.deploy.device-plugin",
                "operator": "NotIn", "values": ["true"]}]}]),
            "{dir}"
        );
        assert_eq!(
            s(&spec["nodeSelector"]["nvidia.com/gpu.present"]),
            "true",
            "{dir}"
        );
    }
}
