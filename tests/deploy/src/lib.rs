//! Offline checks of the Kubernetes deployment (`packaging/kubernetes/`): finding the kubectl the
//! suite installs ([`kubectl`]), rendering a Kustomize directory ([`render`]), and the strict
//! check of every rendered object against the Kubernetes API types ([`strict::check`]).

pub mod servicemonitor;
pub mod strict;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// Why a rendering could not be used.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// kubectl could not be started.
    #[error("cannot run {kubectl}: {source}")]
    Spawn {
        /// The kubectl binary.
        kubectl: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// `kubectl kustomize` failed.
    #[error("kubectl kustomize {dir} failed ({status}): {stderr}")]
    Kustomize {
        /// The directory rendered.
        dir: PathBuf,
        /// Exit status.
        status: String,
        /// kubectl's message.
        stderr: String,
    },
    /// The output is not a YAML stream of objects.
    #[error("kubectl kustomize {dir}: output document {index} is not YAML: {message}")]
    Yaml {
        /// The directory rendered.
        dir: PathBuf,
        /// Document number (0-based).
        index: usize,
        /// The parser's message.
        message: String,
    },
}

/// The repository root (two levels above this crate).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `packaging/kubernetes` in the repository.
pub fn kubernetes_dir() -> PathBuf {
    repo_root().join("packaging/kubernetes")
}

/// The kubectl the `deploy` suite installs: `GPUSLICE_KUBECTL`, else the newest
/// `<prefix>/kubectl-<version>/usr/bin/kubectl` under `GPUSLICE_E2E_PREFIX` (default
/// `/opt/gpuslice-e2e`, where `scripts/install-engines.sh` unpacks Debian sid's package). The
/// machine's own `kubectl` in `PATH` is deliberately not used: it is not the one CI has.
pub fn kubectl() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("GPUSLICE_KUBECTL") {
        return Some(PathBuf::from(p));
    }
    let prefix = std::env::var_os("GPUSLICE_E2E_PREFIX")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/gpuslice-e2e"));
    let mut found: Vec<(Vec<u64>, PathBuf)> = std::fs::read_dir(&prefix)
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let ver = name.strip_prefix("kubectl-")?;
            let bin = e.path().join("usr/bin/kubectl");
            (e.path().join(".complete").exists() && bin.exists()).then(|| {
                let key = ver.split('.').map(|p| p.parse().unwrap_or(0)).collect();
                (key, bin)
            })
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin)
}

/// Whether this run is CI (`CI=true` or `CI=1`), where a missing tool is a failure.
pub fn is_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// The kubectl to use, or `None` after a loud SKIPPED banner (panics under CI, where a skip is
/// not allowed).
pub fn kubectl_or_skip(test: &str) -> Option<PathBuf> {
    if let Some(k) = kubectl() {
        return Some(k);
    }
    let msg = format!(
        "{test}: no kubectl under /opt/gpuslice-e2e/kubectl-*/usr/bin (GPUSLICE_KUBECTL unset); \
         install it with `GPUSLICE_E2E_ONLY=kubectl scripts/install-engines.sh` (root)"
    );
    if is_ci() {
        panic!("CI=true: {msg}");
    }
    eprintln!("\n**************** SKIPPED ****************\n{msg}\n*****************************************\n");
    None
}

/// Runs `kubectl kustomize DIR` and returns every rendered object as JSON.
pub fn render(kubectl: &Path, dir: &Path) -> Result<Vec<Value>, RenderError> {
    let out = Command::new(kubectl)
        .arg("kustomize")
        .arg(dir)
        .output()
        .map_err(|source| RenderError::Spawn {
            kubectl: kubectl.to_path_buf(),
            source,
        })?;
    if !out.status.success() {
        return Err(RenderError::Kustomize {
            dir: dir.to_path_buf(),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    parse_stream(&String::from_utf8_lossy(&out.stdout), dir)
}

/// Splits a YAML stream into JSON objects (empty documents skipped).
pub fn parse_stream(text: &str, origin: &Path) -> Result<Vec<Value>, RenderError> {
    let mut objects = Vec::new();
    for (index, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let v = Value::deserialize_from(doc).map_err(|message| RenderError::Yaml {
            dir: origin.to_path_buf(),
            index,
            message,
        })?;
        if !v.is_null() {
            objects.push(v);
        }
    }
    Ok(objects)
}

/// Deserialising one YAML document into a JSON value.
trait FromYamlDoc: Sized {
    fn deserialize_from(doc: serde_yaml_ng::Deserializer<'_>) -> Result<Self, String>;
}

impl FromYamlDoc for Value {
    fn deserialize_from(doc: serde_yaml_ng::Deserializer<'_>) -> Result<Value, String> {
        serde::Deserialize::deserialize(doc).map_err(|e| e.to_string())
    }
}

/// Renders `dir` (relative to `packaging/kubernetes`) and strictly checks every object;
/// panics naming the directory and every problem.
pub fn render_strict(kubectl: &Path, dir: &str) -> Vec<Value> {
    let objs = render(kubectl, &kubernetes_dir().join(dir)).unwrap_or_else(|e| panic!("{e}"));
    assert!(!objs.is_empty(), "{dir}: nothing rendered");
    let errors: Vec<String> = objs
        .iter()
        .filter_map(|o| strict::check(o).err().map(|e| e.to_string()))
        .collect();
    assert!(errors.is_empty(), "{dir}:\n{}", errors.join("\n"));
    objs
}

/// Every directory of `packaging/kubernetes` that renders the node agent (base and overlays).
pub const AGENT_DIRS: &[&str] = &[
    "base",
    "overlays/containerd",
    "overlays/containerd-shim",
    "overlays/k3s",
    "overlays/nvidia-operator",
    "overlays/device-plugin",
    "overlays/dra",
];

/// The node image every manifest names: a placeholder in the reserved `.invalid` domain (RFC
/// 6761: never resolves, so never pulls anyone's image). The operator's site overlay replaces it
/// with one `images:` entry (docs/kubernetes.md, "The node image").
pub const IMAGE_PLACEHOLDER: &str = "registry.example.invalid/gpuslice";

/// Every container (init and main) of every Pod template and Pod: (`Kind/name/container`, image).
pub fn container_images(all: &[Value]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for o in all {
        let spec = match s(&o["kind"]) {
            "Pod" => &o["spec"],
            _ => &o["spec"]["template"]["spec"],
        };
        for list in ["initContainers", "containers"] {
            for c in spec[list].as_array().into_iter().flatten() {
                let at = format!(
                    "{}/{}/{}",
                    s(&o["kind"]),
                    s(&o["metadata"]["name"]),
                    s(&c["name"])
                );
                out.push((at, s(&c["image"]).to_string()));
            }
        }
    }
    out
}

/// The containers whose image is still the unset placeholder (tagged or not): applying such a
/// rendering gives Pods that can never start. Empty when the site overlay set the image.
pub fn unset_images(all: &[Value]) -> Vec<String> {
    container_images(all)
        .into_iter()
        .filter(|(_, image)| {
            image == IMAGE_PLACEHOLDER
                || image.starts_with(&format!("{IMAGE_PLACEHOLDER}:"))
                || image.starts_with(&format!("{IMAGE_PLACEHOLDER}@"))
        })
        .map(|(at, image)| format!("{at}: {image}"))
        .collect()
}

/// Lays out a site overlay as docs/kubernetes.md does, in a fresh temporary directory:
/// `gpuslice` (a link to this checkout) and `my-gpuslice/kustomization.yaml` = `site` (whose
/// paths start `../gpuslice/packaging/kubernetes/`); returns the `my-gpuslice` directory.
/// (kustomize takes no absolute path as a base, so the layout is real.)
pub fn write_site_dir(site: &Value, tag: &str) -> PathBuf {
    let top = std::env::temp_dir().join(format!("gs-deploy-site-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&top);
    std::fs::create_dir_all(top.join("my-gpuslice")).unwrap();
    std::os::unix::fs::symlink(repo_root().canonicalize().unwrap(), top.join("gpuslice")).unwrap();
    std::fs::write(
        top.join("my-gpuslice/kustomization.yaml"),
        serde_json::to_string_pretty(site).unwrap(),
    )
    .unwrap();
    top.join("my-gpuslice")
}

/// Renders the site at `path` (from [`write_site_dir`]) and removes its temporary directory;
/// panics with kubectl's message on failure.
pub fn render_site(kubectl: &Path, path: &Path) -> Vec<Value> {
    let objs = render(kubectl, path);
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    objs.unwrap_or_else(|e| panic!("{e}"))
}

/// A JSON string's text ("" for anything else).
pub fn s(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

/// A JSON array's strings (empty for anything else).
pub fn strs(v: &Value) -> Vec<&str> {
    v.as_array()
        .map(|a| a.iter().map(s).collect())
        .unwrap_or_default()
}

/// The objects of `kind` (and `name`, when given).
pub fn objects<'a>(all: &'a [Value], kind: &str) -> Vec<&'a Value> {
    all.iter().filter(|o| o["kind"] == kind).collect()
}

/// The entry of `list` (containers, env, volumes …) whose `name` is `name`; panics without one.
pub fn named<'a>(list: &'a Value, name: &str) -> &'a Value {
    list.as_array()
        .and_then(|a| a.iter().find(|c| c["name"] == name))
        .unwrap_or_else(|| panic!("no {name} in {list}"))
}

/// The section of `docs/<doc>` from the first heading starting with `heading` to the next
/// heading; panics without one.
pub fn doc_section(doc: &str, heading: &str) -> String {
    let text = std::fs::read_to_string(repo_root().join("docs").join(doc)).unwrap();
    let start = text
        .find(heading)
        .unwrap_or_else(|| panic!("docs/{doc} has no section {heading}"));
    let end = text[start + 4..]
        .find("\n#")
        .map_or(text.len(), |e| start + 4 + e);
    text[start..end].to_string()
}

/// The hostPath mounts of `container` in the Pod `spec`: host path → (path inside, read-only).
pub fn host_mounts<'a>(
    spec: &'a Value,
    container: &'a Value,
) -> BTreeMap<&'a str, (&'a str, bool)> {
    let mut host = BTreeMap::new();
    for m in container["volumeMounts"].as_array().into_iter().flatten() {
        let v = named(&spec["volumes"], s(&m["name"]));
        if let Some(p) = v["hostPath"]["path"].as_str() {
            host.insert(p, (s(&m["mountPath"]), m["readOnly"] == true));
        }
    }
    host
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_yaml_stream_splits_into_objects_and_bad_yaml_names_the_document() {
        let objs = parse_stream(
            "apiVersion: v1\nkind: Namespace\n---\n---\napiVersion: v1\nkind: ServiceAccount\n",
            Path::new("x"),
        )
        .unwrap();
        assert_eq!(objs.len(), 2);
        assert_eq!(objects(&objs, "ServiceAccount").len(), 1);
        let err = parse_stream("a: 1\n---\nb: [\n", Path::new("dir")).unwrap_err();
        assert!(
            err.to_string().contains("output document 1 is not YAML"),
            "{err}"
        );
    }

    #[test]
    fn placeholder_images_are_found_in_every_container_list_and_set_ones_pass() {
        let ds = |image: &str| {
            serde_json::json!({"kind": "DaemonSet", "metadata": {"name": "d"}, "spec": {"template":
                {"spec": {"initContainers": [{"name": "i", "image": image}],
                          "containers": [{"name": "c", "image": "site.registry.test/gpuslice:1"}]}}}})
        };
        for unset in [
            IMAGE_PLACEHOLDER.to_string(),
            format!("{IMAGE_PLACEHOLDER}:0.1.0"),
            format!("{IMAGE_PLACEHOLDER}@sha256:00"),
        ] {
            assert_eq!(
                unset_images(&[ds(&unset)]),
                [format!("DaemonSet/d/i: {unset}")]
            );
        }
        // A name that merely starts with the placeholder's text is someone's real repository.
        assert!(unset_images(&[ds(&format!("{IMAGE_PLACEHOLDER}-mirror/x:1"))]).is_empty());
        let pod = serde_json::json!({"kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": IMAGE_PLACEHOLDER}]}});
        assert_eq!(
            unset_images(&[pod]),
            [format!("Pod/p/c: {IMAGE_PLACEHOLDER}")]
        );
    }

    #[test]
    fn a_missing_kubectl_is_a_spawn_error_naming_it() {
        let err = render(Path::new("/nonexistent/kubectl"), Path::new(".")).unwrap_err();
        assert!(
            err.to_string().contains("cannot run /nonexistent/kubectl"),
            "{err}"
        );
    }
}
