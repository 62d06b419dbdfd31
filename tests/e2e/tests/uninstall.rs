//! `packaging/kubernetes/base/install.sh` then `overlays/uninstall/uninstall.sh` on a scratch root, with the dist
//! tree as the image and its real `gpuslice` (no stand-in): every host path of both scripts
//! points below the scratch root, `GPUSLICE_RESTART=none`. The root starts as a node beside
//! NVIDIA's toolkit (Debian 12's containerd config importing `conf.d/*.toml`, NVIDIA's
//! `99-nvidia.toml`, NVIDIA's CDI spec, a runtime in `/usr/local/bin`) plus, after install,
//! what the DaemonSets write at run time (the CDI spec and a claim spec, the state directory,
//! the kubelet plugin's sockets). After uninstall the whole tree — every path, its type, mode
//! and bytes — is what it was before install: nothing of gpuslice's is left, nothing else was
//! touched. Run for each layout: plain, shim link, k3s template.

use anyhow::{ensure, Context, Result};
use gpuslice_e2e::gate::{require, Need};
use gpuslice_e2e::paths;
use gpuslice_e2e::scratch::Scratch;
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Every path below `root`: type, mode and content (a link's target).
fn tree(root: &Path) -> Result<BTreeMap<PathBuf, String>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir)? {
            let p = e?.path();
            let m = std::fs::symlink_metadata(&p)?;
            let rel = p.strip_prefix(root)?.to_path_buf();
            let what = if m.file_type().is_symlink() {
                format!("link -> {}", std::fs::read_link(&p)?.display())
            } else if m.is_dir() {
                stack.push(p.clone());
                format!("dir {:o}", m.mode() & 0o7777)
            } else {
                let bytes = std::fs::read(&p)?;
                format!(
                    "file {:o} {}",
                    m.mode() & 0o7777,
                    String::from_utf8_lossy(&bytes)
                )
            };
            out.insert(rel, what);
        }
    }
    Ok(out)
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::create_dir_all(path.parent().context("a parent")?)?;
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// The node as it is before gpuslice: Debian's containerd config beside NVIDIA's toolkit.
fn node_before(root: &Path) -> Result<()> {
    let ws = paths::workspace();
    let fixtures = ws.join("cli/tests/fixtures/configure");
    let debian = std::fs::read_to_string(fixtures.join("containerd-debian.toml"))?;
    let conf_d = root.join("etc/containerd/conf.d");
    write(
        &root.join("etc/containerd/config.toml"),
        &debian.replacen(
            "version = 2\n",
            &format!("version = 2\nimports = [\"{}/*.toml\"]\n", conf_d.display()),
            1,
        ),
    )?;
    write(
        &conf_d.join("99-nvidia.toml"),
        &std::fs::read_to_string(fixtures.join("nvidia/99-nvidia.v2.toml"))?,
    )?;
    write(
        &root.join("var/run/cdi/nvidia.yaml"),
        "cdiVersion: 0.6.0\nkind: nvidia.com/gpu\n",
    )?;
    write(
        &root.join("usr/local/bin/nvidia-container-runtime"),
        "#!/bin/sh\n",
    )?;
    // Directories every node has (install creates nothing above them).
    for d in [
        "opt",
        "var/lib/kubelet/plugins",
        "var/lib/kubelet/plugins_registry",
        "var/lib/kubelet/device-plugins",
        "run",
    ] {
        std::fs::create_dir_all(root.join(d))?;
    }
    write(
        &root.join("var/lib/kubelet/device-plugins/kubelet.sock"),
        "",
    )?;
    Ok(())
}

/// What the DaemonSets write while they run (after install.sh).
fn runtime_files(root: &Path) -> Result<()> {
    write(
        &root.join("var/run/cdi/gpuslice.yaml"),
        "kind: gpuslice.io/slice\n",
    )?;
    write(
        &root.join("var/run/cdi/gpuslice.io-claim_0b1c.yaml"),
        "kind: gpuslice.io/slice\n",
    )?;
    write(&root.join("run/gpuslice/arbiter.sock"), "")?;
    write(&root.join("run/gpuslice/slices/s1/usage"), "")?;
    write(
        &root.join("var/lib/kubelet/plugins/gpuslice.io/dra.sock"),
        "",
    )?;
    write(
        &root.join("var/lib/kubelet/plugins_registry/gpuslice.io-reg.sock"),
        "",
    )?;
    write(
        &root.join("var/lib/kubelet/device-plugins/gpuslice.sock"),
        "",
    )?;
    Ok(())
}

/// Runs `script` (install.sh or uninstall.sh) with every host path below `root`: given as
/// `root/<path>`, or — `host_root`, the uninstall DaemonSet's way — as `/<path>` with
/// `GPUSLICE_HOST_ROOT=root`. containerd's config is always named at `root/…` (the DaemonSet
/// mounts it at its own path). `extra`: more settings whose values are such paths.
fn run_script(
    script: &str,
    root: &Path,
    host_root: bool,
    extra: &[(&str, &str)],
) -> Result<String> {
    let base = paths::workspace().join("packaging/kubernetes/base");
    let dir = match script {
        "uninstall.sh" => paths::workspace().join("packaging/kubernetes/overlays/uninstall"),
        _ => base.clone(),
    };
    let host = |p: &str| match host_root {
        true => PathBuf::from("/").join(p),
        false => root.join(p),
    };
    let mut c = Command::new("/bin/sh");
    c.arg(dir.join(script))
        .env("GPUSLICE_IMAGE_ROOT", paths::dist())
        .env(
            "GPUSLICE_CONTAINERD_CONFIG",
            root.join("etc/containerd/config.toml"),
        )
        .env("GPUSLICE_CONFIG_SOURCE", base.join("config.toml"))
        .env("GPUSLICE_CONTAINERD_MAJOR", "1")
        .env("GPUSLICE_RESTART", "none");
    if host_root {
        c.env("GPUSLICE_HOST_ROOT", root);
    }
    let settings = [
        ("GPUSLICE_HOST_PREFIX", "opt/gpuslice"),
        ("GPUSLICE_CONFIG_TARGET", "etc/gpuslice/config.toml"),
        ("GPUSLICE_CDI_DIR", "var/run/cdi"),
        ("GPUSLICE_STATE_DIR", "run/gpuslice"),
        ("GPUSLICE_KUBELET_DIR", "var/lib/kubelet"),
    ];
    for (k, v) in settings.iter().chain(extra) {
        c.env(k, host(v));
    }
    let o = c.output()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    ensure!(o.status.success(), "{script} failed:\n{text}");
    Ok(text)
}

/// install.sh, the run-time files, uninstall.sh (through `GPUSLICE_HOST_ROOT` when
/// `host_root`), then the tree is compared with the one before install; a second uninstall
/// changes nothing.
fn install_then_uninstall(tag: &str, extra: &[(&str, &str)], host_root: bool) -> Result<()> {
    if !require(&format!("uninstall/{tag}"), &[Need::Product]) {
        return Ok(());
    }
    let scratch = Scratch::new(&format!("uninst-{tag}"));
    let root = scratch.path();
    node_before(root)?;
    for (_, p) in extra {
        std::fs::create_dir_all(root.join(p).parent().context("a parent")?)?;
    }
    let before = tree(root)?;

    let out = run_script("install.sh", root, false, extra)?;
    ensure!(out.contains("containerd configuration changed"), "{out}");
    runtime_files(root)?;
    let drop_in = std::fs::read_to_string(root.join("etc/containerd/conf.d/gpuslice.toml"))?;
    ensure!(
        drop_in.contains(".nvidia]"),
        "the 1.x drop-in carries NVIDIA's class:\n{drop_in}"
    );
    let installed = tree(root)?;
    ensure!(
        installed.len() > before.len() + 10,
        "install wrote little: {installed:#?}"
    );

    let out = run_script("uninstall.sh", root, host_root, extra)?;
    ensure!(out.contains("containerd configuration changed"), "{out}");
    let after = tree(root)?;
    let left: Vec<_> = after
        .iter()
        .filter(|(k, v)| before.get(*k) != Some(v))
        .collect();
    let lost: Vec<_> = before.keys().filter(|k| !after.contains_key(*k)).collect();
    ensure!(
        left.is_empty() && lost.is_empty(),
        "{tag}: left behind or changed {left:#?}\nremoved though not ours {lost:#?}\n{out}"
    );
    // Twice is harmless.
    let out = run_script("uninstall.sh", root, host_root, extra)?;
    ensure!(out.contains("unchanged: no restart"), "{out}");
    ensure!(
        tree(root)? == before,
        "{tag}: a second uninstall changed the tree"
    );
    Ok(())
}

#[test]
fn uninstall_leaves_the_node_as_before_install() -> Result<()> {
    install_then_uninstall("plain", &[], true)
}

#[test]
fn uninstall_removes_the_shim_link_it_made() -> Result<()> {
    install_then_uninstall(
        "shim",
        &[("GPUSLICE_SHIM_LINK_DIR", "usr/local/bin")],
        false,
    )
}

#[test]
fn uninstall_removes_the_k3s_template_it_wrote() -> Result<()> {
    install_then_uninstall(
        "k3s",
        &[(
            "GPUSLICE_CONTAINERD_TEMPLATE",
            "var/lib/rancher/k3s/agent/etc/containerd/config.toml.tmpl",
        )],
        true,
    )
}
