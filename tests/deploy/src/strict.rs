//! Strict checking of rendered objects against the Kubernetes API types of `k8s-openapi`
//! (feature `v1_36`, the kubectl the suite installs).
//!
//! `k8s-openapi`'s types ignore fields they do not know, like the API server's non-strict
//! decoding. To catch a misspelt or misplaced field, each object is deserialised into its typed
//! form, serialised back, and the two JSON values are compared: a field the type does not have
//! disappears in the round trip, a value of the wrong shape fails deserialisation, and either is
//! reported with its JSON path.

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Service, ServiceAccount};
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::api::resource::v1::{
    DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

/// Why an object does not match its API type.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StrictError {
    /// No typed check is known for this kind (add it here when the deployment gains one).
    #[error("{api_version} {kind} {name}: kind not known to the strict check")]
    UnknownKind {
        /// `apiVersion`.
        api_version: String,
        /// `kind`.
        kind: String,
        /// `metadata.name`.
        name: String,
    },
    /// The value does not deserialise into the type (wrong shape, missing required field).
    #[error("{kind} {name}: does not match the API type: {message}")]
    Shape {
        /// `kind`.
        kind: String,
        /// `metadata.name`.
        name: String,
        /// serde's message.
        message: String,
    },
    /// Fields the type does not have (dropped in the round trip) or values it changed.
    #[error("{kind} {name}: {}", .problems.join("; "))]
    Fields {
        /// `kind`.
        kind: String,
        /// `metadata.name`.
        name: String,
        /// One line per path.
        problems: Vec<String>,
    },
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or("?").to_string()
}

/// Checks one object; returns its typed round trip's JSON on success.
pub fn check(obj: &Value) -> Result<Value, StrictError> {
    let api_version = text(&obj["apiVersion"]);
    let kind = text(&obj["kind"]);
    let name = text(&obj["metadata"]["name"]);
    let back = match (api_version.as_str(), kind.as_str()) {
        ("v1", "Namespace") => round_trip::<Namespace>(obj),
        ("v1", "ServiceAccount") => round_trip::<ServiceAccount>(obj),
        ("v1", "ConfigMap") => round_trip::<ConfigMap>(obj),
        ("v1", "Pod") => round_trip::<Pod>(obj),
        ("v1", "Service") => round_trip::<Service>(obj),
        ("monitoring.coreos.com/v1", "ServiceMonitor") => {
            round_trip::<crate::servicemonitor::ServiceMonitor>(obj)
        }
        ("apps/v1", "DaemonSet") => round_trip::<DaemonSet>(obj),
        ("node.k8s.io/v1", "RuntimeClass") => round_trip::<RuntimeClass>(obj),
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => round_trip::<ClusterRole>(obj),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
            round_trip::<ClusterRoleBinding>(obj)
        }
        ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy") => {
            round_trip::<ValidatingAdmissionPolicy>(obj)
        }
        ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding") => {
            round_trip::<ValidatingAdmissionPolicyBinding>(obj)
        }
        ("resource.k8s.io/v1", "DeviceClass") => round_trip::<DeviceClass>(obj),
        ("resource.k8s.io/v1", "ResourceClaim") => round_trip::<ResourceClaim>(obj),
        ("resource.k8s.io/v1", "ResourceClaimTemplate") => round_trip::<ResourceClaimTemplate>(obj),
        ("resource.k8s.io/v1", "ResourceSlice") => round_trip::<ResourceSlice>(obj),
        _ => {
            return Err(StrictError::UnknownKind {
                api_version,
                kind,
                name,
            })
        }
    }
    .map_err(|message| StrictError::Shape {
        kind: kind.clone(),
        name: name.clone(),
        message,
    })?;
    let mut problems = Vec::new();
    diff("", obj, &back, &mut problems);
    if problems.is_empty() {
        Ok(back)
    } else {
        Err(StrictError::Fields {
            kind,
            name,
            problems,
        })
    }
}

fn round_trip<T: DeserializeOwned + Serialize>(obj: &Value) -> Result<Value, String> {
    let typed: T = serde_json::from_value(obj.clone()).map_err(|e| e.to_string())?;
    serde_json::to_value(&typed).map_err(|e| e.to_string())
}

/// Records every path where `orig` and `back` differ.
fn diff(path: &str, orig: &Value, back: &Value, out: &mut Vec<String>) {
    match (orig, back) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, va) in a {
                let p = format!("{path}.{k}");
                match b.get(k) {
                    None => out.push(format!("{p}: unknown field (dropped by the API type)")),
                    Some(vb) => diff(&p, va, vb, out),
                }
            }
            for k in b.keys().filter(|k| !a.contains_key(*k)) {
                out.push(format!("{path}.{k}: added by the API type"));
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (va, vb)) in a.iter().zip(b).enumerate() {
                diff(&format!("{path}[{i}]"), va, vb, out);
            }
        }
        _ if orig == back => {}
        _ => out.push(format!("{path}: {orig} became {back}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(container: Value) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "annotations": {"a": "b"}},
            "spec": {"runtimeClassName": "gpuslice", "containers": [container]}
        })
    }

    #[test]
    fn a_correct_object_passes_and_round_trips_to_itself() {
        let p = pod(json!({"name": "c", "image": "i", "resources": {"limits": {"memory": "1Gi"}}}));
        assert_eq!(check(&p).unwrap(), p);
    }

    #[test]
    fn a_misspelt_field_is_reported_with_its_path() {
        let p = pod(json!({"name": "c", "image": "i", "resource": {"limits": {}}}));
        let err = check(&p).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Pod p: .spec.containers[0].resource: unknown field (dropped by the API type)"
        );
        let mut ds = json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "d"},
            "spec": {"selector": {"matchLabels": {"a": "b"}},
                     "template": {"metadata": {"labels": {"a": "b"}},
                                  "spec": {"containers": [{"name": "c"}], "hostPid": true}}}
        });
        assert!(check(&ds)
            .unwrap_err()
            .to_string()
            .contains(".spec.template.spec.hostPid: unknown field"));
        ds["spec"]["template"]["spec"]
            .as_object_mut()
            .unwrap()
            .remove("hostPid");
        check(&ds).unwrap();
    }

    #[test]
    fn a_value_of_the_wrong_shape_or_kind_fails() {
        let p = pod(json!({"name": "c", "ports": [{"containerPort": "http"}]}));
        assert!(
            matches!(check(&p), Err(StrictError::Shape { .. })),
            "{:?}",
            check(&p)
        );
        let ep = json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "s"}});
        assert_eq!(
            check(&ep).unwrap_err().to_string(),
            "v1 Endpoints s: kind not known to the strict check"
        );
        // The ServiceMonitor CRD's constraints: a misspelt field, a bad enum, a bad duration.
        let sm = |endpoint: Value| {
            json!({"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
                   "metadata": {"name": "m"},
                   "spec": {"selector": {"matchLabels": {"a": "b"}}, "endpoints": [endpoint]}})
        };
        check(&sm(
            json!({"port": "metrics", "interval": "30s", "scheme": "http"}),
        ))
        .unwrap();
        assert!(check(&sm(json!({"port": "metrics", "intervall": "30s"})))
            .unwrap_err()
            .to_string()
            .contains(".spec.endpoints[0].intervall: unknown field"));
        for bad in [
            json!({"interval": "30"}),
            json!({"scheme": "ftp"}),
            json!({"relabelings": [{"action": "Replace"}]}),
        ] {
            assert!(
                matches!(check(&sm(bad.clone())), Err(StrictError::Shape { .. })),
                "{bad}"
            );
        }
        // A field one level too deep (RuntimeClass has no spec): dropped, and the required
        // `handler` the type then fills in with "" shows up as added.
        let rc = json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                        "metadata": {"name": "gpuslice"}, "spec": {"handler": "gpuslice"}});
        assert_eq!(
            check(&rc).unwrap_err().to_string(),
            "RuntimeClass gpuslice: .spec: unknown field (dropped by the API type); \
             .handler: added by the API type"
        );
    }
}
