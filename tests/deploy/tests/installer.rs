//! `packaging/kubernetes/base/install.sh` run outside Kubernetes, without root: a fake image
//! root whose `gpuslice` is a stand-in (records its arguments and edits the containerd config
//! once, like the real command), a stand-in `nsenter` in `PATH`, and temporary host paths.
//! Checks what lands where, that containerd is restarted only when its configuration changed,
//! the shim link, `GPUSLICE_RESTART=none`, and each refusal.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use gpuslice_deploy_tests::kubernetes_dir;
use gpuslice_test_support::packaging::node_binaries;

struct Host {
    dir: PathBuf,
}

fn script(path: &Path, body: &str) {
    std::fs::write(path, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

impl Host {
    fn new(tag: &str) -> Host {
        let dir = std::env::temp_dir().join(format!("gs-installer-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for d in [
            "image/usr/bin",
            "image/usr/lib/gpuslice",
            "stub",
            "etc/containerd",
            "cm",
            "usr-local-bin",
        ] {
            std::fs::create_dir_all(dir.join(d)).unwrap();
        }
        let d = dir.display();
        for b in node_binaries() {
            script(&dir.join("image/usr/bin").join(&b), &format!("echo {b}\n"));
        }
        // The stand-in configure: records its argv, adds a marker to --file once.
        script(
            &dir.join("image/usr/bin/gpuslice"),
            &format!(
                r#"printf '%s\n' "$@" > {d}/configure-argv
f=
prev=
for a in "$@"; do [ "$prev" = --file ] && f=$a; prev=$a; done
grep -q gpuslice-class "$f" 2>/dev/null || echo '# gpuslice-class' >> "$f"
"#
            ),
        );
        std::fs::write(dir.join("image/usr/lib/gpuslice/libgpuslice.so"), b"ELF").unwrap();
        script(
            &dir.join("stub/nsenter"),
            &format!("printf '%s\\n' \"$@\" >> {d}/nsenter-calls\necho --- >> {d}/nsenter-calls\n"),
        );
        std::fs::write(
            dir.join("cm/config.toml"),
            "state_dir = \"/run/gpuslice\"\n",
        )
        .unwrap();
        std::fs::write(dir.join("etc/containerd/config.toml"), "version = 2\n").unwrap();
        Host { dir }
    }

    fn run(&self, env: &[(&str, &str)]) -> Output {
        let d = &self.dir;
        let path = format!(
            "{}:{}",
            d.join("stub").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut c = Command::new("sh");
        c.arg(kubernetes_dir().join("base/install.sh"))
            .env("PATH", path)
            .env("GPUSLICE_IMAGE_ROOT", d.join("image"))
            .env("GPUSLICE_HOST_PREFIX", d.join("opt"))
            .env(
                "GPUSLICE_CONTAINERD_CONFIG",
                d.join("etc/containerd/config.toml"),
            )
            .env("GPUSLICE_CONFIG_SOURCE", d.join("cm/config.toml"))
            .env("GPUSLICE_CONFIG_TARGET", d.join("etc/gpuslice/config.toml"))
            .env_remove("GPUSLICE_CONTAINERD_STYLE")
            .env_remove("GPUSLICE_CONFIGURE_ARGS")
            .env_remove("GPUSLICE_RESTART")
            .env_remove("GPUSLICE_SHIM_LINK_DIR");
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    }

    fn lines(&self, file: &str) -> Vec<String> {
        std::fs::read_to_string(self.dir.join(file))
            .map(|s| s.lines().map(String::from).collect())
            .unwrap_or_default()
    }

    fn mode(&self, rel: &str) -> u32 {
        std::fs::metadata(self.dir.join(rel))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn installs_configures_and_restarts_only_on_change() {
    let h = Host::new("main");
    let o = h.run(&[("GPUSLICE_CONFIGURE_ARGS", "--enable-cdi")]);
    assert!(o.status.success(), "{}", stderr(&o));
    for b in node_binaries() {
        assert_eq!(h.mode(&format!("opt/bin/{b}")), 0o755, "{b}");
    }
    assert_eq!(h.mode("opt/lib/gpuslice/libgpuslice.so"), 0o644);
    assert_eq!(
        std::fs::read_to_string(h.dir.join("etc/gpuslice/config.toml")).unwrap(),
        "state_dir = \"/run/gpuslice\"\n"
    );
    let conf = h.dir.join("etc/containerd/config.toml");
    let runtime = h.dir.join("opt/bin/gpuslice-runtime");
    assert_eq!(
        h.lines("configure-argv"),
        [
            "configure",
            "containerd",
            "--file",
            conf.to_str().unwrap(),
            "--style",
            "binary-name",
            "--runtime-path",
            runtime.to_str().unwrap(),
            "--enable-cdi"
        ]
    );
    assert_eq!(
        h.lines("nsenter-calls"),
        [
            "--target",
            "1",
            "--mount",
            "--",
            "systemctl",
            "restart",
            "containerd",
            "---"
        ]
    );
    // No temporary files left beside the installed ones.
    let leftovers: Vec<_> = std::fs::read_dir(h.dir.join("opt/bin"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.contains("gpuslice-new"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // Second run: nothing changed, no restart.
    let o = h.run(&[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("containerd configuration unchanged: no restart"),
        "{}",
        stderr(&o)
    );
    assert_eq!(h.lines("nsenter-calls").len(), 8, "restarted again");
}

#[test]
fn shim_style_links_the_shim_and_restart_none_only_says_so() {
    let h = Host::new("shim");
    let link_dir = h.dir.join("usr-local-bin");
    let o = h.run(&[
        ("GPUSLICE_CONTAINERD_STYLE", "shim"),
        ("GPUSLICE_SHIM_LINK_DIR", link_dir.to_str().unwrap()),
        ("GPUSLICE_RESTART", "none"),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        std::fs::read_link(link_dir.join("containerd-shim-gpuslice-v2")).unwrap(),
        h.dir.join("opt/bin/containerd-shim-gpuslice-v2")
    );
    assert!(h.lines("configure-argv").contains(&"shim".to_string()));
    assert!(h.lines("nsenter-calls").is_empty());
    assert!(
        stderr(&o).contains("GPUSLICE_RESTART=none: restart containerd on the node yourself"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn bad_settings_and_a_broken_image_are_refused() {
    let h = Host::new("bad");
    let o = h.run(&[("GPUSLICE_CONTAINERD_STYLE", "runc")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("GPUSLICE_CONTAINERD_STYLE=runc (binary-name or shim)"),
        "{}",
        stderr(&o)
    );
    assert!(!h.dir.join("opt").exists(), "installed despite the refusal");

    let o = h.run(&[("GPUSLICE_RESTART", "always")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("GPUSLICE_RESTART=always"),
        "{}",
        stderr(&o)
    );

    let o = h.run(&[("GPUSLICE_SHIM_LINK_DIR", "/nonexistent/dir")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("GPUSLICE_SHIM_LINK_DIR=/nonexistent/dir is not a directory"),
        "{}",
        stderr(&o)
    );
    assert!(h.lines("configure-argv").is_empty(), "configured anyway");
    assert!(!h.dir.join("opt").exists(), "installed despite the refusal");

    std::fs::remove_file(h.dir.join("image/usr/lib/gpuslice/libgpuslice.so")).unwrap();
    let o = h.run(&[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("libgpuslice.so missing from the image"),
        "{}",
        stderr(&o)
    );
    assert!(h.lines("nsenter-calls").is_empty());
    assert!(
        !h.dir.join("opt").exists(),
        "partly installed from a broken image"
    );
}

/// k3s's containerd directory in the fake host, holding the config k3s generated (the k3s-style
/// fixture of the configure tests: version 2, k3s's root, state, socket and CNI paths).
fn k3s_dir(h: &Host) -> PathBuf {
    let dir = h.dir.join("var/lib/rancher/k3s/agent/etc/containerd");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.toml"), k3s_generated()).unwrap();
    dir
}

fn k3s_generated() -> String {
    let fixture = gpuslice_deploy_tests::repo_root()
        .join("cli/tests/fixtures/configure/containerd-k3s-v2.toml");
    std::fs::read_to_string(fixture).unwrap()
}

fn k3s_env(dir: &Path) -> Vec<(String, String)> {
    vec![
        (
            "GPUSLICE_CONTAINERD_CONFIG".into(),
            dir.join("config.toml").display().to_string(),
        ),
        (
            "GPUSLICE_CONTAINERD_TEMPLATE".into(),
            dir.join("config.toml.tmpl").display().to_string(),
        ),
        ("GPUSLICE_CONTAINERD_UNIT".into(), "k3s-agent".into()),
    ]
}

fn run_k3s(h: &Host, dir: &Path) -> Output {
    let env = k3s_env(dir);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    h.run(&env)
}

#[test]
fn k3s_gets_a_template_that_keeps_the_import_when_config_is_regenerated() {
    let h = Host::new("k3s");
    let dir = k3s_dir(&h);
    let o = run_k3s(&h, &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let drop_in = dir.join("conf.d/gpuslice.toml");
    let tmpl = std::fs::read_to_string(dir.join("config.toml.tmpl")).unwrap();
    assert!(
        tmpl.ends_with(&format!(
            "imports = [\"{}\"]\n{{{{ template \"base\" . }}}}\n",
            drop_in.display()
        )),
        "{tmpl}"
    );
    // k3s restarts as its own unit.
    assert_eq!(h.lines("nsenter-calls")[6], "k3s-agent");
    // What k3s generates from it at its next start (the base template expands to the file it
    // generated before): valid TOML, `imports` at the top level, k3s's own settings intact.
    let regenerated = tmpl.replace("{{ template \"base\" . }}", &k3s_generated());
    let doc: toml::Table =
        toml::from_str(&regenerated).unwrap_or_else(|e| panic!("{e}\n{regenerated}"));
    assert_eq!(doc["version"].as_integer(), Some(2));
    assert_eq!(
        doc["imports"].as_array().unwrap()[0].as_str(),
        Some(drop_in.to_str().unwrap())
    );
    assert_eq!(
        doc["plugins"]["io.containerd.grpc.v1.cri"]["cni"]["bin_dir"].as_str(),
        Some("/var/lib/rancher/k3s/data/current/bin")
    );
    // Second run: the template is ours and imports the drop-in: left as it is.
    let o = run_k3s(&h, &dir);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        std::fs::read_to_string(dir.join("config.toml.tmpl")).unwrap(),
        tmpl
    );
    assert!(!stderr(&o).contains("wrote"), "{}", stderr(&o));
}

#[test]
fn a_k3s_template_of_someone_else_is_refused_before_anything_is_written() {
    let h = Host::new("k3s-foreign");
    let dir = k3s_dir(&h);
    let theirs = "{{ template \"base\" . }}\n[plugins.\"io.containerd.grpc.v1.cri\".registry]\n";
    std::fs::write(dir.join("config.toml.tmpl"), theirs).unwrap();
    let o = run_k3s(&h, &dir);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("config.toml.tmpl exists and does not import"),
        "{err}"
    );
    assert!(err.contains("add the line imports = [\""), "{err}");
    assert_eq!(
        std::fs::read_to_string(dir.join("config.toml.tmpl")).unwrap(),
        theirs
    );
    assert!(!h.dir.join("opt").exists(), "installed despite the refusal");
    assert!(h.lines("configure-argv").is_empty());

    // A template directory that does not exist (not a k3s node, or a mistyped path).
    let o = h.run(&[(
        "GPUSLICE_CONTAINERD_TEMPLATE",
        "/nonexistent/k3s/config.toml.tmpl",
    )]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("its directory does not exist"),
        "{}",
        stderr(&o)
    );
    assert!(!h.dir.join("opt").exists());
}
