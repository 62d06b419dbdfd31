//! Code generated from `proto/` by `build.rs`: the kubelet's plugin registration API
//! (`pluginregistration` v1) and the DRA node service (`v1beta1`, `v1`). Clients are generated
//! too; the tests' kubelet stand-in uses them.

#![allow(missing_docs, clippy::all, clippy::pedantic)]

/// `pluginregistration` (k8s.io/kubelet/pkg/apis/pluginregistration/v1).
pub mod registration {
    tonic::include_proto!("pluginregistration");
}

/// DRA node service `v1beta1` (kubelets 1.32–1.33).
pub mod dra_v1beta1 {
    tonic::include_proto!("k8s.io.kubelet.pkg.apis.dra.v1beta1");
}

/// DRA node service `v1` (kubelets 1.34+).
pub mod dra_v1 {
    tonic::include_proto!("k8s.io.kubelet.pkg.apis.dra.v1");
}

/// Device plugin API `v1beta1` (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1): kubelet's
/// `Registration` service and the plugin's `DevicePlugin` service.
pub mod deviceplugin {
    tonic::include_proto!("v1beta1");
}
