//! One description of what a slice's container gets: its bind mounts, environment, device
//! nodes and hooks, built once from a [`SliceGrant`] by [`SliceContainer::of`] and rendered two
//! ways: as OCI spec edits (`gpuslice_oci::edit::apply`, the runtime and the hook) and as CDI
//! container edits ([`SliceContainer::cdi_edits`]: `gpuslice cdi generate` and the kubelet
//! plugin's per-claim specs). A golden test (`kubelet-plugin/tests/cdi_dir.rs`) holds the two
//! renderings of one slice equal.
//!
//! It lives here because this is the lowest crate below both renderers: `gpuslice-oci` and the
//! kubelet plugin already depend on `gpuslice-cdi`, and this crate depends on neither (nor on
//! `gpuslice-api`), so no circle can form. The in-container paths are `gpuslice_region::layout`
//! constants.

use std::path::PathBuf;

use gpuslice_region::layout::{
    CONTAINER_INTERPOSER, CONTAINER_PRELOAD, CONTAINER_SLICE_DIR, CONTAINER_USAGE_FILE,
    SLICE_DIR_ENV, USAGE_FILE,
};

use crate::spec;

/// The hook stages gpuslice registers: (OCI/CDI hook name, `gpuslice-hook` sub-command).
pub const HOOK_STAGES: [(&str, &str); 2] = [
    ("createRuntime", "create-runtime"),
    ("poststop", "poststop"),
];
/// Timeout of each hook, seconds.
pub const HOOK_TIMEOUT_S: i64 = 10;

/// What a container is granted; the input of [`SliceContainer::of`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SliceGrant {
    /// The interposer on the host; `None` when another spec already mounts it (a claim's
    /// spec takes it from the node's spec).
    pub interposer: Option<PathBuf>,
    /// The host file to bind at `/etc/ld.so.preload`; `None` = none.
    pub preload_file: Option<PathBuf>,
    /// The slice directory on the host; `None` without a slice (fail-open, node spec).
    pub slice_dir: Option<PathBuf>,
    /// UUIDs of the assigned GPUs (`CUDA_VISIBLE_DEVICES`, in this order).
    pub device_uuids: Vec<String>,
    /// Device nodes to expose.
    pub device_nodes: Vec<Node>,
    /// The hook to register at [`HOOK_STAGES`]; `None` = no hooks.
    pub hook: Option<HookCall>,
    /// Further environment variables, after gpuslice's own.
    pub extra_env: Vec<(String, String)>,
}

/// One bind mount, always `nosuid,nodev`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bind {
    /// Source on the host.
    pub host: PathBuf,
    /// Destination in the container.
    pub container: String,
    /// Read-write (else read-only).
    pub writable: bool,
    /// Executable (else `noexec`).
    pub exec: bool,
}

impl Bind {
    /// The mount options, in the order both renderings write them.
    pub fn options(&self) -> Vec<String> {
        let mut o = vec![
            "bind",
            if self.writable { "rw" } else { "ro" },
            "nosuid",
            "nodev",
        ];
        if !self.exec {
            o.push("noexec");
        }
        o.into_iter().map(String::from).collect()
    }
}

/// A character device node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// Path in the container (`/dev/nvidia0`).
    pub path: String,
    /// Path on the host when it differs (a dev root other than `/dev`).
    pub host_path: Option<String>,
    /// Major number.
    pub major: i64,
    /// Minor number.
    pub minor: i64,
}

/// `gpuslice-hook` as a hook: `argv` is `gpuslice-hook`, [`HookCall::args`], the stage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookCall {
    /// The hook binary on the host.
    pub path: PathBuf,
    /// Arguments between `argv[0]` and the stage's sub-command.
    pub args: Vec<String>,
}

impl HookCall {
    /// The full `argv` for `stage` (a sub-command of [`HOOK_STAGES`]).
    pub fn argv(&self, stage: &str) -> Vec<String> {
        let mut a = vec!["gpuslice-hook".to_string()];
        a.extend(self.args.iter().cloned());
        a.push(stage.to_string());
        a
    }
}

/// What a slice's container gets, independent of the format it is written in.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SliceContainer {
    /// Bind mounts, in mount order (the usage file after the slice directory it sits on).
    pub mounts: Vec<Bind>,
    /// Environment variables, set (replacing any value the image has).
    pub env: Vec<(String, String)>,
    /// The in-container interposer to put first in `LD_PRELOAD`, keeping the image's entries.
    /// Only OCI edits can merge with the image's value; CDI relies on `/etc/ld.so.preload`.
    pub ld_preload: Option<&'static str>,
    /// Device nodes.
    pub device_nodes: Vec<Node>,
    /// The hook, registered at every stage of [`HOOK_STAGES`].
    pub hook: Option<HookCall>,
}

impl SliceContainer {
    /// The one description of `grant`'s container.
    pub fn of(grant: &SliceGrant) -> SliceContainer {
        let mut c = SliceContainer {
            device_nodes: grant.device_nodes.clone(),
            hook: grant.hook.clone(),
            ..SliceContainer::default()
        };
        let bind = |host: PathBuf, container: &str, writable, exec| Bind {
            host,
            container: container.to_string(),
            writable,
            exec,
        };
        if let Some(i) = &grant.interposer {
            c.mounts
                .push(bind(i.clone(), CONTAINER_INTERPOSER, false, true));
            c.ld_preload = Some(CONTAINER_INTERPOSER);
        }
        if let Some(dir) = &grant.slice_dir {
            c.mounts
                .push(bind(dir.clone(), CONTAINER_SLICE_DIR, false, false));
            c.mounts.push(bind(
                dir.join(USAGE_FILE),
                CONTAINER_USAGE_FILE,
                true,
                false,
            ));
            c.env
                .push((SLICE_DIR_ENV.to_string(), CONTAINER_SLICE_DIR.to_string()));
        }
        if let Some(p) = &grant.preload_file {
            c.mounts
                .push(bind(p.clone(), CONTAINER_PRELOAD, false, false));
        }
        if !grant.device_uuids.is_empty() {
            c.env.push((
                "CUDA_VISIBLE_DEVICES".to_string(),
                grant.device_uuids.join(","),
            ));
        }
        c.env.extend(grant.extra_env.iter().cloned());
        c
    }

    /// The CDI rendering (`ld_preload` is left to `/etc/ld.so.preload`: CDI cannot merge an
    /// environment variable with the image's).
    pub fn cdi_edits(&self) -> spec::Edits {
        spec::Edits {
            env: self.env.iter().map(|(k, v)| format!("{k}={v}")).collect(),
            device_nodes: self
                .device_nodes
                .iter()
                .map(|n| spec::DeviceNode {
                    path: n.path.clone(),
                    host_path: n.host_path.clone(),
                    kind: "c".into(),
                    major: n.major,
                    minor: n.minor,
                })
                .collect(),
            mounts: self
                .mounts
                .iter()
                .map(|m| spec::Mount {
                    host_path: m.host.display().to_string(),
                    container_path: m.container.clone(),
                    options: m.options(),
                })
                .collect(),
            hooks: self
                .hook
                .iter()
                .flat_map(|h| {
                    HOOK_STAGES.map(|(name, stage)| spec::Hook {
                        hook_name: name.to_string(),
                        path: h.path.display().to_string(),
                        args: h.argv(stage),
                        timeout: HOOK_TIMEOUT_S,
                    })
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slice_gets_its_directory_read_only_and_usage_read_write_on_top() {
        let c = SliceContainer::of(&SliceGrant {
            interposer: Some("/h/lib.so".into()),
            slice_dir: Some("/h/s".into()),
            device_uuids: vec!["GPU-a".into(), "GPU-b".into()],
            ..SliceGrant::default()
        });
        let dst: Vec<&str> = c.mounts.iter().map(|m| m.container.as_str()).collect();
        assert_eq!(
            dst,
            [CONTAINER_INTERPOSER, "/run/gpuslice", "/run/gpuslice/usage"]
        );
        assert_eq!(
            c.mounts[1].options(),
            ["bind", "ro", "nosuid", "nodev", "noexec"]
        );
        assert_eq!(
            c.mounts[2].options(),
            ["bind", "rw", "nosuid", "nodev", "noexec"]
        );
        assert_eq!(c.mounts[0].options(), ["bind", "ro", "nosuid", "nodev"]);
        assert_eq!(c.mounts[2].host, PathBuf::from("/h/s/usage"));
        let e = c.cdi_edits();
        assert_eq!(
            e.env,
            [
                "GPUSLICE_SLICE_DIR=/run/gpuslice",
                "CUDA_VISIBLE_DEVICES=GPU-a,GPU-b"
            ]
        );
        assert!(e.hooks.is_empty());
    }

    #[test]
    fn without_a_slice_there_is_no_slice_mount_nor_variable() {
        let c = SliceContainer::of(&SliceGrant {
            preload_file: Some("/h/p".into()),
            hook: Some(HookCall {
                path: "/h/hook".into(),
                args: vec!["--standalone".into()],
            }),
            ..SliceGrant::default()
        });
        assert_eq!(c.mounts.len(), 1);
        assert_eq!(c.mounts[0].container, CONTAINER_PRELOAD);
        assert!(c.env.is_empty());
        assert_eq!(c.ld_preload, None);
        let hooks = c.cdi_edits().hooks;
        assert_eq!(hooks.len(), 2);
        assert_eq!(hooks[1].args, ["gpuslice-hook", "--standalone", "poststop"]);
    }
}
