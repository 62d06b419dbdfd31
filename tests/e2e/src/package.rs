//! The Debian package on a clean root: a cached minimal Debian 12 tree (`debootstrap
//! --variant=minbase bookworm`), per-test copies of it, commands run inside a copy (a private
//! mount namespace with `/proc`, `/sys` and `/dev`, optionally a private network namespace),
//! the arbiter's command line read from its systemd unit, and file-tree listings to check
//! what the maintainer scripts leave behind.
//!
//! The cache lives at `$GPUSLICE_E2E_PREFIX/`[`CHROOT_KEY`] with a `.complete` marker; it also
//! holds up-to-date apt lists and the `runc` packages (downloaded, not installed), so installing
//! `gpuslice` with apt resolves its Recommends without reaching the archive again. The archive
//! is the host's own (read from `/etc/apt` at run time; no host name is written here).

use crate::paths;
use crate::procs::run_timeout;
use anyhow::{bail, ensure, Context, Result};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// Cache key: suite, variant, and the recipe's version (bump it when the recipe changes).
pub const CHROOT_KEY: &str = "chroot-bookworm-minbase-v1";
/// The suite of the clean root.
pub const SUITE: &str = "bookworm";
/// `PATH` inside the clean root (what systemd gives a service).
pub const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Where `cargo xtask package` writes packages: `$GPUSLICE_PACKAGES`, else
/// `$CARGO_TARGET_DIR/packages`, else `<workspace>/target/packages`.
pub fn packages_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("GPUSLICE_PACKAGES") {
        return PathBuf::from(d);
    }
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(t) => PathBuf::from(t).join("packages"),
        None => paths::workspace().join("target/packages"),
    }
}

/// The newest `gpuslice_*.deb` in [`packages_dir`].
pub fn find_deb() -> Option<PathBuf> {
    let mut v: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(packages_dir())
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("gpuslice_") && n.ends_with(".deb"))
        })
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .collect();
    v.sort();
    v.pop().map(|(_, p)| p)
}

/// The archive URI of the host's `SUITE` source: the first deb822 paragraph (`*.sources`) of
/// type `deb` whose `Suites` has `SUITE` itself, else the first one-line `deb` entry of
/// `sources.list` naming `SUITE` (not a security archive).
pub fn archive_uri(deb822: &[String], one_line: &str) -> Option<String> {
    for text in deb822 {
        for para in text.split("\n\n") {
            let field = |name: &str| {
                para.lines()
                    .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_string()))
            };
            let types = field("Types:").unwrap_or_default();
            let suites = field("Suites:").unwrap_or_default();
            let uri = field("URIs:").and_then(|u| u.split_whitespace().next().map(String::from));
            if types.split_whitespace().any(|t| t == "deb")
                && suites.split_whitespace().any(|s| s == SUITE)
            {
                if let Some(u) = uri {
                    return Some(u);
                }
            }
        }
    }
    for line in one_line.lines() {
        let words: Vec<&str> = line
            .split_whitespace()
            .filter(|w| !w.starts_with('[') && !w.ends_with(']'))
            .collect();
        if words.len() >= 3 && words[0] == "deb" && words[2] == SUITE {
            return Some(words[1].to_string());
        }
    }
    None
}

/// The host's archive URI, read from `/etc/apt` now.
pub fn host_archive_uri() -> Result<String> {
    let mut deb822 = Vec::new();
    for e in std::fs::read_dir("/etc/apt/sources.list.d")
        .into_iter()
        .flatten()
        .flatten()
    {
        if e.path().extension().is_some_and(|x| x == "sources") {
            deb822.push(std::fs::read_to_string(e.path()).unwrap_or_default());
        }
    }
    let one = std::fs::read_to_string("/etc/apt/sources.list").unwrap_or_default();
    archive_uri(&deb822, &one)
        .with_context(|| format!("no `deb` source for {SUITE} in /etc/apt/sources.list(.d)"))
}

/// Run a host command to completion, failing with its output.
fn host(cmd: &mut Command, limit: Duration) -> Result<Output> {
    let shown = format!("{cmd:?}");
    let o = run_timeout(cmd, limit)?;
    ensure!(
        o.status.success(),
        "{shown} failed: {}",
        crate::procs::describe(&o)
    );
    Ok(o)
}

/// A `debootstrap --variant=minbase` root of `suite` from the host's own archive, cached under
/// the engines' prefix at `key` and built when missing (debootstrap installed on the host first
/// if needed); `finish` runs on the new root before it is marked complete. `label` names the
/// caller in the line that says how long a cold build took.
pub fn debootstrap_root(
    key: &str,
    suite: &str,
    label: &str,
    finish: impl FnOnce(&Path) -> Result<()>,
) -> Result<PathBuf> {
    let cache = paths::engine_prefix().join(key);
    if cache.join(".complete").exists() {
        return Ok(cache);
    }
    let t = Instant::now();
    if !Path::new("/usr/sbin/debootstrap").exists() {
        host(
            Command::new("apt-get")
                .args([
                    "install",
                    "-y",
                    "-qq",
                    "--no-install-recommends",
                    "debootstrap",
                ])
                .env("DEBIAN_FRONTEND", "noninteractive"),
            Duration::from_secs(300),
        )
        .context("installing debootstrap")?;
    }
    let uri = host_archive_uri()?;
    let partial = cache.with_extension("partial");
    let _ = std::fs::remove_dir_all(&partial);
    std::fs::create_dir_all(cache.parent().context("cache has a parent")?)?;
    host(
        Command::new("debootstrap")
            .args(["--variant=minbase", suite])
            .arg(&partial)
            .arg(&uri),
        Duration::from_secs(900),
    )
    .with_context(|| format!("debootstrap {suite}"))?;
    finish(&partial)?;
    std::fs::write(partial.join(".complete"), format!("{key}\n"))?;
    std::fs::rename(&partial, &cache)?;
    eprintln!(
        "{label}: built {} in {:.0}s (cold debootstrap)",
        cache.display(),
        t.elapsed().as_secs_f64()
    );
    Ok(cache)
}

/// The cached clean root ([`SUITE`], with runc's packages downloaded into its apt cache).
/// Returns its path; prints how long a cold build took.
pub fn ensure_chroot() -> Result<PathBuf> {
    debootstrap_root(CHROOT_KEY, SUITE, "package", |root| {
        // Lists and runc's packages (with their own Recommends, as apt installs them) in the
        // cache, debootstrap's own archives dropped: installs are then offline and copies small.
        for args in [
            &["apt-get", "clean"][..],
            &["apt-get", "update", "-qq"][..],
            &["apt-get", "install", "-y", "-qq", "--download-only", "runc"][..],
        ] {
            host(
                Command::new("chroot")
                    .arg(root)
                    .args(args)
                    .env_clear()
                    .env("PATH", PATH)
                    .env("DEBIAN_FRONTEND", "noninteractive"),
                Duration::from_secs(300),
            )
            .with_context(|| format!("{args:?} in the new root"))?;
        }
        Ok(())
    })
}

/// A copy of the clean root for one test.
#[derive(Debug)]
pub struct Root {
    /// The root directory (inside the test's scratch directory).
    pub dir: PathBuf,
}

impl Root {
    /// Copy the cache to `dir` (which must not exist).
    pub fn copy_of(cache: &Path, dir: &Path) -> Result<Self> {
        ensure!(!dir.exists(), "{} exists", dir.display());
        host(
            Command::new("cp").arg("-a").arg(cache).arg(dir),
            Duration::from_secs(300),
        )?;
        let _ = std::fs::remove_file(dir.join(".complete"));
        Ok(Self {
            dir: dir.to_path_buf(),
        })
    }

    /// A host path for `abs`, a path inside the root.
    pub fn path(&self, abs: &str) -> PathBuf {
        self.dir.join(abs.trim_start_matches('/'))
    }

    /// `argv` run inside the root: `unshare -m` (and `-n` with loopback up when `private_net`),
    /// the root bind-mounted on itself (so `pivot_root` works for runc inside it), `/proc`,
    /// `/sys` and `/dev` below it, then `chroot`. The environment is `PATH` and `env` only,
    /// as a service gets it. All mounts disappear with the namespace.
    pub fn command(&self, private_net: bool, env: &[(String, String)], argv: &[&str]) -> Command {
        let script = format!(
            "set -e; r=$1; shift; \
             mount --bind \"$r\" \"$r\"; \
             mount -t proc proc \"$r/proc\"; \
             mount --rbind /sys \"$r/sys\"; \
             mount --rbind /dev \"$r/dev\"; \
             {} exec chroot \"$r\" \"$@\"",
            if private_net {
                "ip link set lo up;"
            } else {
                ""
            }
        );
        let mut c = Command::new("unshare");
        c.arg("-m");
        if private_net {
            c.arg("-n");
        }
        c.args([
            "--propagation",
            "private",
            "--",
            "/bin/sh",
            "-c",
            &script,
            "sh",
        ])
        .arg(&self.dir)
        .args(argv)
        .env_clear()
        .env("PATH", PATH)
        .env("LANG", "C")
        .envs(env.iter().map(|(k, v)| (k, v)));
        c
    }

    /// Run `argv` inside the root to completion (see [`Root::command`]).
    pub fn run(
        &self,
        private_net: bool,
        env: &[(String, String)],
        argv: &[&str],
        limit: Duration,
    ) -> Result<Output> {
        run_timeout(&mut self.command(private_net, env, argv), limit)
    }

    /// Every path below the root (files, directories, links), relative with a leading `/`,
    /// leaving out the mount points' contents (`/proc`, `/sys`, `/dev`).
    pub fn tree(&self) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        walk(&self.dir, &self.dir, &mut out);
        out
    }
}

fn walk(base: &Path, dir: &Path, out: &mut BTreeSet<String>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        let Ok(rel) = p.strip_prefix(base) else {
            continue;
        };
        let rel = format!("/{}", rel.display());
        if matches!(rel.as_str(), "/proc" | "/sys" | "/dev") {
            continue;
        }
        out.insert(rel);
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            walk(base, &p, out);
        }
    }
}

/// Environment assignments, in order.
pub type Env = Vec<(String, String)>;

/// The command line and environment of a systemd unit's `[Service]`: its one `ExecStart=` split
/// on whitespace, and its `Environment=` assignments. Refuses what this simple reading cannot
/// honour (several or no `ExecStart`, quotes, `%` specifiers, `$` expansion, prefixes such as
/// `-` or `+`), naming the line, so the test never runs something other than the unit would.
pub fn unit_exec_start(unit: &str) -> Result<(Vec<String>, Env)> {
    let mut exec = Vec::new();
    let mut env = Vec::new();
    let mut section = "";
    for (i, raw) in unit.lines().enumerate() {
        let line = raw.trim();
        if line.starts_with('[') {
            section = line;
            continue;
        }
        if section != "[Service]" || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(v) = line.strip_prefix("ExecStart=") {
            if v.contains(['"', '\'', '%', '$', '\\']) || !v.starts_with('/') {
                bail!(
                    "line {}: ExecStart={v}: quotes, specifiers, variables and prefixes are \
                     not supported here",
                    i + 1
                );
            }
            exec.push(v.split_whitespace().map(String::from).collect::<Vec<_>>());
        } else if let Some(v) = line.strip_prefix("Environment=") {
            for a in v.split_whitespace() {
                let (k, val) = a
                    .split_once('=')
                    .with_context(|| format!("line {}: Environment={v}: no `=`", i + 1))?;
                env.push((k.to_string(), val.to_string()));
            }
        }
    }
    match exec.len() {
        1 => Ok((exec.remove(0), env)),
        n => bail!("the unit has {n} ExecStart= lines in [Service], expected one"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archive_uri_from_deb822_or_one_line_sources() {
        let d = vec![
            "Types: deb\nURIs: http://a.invalid/debian-security\nSuites: bookworm-security\n\n\
             Types: deb deb-src\nURIs: http://b.invalid/debian\nSuites: bookworm bookworm-updates\n"
                .to_string(),
        ];
        assert_eq!(
            archive_uri(&d, "").as_deref(),
            Some("http://b.invalid/debian")
        );
        let one = "deb http://c.invalid/x bookworm-security main\n\
                   deb [signed-by=/k.gpg] http://d.invalid/debian bookworm main\n";
        assert_eq!(
            archive_uri(&[], one).as_deref(),
            Some("http://d.invalid/debian")
        );
        assert_eq!(
            archive_uri(&[], "deb http://e.invalid/ trixie main\n"),
            None
        );
    }

    #[test]
    fn exec_start_and_environment_of_a_unit() {
        let u = "[Unit]\nExecStart=/not/this\n[Service]\n# ExecStart=/commented\n\
                 Environment=A=1 B=2\nExecStart=/usr/bin/x --flag v\n[Install]\n";
        let (argv, env) = unit_exec_start(u).unwrap();
        assert_eq!(argv, ["/usr/bin/x", "--flag", "v"]);
        assert_eq!(env, [("A".into(), "1".into()), ("B".into(), "2".into())]);
    }

    #[test]
    fn exec_start_refuses_what_it_cannot_honour() {
        for (u, want) in [
            ("[Service]\nExecStart=-/usr/bin/x\n", "prefixes"),
            ("[Service]\nExecStart=/usr/bin/x \"a b\"\n", "quotes"),
            ("[Service]\nExecStart=/usr/bin/x %i\n", "specifiers"),
            ("[Service]\nType=simple\n", "0 ExecStart"),
            ("[Service]\nExecStart=/a\nExecStart=/b\n", "2 ExecStart"),
            ("[Service]\nEnvironment=NOEQ\nExecStart=/a\n", "no `=`"),
        ] {
            let e = unit_exec_start(u).unwrap_err().to_string();
            assert!(e.contains(want), "{u:?}: {e}");
        }
    }
}
