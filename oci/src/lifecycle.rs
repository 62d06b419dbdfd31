//! The slice's lifecycle as `gpuslice-runtime` and `containerd-shim-gpuslice-v2` drive it
//! themselves, without hook processes: after a successful `create` they bind the container's pid
//! (from runc's `--pid-file`, or the shim's `CreateTaskResponse`) and cgroup to the slice, and
//! after a successful `delete` they release the slice. This is what the `createRuntime` /
//! `poststop` hooks do, minus two process starts per container (`docs/benchmarks.md`, Container
//! start). The hooks stay for every path where no gpuslice process sees both calls (`run`, a
//! `create` without `--pid-file`, CDI).

use std::path::{Path, PathBuf};

use gpuslice_api::protocol::valid_slice_id;

use crate::settings::Settings;
use gpuslice_api::client::{BindResult, Client, ClientError};

/// Largest pid file read.
const MAX_PID_FILE: usize = 64;

/// Why the bind after `create` failed.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// The pid file runc wrote cannot be read or holds no pid.
    #[error("pid file {path}: {reason}")]
    PidFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The arbiter refused or could not be reached.
    #[error("slice \"{slice_id}\": bind pid {pid}: {source}")]
    Arbiter {
        /// The slice.
        slice_id: String,
        /// The container's pid.
        pid: u32,
        /// The client error.
        #[source]
        source: ClientError,
    },
}

/// Reads the pid runc wrote to `path` (decimal, no newline needed).
pub fn read_pid_file(path: &Path) -> Result<u32, BindError> {
    let err = |reason: String| BindError::PidFile {
        path: path.to_path_buf(),
        reason,
    };
    let text = std::fs::read(path).map_err(|e| err(e.to_string()))?;
    if text.len() > MAX_PID_FILE {
        return Err(err(format!("longer than {MAX_PID_FILE} bytes")));
    }
    let s = std::str::from_utf8(&text).map_err(|_| err("not text".to_string()))?;
    s.trim()
        .parse::<u32>()
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| err(format!("{:?} is not a pid", s.trim())))
}

/// The cgroup path of `pid` from `<proc_root>/<pid>/cgroup`: the v1 `memory` hierarchy, else
/// `pids`, else the unified (v2) entry.
pub fn cgroup_of(proc_root: &Path, pid: u32) -> Option<String> {
    let text = std::fs::read_to_string(proc_root.join(pid.to_string()).join("cgroup")).ok()?;
    let by = |want: &dyn Fn(&str) -> bool| {
        text.lines().find_map(|l| {
            let mut it = l.splitn(3, ':');
            let (_, ctrl, path) = (it.next()?, it.next()?, it.next()?);
            (want(ctrl) && !path.is_empty()).then(|| path.to_string())
        })
    };
    by(&|c| c.split(',').any(|x| x == "memory"))
        .or_else(|| by(&|c| c.split(',').any(|x| x == "pids")))
        .or_else(|| by(&|c| c.is_empty()))
}

/// Binds `slice_id` to the container whose pid runc wrote to `pid_file`. An arbiter that does
/// not serve `bind` is not an error (the slice is then released at `delete` only): its message
/// is returned for a warning.
pub fn bind_created(
    settings: &Settings,
    slice_id: &str,
    pid_file: &Path,
) -> Result<Option<String>, BindError> {
    let pid = read_pid_file(pid_file)?;
    bind_pid(settings, slice_id, pid)
}

/// Binds `slice_id` to the container whose init is host process `pid` (and its cgroup). An
/// arbiter that does not serve `bind` is not an error: its message is returned for a warning.
pub fn bind_pid(
    settings: &Settings,
    slice_id: &str,
    pid: u32,
) -> Result<Option<String>, BindError> {
    let cgroup = cgroup_of(Path::new("/proc"), pid);
    let arbiter = |source| BindError::Arbiter {
        slice_id: slice_id.to_string(),
        pid,
        source,
    };
    let mut c = Client::connect(&settings.state_dir, settings.timeout).map_err(arbiter)?;
    match c.bind(slice_id, Some(pid), cgroup.as_deref()) {
        Ok(BindResult::Bound) => Ok(None),
        Ok(BindResult::Unsupported(m)) => Ok(Some(m)),
        Err(e) => Err(arbiter(e)),
    }
}

/// The slice a container id's `delete` must release: `Some(slice id)` when
/// `<state-dir>/<slice id>/slice.json` exists and names `container_id` as its owner (so a
/// same-named slice of a bare process or another engine is never released). Only a `stat` and
/// one small read: a `delete` of a container without a slice costs no arbiter round trip.
pub fn owned_slice(state_dir: &Path, container_id: &str) -> Option<String> {
    let slice_id = crate::ident::slice_id_for(container_id);
    if !valid_slice_id(&slice_id) {
        return None;
    }
    let record = state_dir.join(&slice_id).join("slice.json");
    let bytes = std::fs::read(record).ok()?;
    let v: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    let owner = v.get("owner")?.get("container_id")?.as_str()?;
    (owner == container_id).then_some(slice_id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuslice_test_support::Scratch;

    #[test]
    fn pid_files() {
        let d = Scratch::new("pid");
        let f = d.join("pid");
        std::fs::write(&f, "4242").unwrap();
        assert_eq!(read_pid_file(&f).unwrap(), 4242);
        std::fs::write(&f, "17\n").unwrap();
        assert_eq!(read_pid_file(&f).unwrap(), 17);
        for bad in ["", "0", "-3", "abc", "99999999999"] {
            std::fs::write(&f, bad).unwrap();
            let e = read_pid_file(&f).unwrap_err().to_string();
            assert!(e.contains("is not a pid") && e.contains("pid file"), "{e}");
        }
        std::fs::write(&f, "1".repeat(100)).unwrap();
        assert!(read_pid_file(&f)
            .unwrap_err()
            .to_string()
            .contains("longer"));
        let e = read_pid_file(&d.join("missing")).unwrap_err().to_string();
        assert!(e.contains("missing"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn cgroup_lines() {
        let root = Scratch::new("cg");
        std::fs::create_dir_all(root.join("42")).unwrap();
        std::fs::write(
            root.join("42/cgroup"),
            "12:pids:/default/c1\n5:cpu,cpuacct:/default/c1\n4:memory:/default/c1m\n0::/\n",
        )
        .unwrap();
        assert_eq!(cgroup_of(&root, 42).as_deref(), Some("/default/c1m"));
        std::fs::write(root.join("42/cgroup"), "0::/system.slice/x.scope\n").unwrap();
        assert_eq!(
            cgroup_of(&root, 42).as_deref(),
            Some("/system.slice/x.scope")
        );
        assert_eq!(cgroup_of(&root, 43), None);
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn owned_slice_needs_a_record_naming_the_container() {
        let d = Scratch::new("own");
        assert_eq!(owned_slice(&d, "c1"), None, "no slice directory");
        std::fs::create_dir_all(d.join("c1")).unwrap();
        assert_eq!(owned_slice(&d, "c1"), None, "directory without record");
        std::fs::write(
            d.join("c1/slice.json"),
            r#"{"owner":{"container_id":"c1"}}"#,
        )
        .unwrap();
        assert_eq!(owned_slice(&d, "c1").as_deref(), Some("c1"));
        std::fs::write(d.join("c1/slice.json"), r#"{"owner":{"pid":12}}"#).unwrap();
        assert_eq!(owned_slice(&d, "c1"), None, "a bare process's slice");
        std::fs::write(
            d.join("c1/slice.json"),
            r#"{"owner":{"container_id":"c9"}}"#,
        )
        .unwrap();
        assert_eq!(owned_slice(&d, "c1"), None, "another container's slice");
        std::fs::write(d.join("c1/slice.json"), "not json").unwrap();
        assert_eq!(owned_slice(&d, "c1"), None);
        let _ = std::fs::remove_dir_all(&d);
    }
}
