//! `cargo xtask package`: the Debian package `gpuslice` built from the release dist tree.
//!
//! Stages `<target>/packages/stage/gpuslice/` (the installed layout plus `DEBIAN/`), then runs
//! `dpkg-deb --root-owner-group --build` into `<target>/packages/`. No `cargo-deb`: one package
//! spans binaries of four crates, a cdylib and non-Rust files (units, hooks.d, docs), all already
//! laid out by `cargo xtask dist`, and `dpkg-deb` is on every Debian machine (docs/packaging.md).
//!
//! Installed layout (the design brief's, under `/`):
//! - `usr/bin/{gpuslice,gpuslice-arbiter,gpuslice-hook,gpuslice-runtime,containerd-shim-gpuslice-v2}`
//! - `usr/lib/gpuslice/libgpuslice.so`
//! - `etc/gpuslice/config.toml` (conffile)
//! - `usr/lib/systemd/system/{gpuslice-arbiter.service,gpuslice-cdi-refresh.{service,path}}`
//! - `usr/share/containers/oci/hooks.d/{gpuslice-prestart,gpuslice-poststop}.json`
//! - `usr/share/doc/gpuslice/` (copyright, changelog.gz, README.md, the docs/ pages)
//! - `usr/share/lintian/overrides/gpuslice`

mod deps;
#[cfg(test)]
mod install_doc;

use crate::dist;
use crate::shell::{exec, root, target_dir};
use anyhow::{bail, Context, Result};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The package name.
pub const PACKAGE: &str = "gpuslice";

/// Systemd units shipped (from `packaging/systemd/`).
pub const UNITS: [&str; 3] = [
    "gpuslice-arbiter.service",
    "gpuslice-cdi-refresh.service",
    "gpuslice-cdi-refresh.path",
];

/// hooks.d files shipped (from `packaging/hooks.d/`).
pub const HOOKS: [&str; 2] = ["gpuslice-prestart.json", "gpuslice-poststop.json"];

/// Maintainer scripts (from `packaging/debian/`).
pub const SCRIPTS: [&str; 3] = ["postinst", "prerm", "postrm"];

/// The conffile.
pub const CONFFILE: &str = "/etc/gpuslice/config.toml";

/// Where the packages are written.
pub fn out_dir() -> PathBuf {
    target_dir().join("packages")
}

/// `cargo xtask package [--dist DIR]`: build (or use) the dist tree and the package; prints and
/// returns the package paths.
pub fn run(dist: Option<&Path>) -> Result<Vec<PathBuf>> {
    let dist = match dist {
        Some(d) => d.to_path_buf(),
        None => dist::run()?,
    };
    let debs = build(&dist, &out_dir())?;
    for d in &debs {
        lintian(d);
    }
    for d in &debs {
        println!("{}", d.display());
    }
    Ok(debs)
}

/// Build the package from `dist` into `out` (no lintian: the e2e suite calls this).
pub fn build(dist: &Path, out: &Path) -> Result<Vec<PathBuf>> {
    check_dist(dist)?;
    let stage = out.join("stage").join(PACKAGE);
    if stage.exists() {
        fs::remove_dir_all(&stage).with_context(|| format!("removing {}", stage.display()))?;
    }
    let src = root().join("packaging");
    let version = workspace_version()?;
    let arch = capture(Command::new("dpkg").arg("--print-architecture"))?;

    // Files.
    let mut elves = Vec::new();
    for b in dist::BINARIES {
        let to = format!("usr/bin/{b}");
        install_stripped(&dist.join(&to), &stage.join(&to), 0o755)?;
        elves.push(to);
    }
    let lib = "usr/lib/gpuslice/libgpuslice.so";
    install_stripped(&dist.join(lib), &stage.join(lib), 0o644)?;
    elves.push(lib.to_string());
    install(
        &src.join("debian/config.toml"),
        &stage.join(CONFFILE.trim_start_matches('/')),
        0o644,
    )?;
    for u in UNITS {
        install(
            &src.join("systemd").join(u),
            &stage.join("usr/lib/systemd/system").join(u),
            0o644,
        )?;
    }
    for h in HOOKS {
        install(
            &src.join("hooks.d").join(h),
            &stage.join("usr/share/containers/oci/hooks.d").join(h),
            0o644,
        )?;
    }
    install(
        &src.join("debian/lintian-overrides"),
        &stage.join("usr/share/lintian/overrides").join(PACKAGE),
        0o644,
    )?;
    let doc = stage.join("usr/share/doc").join(PACKAGE);
    install(&src.join("debian/copyright"), &doc.join("copyright"), 0o644)?;
    install(&root().join("README.md"), &doc.join("README.md"), 0o644)?;
    for page in doc_pages()? {
        let name = page.file_name().context("doc page name")?;
        install(&page, &doc.join(name), 0o644)?;
    }
    install(
        &src.join("hooks.d/gpuslice-annotations-only.json.example"),
        &doc.join("examples/gpuslice-annotations-only.json.example"),
        0o644,
    )?;
    let changelog = fs::read_to_string(src.join("debian/changelog"))?
        .replace("@VERSION@", &version)
        .replace("@DATE@", &changelog_date()?);
    let gz = doc.join("changelog.gz");
    fs::write(doc.join("changelog"), changelog)?;
    exec(
        Command::new("gzip")
            .args(["-9nf"])
            .arg(doc.join("changelog")),
    )?;
    set_mode(&gz, 0o644)?;

    // Control area.
    let debian = stage.join("DEBIAN");
    fs::create_dir_all(&debian)?;
    let needs = elves
        .iter()
        .map(|e| Ok((e.clone(), deps::read(&stage.join(e))?)))
        .collect::<Result<Vec<_>>>()?;
    let control = render_control(
        &fs::read_to_string(src.join("debian/control.in"))?,
        &version,
        &arch,
        installed_size_kib(&stage)?,
        &deps::depends(&needs)?,
    )?;
    fs::write(debian.join("control"), control)?;
    fs::write(debian.join("conffiles"), format!("{CONFFILE}\n"))?;
    for s in SCRIPTS {
        install(&src.join("debian").join(s), &debian.join(s), 0o755)?;
    }
    fs::write(debian.join("md5sums"), md5sums(&stage)?)?;
    fix_dir_modes(&stage)?;

    let deb = out.join(format!("{PACKAGE}_{version}_{arch}.deb"));
    exec(
        Command::new("dpkg-deb")
            .args(["--root-owner-group", "-Zxz", "--build"])
            .arg(&stage)
            .arg(&deb),
    )?;
    Ok(vec![deb])
}

/// Fail early, naming what is missing, when the dist tree is incomplete.
fn check_dist(dist: &Path) -> Result<()> {
    let mut need: Vec<String> = dist::BINARIES
        .iter()
        .map(|b| format!("usr/bin/{b}"))
        .collect();
    need.push("usr/lib/gpuslice/libgpuslice.so".into());
    let missing: Vec<String> = need
        .into_iter()
        .filter(|p| !dist.join(p).is_file())
        .collect();
    if !missing.is_empty() {
        bail!(
            "dist tree {} lacks {} (run `cargo xtask dist`)",
            dist.display(),
            missing.join(", ")
        );
    }
    Ok(())
}

/// The `docs/*.md` pages shipped in `/usr/share/doc/gpuslice` (units link to them).
fn doc_pages() -> Result<Vec<PathBuf>> {
    let mut v: Vec<PathBuf> = fs::read_dir(root().join("docs"))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    v.sort();
    Ok(v)
}

/// Fill `control.in`; refuses a template that still has a placeholder afterwards.
pub fn render_control(
    template: &str,
    version: &str,
    arch: &str,
    installed_kib: u64,
    depends: &str,
) -> Result<String> {
    let s = template
        .replace("@VERSION@", version)
        .replace("@ARCH@", arch)
        .replace("@INSTALLED_SIZE@", &installed_kib.to_string())
        .replace("@DEPENDS@", depends);
    if let Some(p) = placeholder(&s) {
        bail!("packaging/debian/control.in: unknown placeholder {p}");
    }
    if !s.ends_with('\n') {
        bail!("packaging/debian/control.in must end with a newline");
    }
    Ok(s)
}

/// The first `@NAME@` (capitals, digits, `_`) left in `s`.
fn placeholder(s: &str) -> Option<&str> {
    let mut from = 0;
    while let Some(i) = s[from..].find('@').map(|i| i + from) {
        let rest = &s[i + 1..];
        let len = rest
            .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(rest.len());
        if len > 0 && rest[len..].starts_with('@') {
            return Some(&s[i..i + len + 2]);
        }
        from = i + 1;
    }
    None
}

/// `version` from the root Cargo.toml's `[workspace.package]`.
fn workspace_version() -> Result<String> {
    let text = fs::read_to_string(root().join("Cargo.toml"))?;
    parse_workspace_version(&text).context("no version in [workspace.package] of Cargo.toml")
}

/// The `version = "…"` line of the `[workspace.package]` table.
pub fn parse_workspace_version(cargo_toml: &str) -> Option<String> {
    let mut in_table = false;
    for line in cargo_toml.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            in_table = t == "[workspace.package]";
            continue;
        }
        if in_table {
            if let Some(v) = t.strip_prefix("version") {
                let v = v.trim_start().strip_prefix('=')?.trim().trim_matches('"');
                return Some(v.to_string());
            }
        }
    }
    None
}

/// RFC 2822 date of the last commit (reproducible), else now.
fn changelog_date() -> Result<String> {
    let git = Command::new("git")
        .args(["log", "-1", "--format=%cD"])
        .current_dir(root())
        .output();
    if let Ok(o) = git {
        let d = String::from_utf8_lossy(&o.stdout).trim().to_string();
        if o.status.success() && !d.is_empty() {
            return Ok(d);
        }
    }
    capture(Command::new("date").arg("-R"))
}

fn capture(cmd: &mut Command) -> Result<String> {
    let o = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !o.status.success() {
        bail!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&o.stdout).trim().to_string())
}

fn set_mode(p: &Path, mode: u32) -> Result<()> {
    fs::set_permissions(p, fs::Permissions::from_mode(mode))
        .with_context(|| format!("chmod {mode:o} {}", p.display()))
}

fn install(from: &Path, to: &Path, mode: u32) -> Result<()> {
    if let Some(d) = to.parent() {
        fs::create_dir_all(d)?;
    }
    fs::copy(from, to)
        .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    set_mode(to, mode)
}

/// Copy and strip (as dh_strip does: debug info, `.comment`, `.note`), so the package carries no
/// debug sections.
fn install_stripped(from: &Path, to: &Path, mode: u32) -> Result<()> {
    install(from, to, 0o644)?;
    exec(
        Command::new("strip")
            .args([
                "--strip-unneeded",
                "--remove-section=.comment",
                "--remove-section=.note",
            ])
            .arg(to),
    )?;
    set_mode(to, mode)
}

/// Every directory 0755 (umask-independent).
fn fix_dir_modes(dir: &Path) -> Result<()> {
    set_mode(dir, 0o755)?;
    for e in fs::read_dir(dir)? {
        let e = e?;
        if e.file_type()?.is_dir() {
            fix_dir_modes(&e.path())?;
        }
    }
    Ok(())
}

/// Regular files below `stage`, outside `DEBIAN/`, relative and sorted.
fn payload_files(stage: &Path) -> Result<Vec<PathBuf>> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
        for e in fs::read_dir(dir)? {
            let e = e?;
            let p = e.path();
            let rel = p.strip_prefix(base)?.to_path_buf();
            if rel.starts_with("DEBIAN") {
                continue;
            }
            if e.file_type()?.is_dir() {
                walk(base, &p, out)?;
            } else {
                out.push(rel);
            }
        }
        Ok(())
    }
    let mut v = Vec::new();
    walk(stage, stage, &mut v)?;
    v.sort();
    Ok(v)
}

/// `Installed-Size` in KiB: the payload's files, each rounded up to 1 KiB.
fn installed_size_kib(stage: &Path) -> Result<u64> {
    let mut kib = 0;
    for f in payload_files(stage)? {
        kib += fs::metadata(stage.join(&f))?.len().div_ceil(1024);
    }
    Ok(kib.max(1))
}

/// `DEBIAN/md5sums` for the payload, the conffile left out (dpkg keeps its sum itself; as
/// dh_md5sums does).
fn md5sums(stage: &Path) -> Result<String> {
    let files: Vec<PathBuf> = payload_files(stage)?
        .into_iter()
        .filter(|f| Path::new("/").join(f) != Path::new(CONFFILE))
        .collect();
    let out = Command::new("md5sum")
        .args(&files)
        .current_dir(stage)
        .output()
        .context("running md5sum")?;
    if !out.status.success() {
        bail!("md5sum failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Run lintian when it is installed (not required); its findings are printed, not fatal.
fn lintian(deb: &Path) {
    let have = Command::new("sh")
        .args(["-c", "command -v lintian"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !have {
        eprintln!("lintian not installed: not run");
        return;
    }
    let _ = exec(
        Command::new("lintian")
            .args(["--tag-display-limit", "0"])
            .arg(deb),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_comes_from_workspace_package() {
        let t = "[workspace]\nmembers = []\n[workspace.package]\nedition = \"2021\"\nversion = \"1.2.3\"\n[profile.release]\nversion = \"9\"\n";
        assert_eq!(parse_workspace_version(t).as_deref(), Some("1.2.3"));
        assert_eq!(
            parse_workspace_version("[package]\nversion = \"1\"\n"),
            None
        );
        // The real file has one.
        assert!(workspace_version().is_ok());
    }

    #[test]
    fn control_is_rendered_and_complete() {
        let t = fs::read_to_string(root().join("packaging/debian/control.in")).unwrap();
        let c = render_control(&t, "0.1.0", "amd64", 1234, "libc6 (>= 2.34)").unwrap();
        assert!(c.starts_with("Package: gpuslice\n"), "{c}");
        assert!(c.contains("\nVersion: 0.1.0\n"), "{c}");
        assert!(c.contains("\nInstalled-Size: 1234\n"), "{c}");
        assert!(c.contains("\nDepends: libc6 (>= 2.34)\n"), "{c}");
        assert!(c.contains("\nRecommends: runc | crun\n"), "{c}");
        // Every field dpkg-deb requires.
        for f in [
            "Package",
            "Version",
            "Architecture",
            "Maintainer",
            "Description",
        ] {
            assert!(c.contains(&format!("{f}: ")), "{f} missing:\n{c}");
        }
    }

    #[test]
    fn unknown_placeholder_is_refused_by_name() {
        // An e-mail address is not a placeholder.
        let c = render_control("Maintainer: a <b@c.d>\n", "1", "amd64", 1, "x").unwrap();
        assert!(c.contains("b@c.d"));
        let e = render_control("Package: x a@b\nFoo: @FOO@\n", "1", "amd64", 1, "libc6")
            .unwrap_err()
            .to_string();
        assert!(e.contains("@FOO@"), "{e}");
        let e = render_control("Package: x", "1", "amd64", 1, "libc6")
            .unwrap_err()
            .to_string();
        assert!(e.contains("newline"), "{e}");
    }

    /// The promise of the maintainer scripts: an engine's configuration is never edited.
    #[test]
    fn maintainer_scripts_never_touch_engine_configuration() {
        for s in SCRIPTS {
            let text = fs::read_to_string(root().join("packaging/debian").join(s)).unwrap();
            for forbidden in [
                "/etc/containerd",
                "/etc/docker",
                "/etc/crio",
                "daemon.json",
                "gpuslice configure containerd\n",
                "sed -i",
            ] {
                assert!(!text.contains(forbidden), "{s} mentions {forbidden:?}");
            }
            // `systemctl` only behind the "systemd is running" guard.
            for (i, line) in text.lines().enumerate() {
                if line.trim_start().starts_with("systemctl") {
                    let before: Vec<&str> = text.lines().take(i).collect();
                    assert!(
                        before
                            .iter()
                            .any(|l| l.contains("[ -d /run/systemd/system ]")),
                        "{s}:{}: systemctl outside the running-systemd guard",
                        i + 1
                    );
                }
            }
            let ok = Command::new("sh")
                .arg("-n")
                .arg(root().join("packaging/debian").join(s))
                .status()
                .unwrap();
            assert!(ok.success(), "{s}: sh -n failed");
        }
    }

    #[test]
    fn every_shipped_source_file_exists() {
        let p = root().join("packaging");
        for u in UNITS {
            assert!(p.join("systemd").join(u).is_file(), "{u}");
        }
        for h in HOOKS {
            assert!(p.join("hooks.d").join(h).is_file(), "{h}");
        }
        for f in [
            "config.toml",
            "control.in",
            "copyright",
            "changelog",
            "lintian-overrides",
        ] {
            assert!(p.join("debian").join(f).is_file(), "{f}");
        }
    }

    #[test]
    fn incomplete_dist_tree_is_refused_naming_what_is_missing() {
        let d = std::env::temp_dir().join(format!("xtask-pkg-empty-{}", std::process::id()));
        fs::create_dir_all(&d).unwrap();
        let e = build(&d, &d.join("out")).unwrap_err().to_string();
        let _ = fs::remove_dir_all(&d);
        assert!(
            e.contains("usr/bin/gpuslice-arbiter") && e.contains("cargo xtask dist"),
            "{e}"
        );
        // Nothing was staged.
        assert!(!d.join("out").exists());
    }

    /// The arbiter unit's ExecStart is the installed binary (the install test runs that line).
    #[test]
    fn arbiter_unit_starts_the_installed_arbiter() {
        let u =
            fs::read_to_string(root().join("packaging/systemd/gpuslice-arbiter.service")).unwrap();
        let exec: Vec<&str> = u.lines().filter(|l| l.starts_with("ExecStart=")).collect();
        assert_eq!(exec, ["ExecStart=/usr/bin/gpuslice-arbiter"]);
        assert!(u.contains("CapabilityBoundingSet=CAP_SYS_PTRACE"));
        assert!(u.contains("WantedBy=multi-user.target"));
    }
}
