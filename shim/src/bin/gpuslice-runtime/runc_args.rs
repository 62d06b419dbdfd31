//! runc's command line, read the way runc (urfave/cli, Go `flag`) reads it: global options, the
//! subcommand, and for `create` / `run` the bundle (`--bundle`, `-b`, `--bundle=…`, else the
//! working directory) and the container id (the first operand). Single and double dashes are the
//! same; a value follows as the next argument or after `=`; parsing stops at the first operand
//! or `--`. The arguments themselves are never changed: [`Invocation::args`] is what the
//! low-level runtime receives.
//!
//! gpuslice's own `--state-dir` / `--config` are accepted only before every runc argument
//! (Docker's `runtimeArgs` are put there) and are removed before the low-level runtime runs.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

/// runc global options that take a value.
pub const GLOBAL_VALUE: [&str; 5] = ["root", "log", "log-format", "criu", "rootless"];
/// `create` / `run` options that take a value.
pub const CREATE_VALUE: [&str; 6] = [
    "bundle",
    "b",
    "console-socket",
    "pid-file",
    "preserve-fds",
    "pidfd-socket",
];

/// gpuslice's own options.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OwnOptions {
    /// `--state-dir`.
    pub state_dir: Option<PathBuf>,
    /// `--config`.
    pub config: Option<PathBuf>,
}

/// A parsed command line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Invocation {
    /// gpuslice's own leading options.
    pub own: OwnOptions,
    /// Every other argument, unchanged, for the low-level runtime.
    pub args: Vec<OsString>,
    /// `--log`.
    pub log: Option<PathBuf>,
    /// `--log-format json`.
    pub log_json: bool,
    /// The subcommand (`create`, `run`, `state`, …).
    pub command: Option<String>,
    /// The bundle as runc will use it (`.` when not given).
    pub bundle: PathBuf,
    /// The container id (first operand of the subcommand).
    pub container_id: Option<String>,
    /// `run --detach`.
    pub detach: bool,
    /// `--help` / `-h` somewhere: runc prints help and creates nothing.
    pub help: bool,
    /// `create` / `run --pid-file`: where runc writes the container's pid.
    pub pid_file: Option<PathBuf>,
    /// `delete --force`.
    pub force: bool,
    /// Index in [`Invocation::args`] of the subcommand (the global options come before it).
    pub command_index: Option<usize>,
}

/// `Some((name, inline value))` for an option argument.
fn flag(arg: &OsStr) -> Option<(String, Option<String>)> {
    let s = arg.to_str()?;
    if s == "-" || s == "--" || !s.starts_with('-') {
        return None;
    }
    let body = s.trim_start_matches('-');
    if s.starts_with("---") || body.is_empty() {
        return None;
    }
    Some(match body.split_once('=') {
        Some((n, v)) => (n.to_string(), Some(v.to_string())),
        None => (body.to_string(), None),
    })
}

fn strip_own(args: &[OsString]) -> (OwnOptions, usize) {
    let mut own = OwnOptions::default();
    let mut i = 0;
    while i < args.len() {
        let Some((name, inline)) = flag(&args[i]) else {
            break;
        };
        let slot = match name.as_str() {
            "state-dir" => &mut own.state_dir,
            "config" => &mut own.config,
            _ => break,
        };
        let value = match inline {
            Some(v) => PathBuf::from(v),
            None => match args.get(i + 1) {
                Some(v) => {
                    i += 1;
                    PathBuf::from(v)
                }
                None => break,
            },
        };
        *slot = Some(value);
        i += 1;
    }
    (own, i)
}

/// Parses `args` (argv without the program name).
pub fn parse(args: &[OsString]) -> Invocation {
    let (own, start) = strip_own(args);
    let rest = &args[start..];
    let mut inv = Invocation {
        own,
        args: rest.to_vec(),
        bundle: PathBuf::from("."),
        ..Invocation::default()
    };
    let mut i = 0;
    while i < rest.len() {
        let Some((name, inline)) = flag(&rest[i]) else {
            break;
        };
        let mut value = inline;
        if GLOBAL_VALUE.contains(&name.as_str()) && value.is_none() {
            value = rest.get(i + 1).map(|v| v.to_string_lossy().into_owned());
            i += 1;
        }
        match name.as_str() {
            "log" => inv.log = value.map(PathBuf::from),
            "log-format" => inv.log_json = value.as_deref() == Some("json"),
            "help" | "h" | "version" | "v" => inv.help = true,
            _ => {}
        }
        i += 1;
    }
    if rest.get(i).is_some_and(|a| a == "--") {
        i += 1;
    }
    let Some(cmd) = rest.get(i) else {
        return inv;
    };
    let cmd = cmd.to_string_lossy().into_owned();
    inv.command_index = Some(i);
    i += 1;
    if cmd == "create" || cmd == "run" {
        while i < rest.len() {
            if rest[i] == "--" {
                i += 1;
                break;
            }
            let Some((name, inline)) = flag(&rest[i]) else {
                break;
            };
            let mut value = inline;
            if CREATE_VALUE.contains(&name.as_str()) && value.is_none() {
                value = rest.get(i + 1).map(|v| v.to_string_lossy().into_owned());
                i += 1;
            }
            match name.as_str() {
                "bundle" | "b" => {
                    if let Some(v) = value {
                        inv.bundle = PathBuf::from(v);
                    }
                }
                "detach" | "d" => {
                    inv.detach = !matches!(value.as_deref(), Some("false"));
                }
                "pid-file" => inv.pid_file = value.map(PathBuf::from),
                "help" | "h" => inv.help = true,
                _ => {}
            }
            i += 1;
        }
        inv.container_id = rest.get(i).map(|a| a.to_string_lossy().into_owned());
    } else if cmd == "delete" {
        // runc delete: only the switch `--force` / `-f`; then the container id.
        while let Some((name, inline)) = rest.get(i).and_then(|a| flag(a)) {
            match name.as_str() {
                "force" | "f" => inv.force = !matches!(inline.as_deref(), Some("false")),
                "help" | "h" => inv.help = true,
                _ => {}
            }
            i += 1;
        }
        if rest.get(i).is_some_and(|a| a == "--") {
            i += 1;
        }
        inv.container_id = rest.get(i).map(|a| a.to_string_lossy().into_owned());
    }
    inv.command = Some(cmd);
    inv
}

impl Invocation {
    /// Whether this call creates a container (and so must be edited).
    pub fn creates(&self) -> bool {
        !self.help
            && self.container_id.is_some()
            && matches!(self.command.as_deref(), Some("create" | "run"))
    }

    /// Whether this call deletes a container (`delete [--force] ID`, no help).
    pub fn deletes(&self) -> bool {
        !self.help && self.container_id.is_some() && self.command.as_deref() == Some("delete")
    }

    /// The low-level runtime's arguments for `delete --force <id>` with this call's global
    /// options (cleanup of a container this call created).
    pub fn force_delete_args(&self, id: &str) -> Vec<OsString> {
        let globals = self.command_index.unwrap_or(0).min(self.args.len());
        let mut v = self.args[..globals].to_vec();
        v.extend(["delete", "--force", id].map(OsString::from));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Invocation {
        let v: Vec<OsString> = args.iter().map(OsString::from).collect();
        parse(&v)
    }

    #[test]
    fn containerd_style_create() {
        let a = [
            "--root",
            "/run/containerd/runc/k8s.io",
            "--log",
            "/run/x/log.json",
            "--log-format",
            "json",
            "--systemd-cgroup",
            "create",
            "--bundle",
            "/run/b",
            "--pid-file",
            "/run/b/pid",
            "--console-socket",
            "/tmp/s",
            "abc",
        ];
        let i = p(&a);
        assert!(i.creates());
        assert_eq!(i.bundle, PathBuf::from("/run/b"));
        assert_eq!(i.container_id.as_deref(), Some("abc"));
        assert_eq!(i.log, Some(PathBuf::from("/run/x/log.json")));
        assert!(i.log_json);
        assert_eq!(i.args.len(), a.len(), "every argument kept");
        assert_eq!(i.pid_file, Some(PathBuf::from("/run/b/pid")));
        assert_eq!(i.command_index, Some(7));
        let del_args = i.force_delete_args("abc");
        let del: Vec<&str> = del_args.iter().map(|a| a.to_str().unwrap()).collect();
        assert_eq!(
            del,
            [
                "--root",
                "/run/containerd/runc/k8s.io",
                "--log",
                "/run/x/log.json",
                "--log-format",
                "json",
                "--systemd-cgroup",
                "delete",
                "--force",
                "abc"
            ]
        );
    }

    #[test]
    fn delete_variants() {
        let i = p(&["--root", "/r", "delete", "--force", "c1"]);
        assert!(i.deletes() && i.force && !i.creates());
        assert_eq!(i.container_id.as_deref(), Some("c1"));
        let i = p(&["delete", "c2"]);
        assert!(i.deletes() && !i.force);
        assert_eq!(i.container_id.as_deref(), Some("c2"));
        assert!(p(&["delete", "-f=true", "c3"]).force);
        assert!(!p(&["delete"]).deletes(), "no id: nothing to release");
        assert!(!p(&["delete", "--help", "c4"]).deletes());
        assert!(!p(&["kill", "c5", "KILL"]).deletes());
        assert_eq!(
            p(&["create", "--pid-file=/p", "id"]).pid_file,
            Some(PathBuf::from("/p"))
        );
        assert_eq!(p(&["create", "id"]).pid_file, None);
    }

    #[test]
    fn bundle_variants() {
        assert_eq!(p(&["create", "-b", "x", "id"]).bundle, PathBuf::from("x"));
        assert_eq!(
            p(&["create", "--bundle=y", "id"]).bundle,
            PathBuf::from("y")
        );
        assert_eq!(
            p(&["create", "-bundle", "z", "id"]).bundle,
            PathBuf::from("z")
        );
        assert_eq!(p(&["run", "-d", "id"]).bundle, PathBuf::from("."));
        assert!(p(&["run", "-d", "id"]).detach);
        assert!(!p(&["run", "id"]).detach);
        // The bundle flag after the operand is not runc's.
        let i = p(&["create", "id", "--bundle", "w"]);
        assert_eq!(
            (i.bundle, i.container_id.as_deref()),
            (PathBuf::from("."), Some("id"))
        );
        // A value that looks like a flag name is still a value.
        assert_eq!(
            p(&["create", "--pid-file", "--bundle", "id"])
                .container_id
                .as_deref(),
            Some("id")
        );
    }

    #[test]
    fn other_commands_and_help_do_not_create() {
        for a in [
            &["state", "id"][..],
            &["delete", "--force", "id"],
            &["--version"],
            &["create", "--help"],
            &["--help", "create", "x"],
            &["features"],
            &[],
        ] {
            assert!(!p(a).creates(), "{a:?}");
        }
        assert_eq!(
            p(&["--debug", "kill", "id", "9"]).command.as_deref(),
            Some("kill")
        );
    }

    #[test]
    fn own_options_are_stripped_only_when_leading() {
        let i = p(&[
            "--config",
            "/c.toml",
            "--state-dir=/s",
            "--root",
            "/r",
            "create",
            "id",
        ]);
        assert_eq!(i.own.config, Some(PathBuf::from("/c.toml")));
        assert_eq!(i.own.state_dir, Some(PathBuf::from("/s")));
        assert_eq!(i.args, ["--root", "/r", "create", "id"].map(OsString::from));
        let i = p(&["--root", "/r", "--config", "x", "create", "id"]);
        assert_eq!(i.own, OwnOptions::default());
        assert_eq!(i.args.len(), 6);
    }
}
