//! `gpuslice configure`: every containerd config version, Docker's daemon.json and CRI-O from
//! fixtures (`tests/fixtures/configure/`), compared with golden outputs
//! (`tests/fixtures/configure/golden/`, the temporary directory written as `@DIR@`; regenerate
//! deliberately with `GPUSLICE_BLESS=1 cargo test -p gpuslice-cli --test configure` and review
//! the diff); a second run changes nothing; `--dry-run` prints a diff and writes nothing; a file
//! that does not parse is refused and left untouched; a backup is written only on change.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use gpuslice_cli::configure::{containerd, crio, docker, FileChange};
use gpuslice_test_support::Scratch;
use toml_edit::DocumentMut;

const RT: &str = "/opt/gpuslice/bin/gpuslice-runtime";

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/configure")
}

/// A fresh temporary directory holding a copy of every fixture.
fn scratch(tag: &str) -> Scratch {
    let dir = Scratch::new(tag);
    for e in std::fs::read_dir(fixtures()).unwrap() {
        let e = e.unwrap();
        if e.path().is_file() {
            std::fs::copy(e.path(), dir.path().join(e.file_name())).unwrap();
        }
    }
    dir
}

fn gpuslice(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpuslice"))
        .args(args)
        .env_remove("GPUSLICE_CONFIG")
        .output()
        .unwrap()
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Compares `actual` (with `dir` written as `@DIR@`) with the golden file `name`.
fn golden(name: &str, dir: &Path, actual: &str) {
    let actual = actual.replace(&dir.display().to_string(), "@DIR@");
    let path = fixtures().join("golden").join(name);
    if std::env::var_os("GPUSLICE_BLESS").is_some() {
        std::fs::write(&path, &actual).unwrap();
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (GPUSLICE_BLESS=1 writes it)", path.display()));
    assert_eq!(actual, want, "{name} differs from its golden file");
}

fn ctd(dir: &Path, file: &str) -> containerd::Options {
    containerd::Options {
        config: dir.join(file),
        drop_in: None,
        in_place: false,
        style: containerd::Style::BinaryName,
        runtime_path: PathBuf::from(RT),
        default_runtime: false,
        enable_cdi: false,
        new_version: 2,
        series: None,
    }
}

fn write_all(changes: &[FileChange]) {
    let mut sink = Vec::new();
    gpuslice_cli::configure::apply(changes, false, &mut sink).unwrap();
}

/// Plans, writes, and checks that planning again changes nothing.
fn converge(plan: impl Fn() -> Vec<FileChange>) -> Vec<FileChange> {
    let first = plan();
    assert!(
        first.iter().any(FileChange::changes),
        "first run changed nothing"
    );
    write_all(&first);
    let again = plan();
    for c in &again {
        assert!(
            !c.changes(),
            "second run would change {}:\n{}",
            c.path.display(),
            c.diff()
        );
    }
    first
}

fn toml_at<'a>(doc: &'a DocumentMut, keys: &[&str]) -> &'a toml_edit::Item {
    let mut item = doc.as_item();
    for k in keys {
        item = item.get(k).unwrap_or_else(|| panic!("no {k} in {keys:?}"));
    }
    item
}

#[test]
fn containerd_v1_is_edited_in_place() {
    let dir = scratch("v1");
    let opts = ctd(&dir, "containerd-v1.toml");
    let changes = converge(|| containerd::plan(&opts).unwrap());
    assert_eq!(changes.len(), 1, "version 1 has no imports: one file");
    let new = std::fs::read_to_string(dir.join("containerd-v1.toml")).unwrap();
    golden("containerd-v1.toml", &dir, &new);
    let doc: DocumentMut = new.parse().unwrap();
    let class = ["plugins", "cri", "containerd", "runtimes", "gpuslice"];
    assert_eq!(
        toml_at(&doc, &[&class[..], &["runtime_type"]].concat()).as_str(),
        Some("io.containerd.runc.v2")
    );
    assert_eq!(
        toml_at(&doc, &[&class[..], &["options", "SystemdCgroup"]].concat()).as_bool(),
        Some(true)
    );
    assert_eq!(
        toml_at(&doc, &[&class[..], &["options", "BinaryName"]].concat()).as_str(),
        Some(RT)
    );
    // Comments survive.
    assert!(new.contains("# keep cgroups in systemd") && new.contains("# the default"));
}

#[test]
fn containerd_v2_gets_a_drop_in_and_one_import() {
    let dir = scratch("v2");
    let opts = ctd(&dir, "containerd-v2.toml");
    converge(|| containerd::plan(&opts).unwrap());
    let main = std::fs::read_to_string(dir.join("containerd-v2.toml")).unwrap();
    let drop = std::fs::read_to_string(dir.join("conf.d/gpuslice.toml")).unwrap();
    golden("containerd-v2.toml", &dir, &main);
    golden("containerd-v2.drop-in.toml", &dir, &drop);
    // The main file changed only in `imports`, the old import kept first.
    let orig = std::fs::read_to_string(fixtures().join("containerd-v2.toml")).unwrap();
    let diff: Vec<_> = orig
        .lines()
        .zip(main.lines())
        .filter(|(a, b)| a != b)
        .collect();
    assert_eq!(diff.len(), 1, "{diff:?}");
    assert!(diff[0]
        .1
        .starts_with("imports = [\"/etc/containerd/other.toml\", "));
    let doc: DocumentMut = drop.parse().unwrap();
    assert_eq!(doc["version"].as_integer(), Some(2));
    let cri = ["plugins", "io.containerd.grpc.v1.cri"];
    // The whole CRI table is carried (containerd 1.x replaces it from the import).
    assert_eq!(
        toml_at(&doc, &[&cri[..], &["restrict_oom_score_adj"]].concat()).as_bool(),
        Some(true)
    );
    let class = [&cri[..], &["containerd", "runtimes", "gpuslice"]].concat();
    let opt = |k: &str| toml_at(&doc, &[&class[..], &["options", k]].concat()).clone();
    assert_eq!(opt("SystemdCgroup").as_bool(), Some(true));
    assert_eq!(opt("BinaryName").as_str(), Some(RT));
    let ann = toml_at(&doc, &[&class[..], &["pod_annotations"]].concat());
    assert_eq!(
        ann.as_array()
            .unwrap()
            .iter()
            .filter_map(|v| v.as_str())
            .collect::<Vec<_>>(),
        ["gpuslice.io/*"]
    );
}

#[test]
fn containerd_v3_shim_style_cdi_and_default_runtime() {
    let dir = scratch("v3");
    let mut opts = ctd(&dir, "containerd-v3.toml");
    opts.style = containerd::Style::Shim;
    opts.enable_cdi = true;
    opts.default_runtime = true;
    converge(|| containerd::plan(&opts).unwrap());
    let main = std::fs::read_to_string(dir.join("containerd-v3.toml")).unwrap();
    let drop = std::fs::read_to_string(dir.join("conf.d/gpuslice.toml")).unwrap();
    golden("containerd-v3.toml", &dir, &main);
    golden("containerd-v3.drop-in.toml", &dir, &drop);
    let doc: DocumentMut = drop.parse().unwrap();
    let cri = ["plugins", "io.containerd.cri.v1.runtime"];
    assert_eq!(
        toml_at(&doc, &[&cri[..], &["enable_cdi"]].concat()).as_bool(),
        Some(true)
    );
    assert_eq!(
        toml_at(
            &doc,
            &[&cri[..], &["containerd", "default_runtime_name"]].concat()
        )
        .as_str(),
        Some("gpuslice")
    );
    let class = [&cri[..], &["containerd", "runtimes", "gpuslice"]].concat();
    assert_eq!(
        toml_at(&doc, &[&class[..], &["runtime_type"]].concat()).as_str(),
        Some(containerd::SHIM_TYPE)
    );
    assert!(
        toml_at(&doc, &[&class[..], &["options"]].concat())
            .get("BinaryName")
            .is_none(),
        "the shim style names no BinaryName"
    );
    assert_eq!(
        toml_at(&doc, &[&class[..], &["options", "SystemdCgroup"]].concat()).as_bool(),
        Some(true)
    );
}

#[test]
fn containerd_import_glob_that_covers_the_drop_in_is_not_repeated() {
    let dir = scratch("glob");
    let cfg = dir.join("config.toml");
    std::fs::write(&cfg, "version = 2\nimports = [\"conf.d/*.toml\"]\n").unwrap();
    let opts = ctd(&dir, "config.toml");
    converge(|| containerd::plan(&opts).unwrap());
    let main = std::fs::read_to_string(&cfg).unwrap();
    assert_eq!(
        main, "version = 2\nimports = [\"conf.d/*.toml\"]\n",
        "main file untouched"
    );
    assert!(dir.join("conf.d/gpuslice.toml").exists());
}

#[test]
fn containerd_in_place_and_switching_style() {
    let dir = scratch("inplace");
    let mut opts = ctd(&dir, "containerd-v2.toml");
    opts.in_place = true;
    converge(|| containerd::plan(&opts).unwrap());
    assert!(!dir.join("conf.d").exists(), "--in-place writes no drop-in");
    opts.style = containerd::Style::Shim;
    converge(|| containerd::plan(&opts).unwrap());
    let doc: DocumentMut = std::fs::read_to_string(dir.join("containerd-v2.toml"))
        .unwrap()
        .parse()
        .unwrap();
    let class = [
        "plugins",
        "io.containerd.grpc.v1.cri",
        "containerd",
        "runtimes",
        "gpuslice",
    ];
    assert_eq!(
        toml_at(&doc, &[&class[..], &["runtime_type"]].concat()).as_str(),
        Some(containerd::SHIM_TYPE)
    );
    // runc's own BinaryName is what the shim style keeps, not gpuslice-runtime's.
    assert_eq!(
        toml_at(&doc, &[&class[..], &["options", "BinaryName"]].concat()).as_str(),
        Some("/usr/sbin/runc")
    );
}

#[test]
fn containerd_missing_file_is_created_with_the_chosen_version() {
    let dir = scratch("new");
    let mut opts = ctd(&dir, "absent.toml");
    opts.new_version = 3;
    opts.in_place = true;
    converge(|| containerd::plan(&opts).unwrap());
    let doc: DocumentMut = std::fs::read_to_string(dir.join("absent.toml"))
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(doc["version"].as_integer(), Some(3));
    assert_eq!(
        doc["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]["gpuslice"]
            ["options"]["BinaryName"]
            .as_str(),
        Some(RT)
    );
}

#[test]
fn docker_keeps_every_key_and_its_order() {
    let dir = scratch("docker");
    let path = dir.join("daemon.json");
    let opts = docker::Options {
        config: path.clone(),
        style: docker::Style::Path,
        runtime_path: PathBuf::from(RT),
        default_runtime: false,
        enable_cdi: false,
    };
    converge(|| docker::plan(&opts).unwrap());
    let new = std::fs::read_to_string(&path).unwrap();
    golden("daemon.json", &dir, &new);
    let keys: Vec<usize> = [
        "log-driver",
        "log-opts",
        "max-size",
        "max-file",
        "runtimes",
        "nvidia",
        "gpuslice",
        "data-root",
        "storage-driver",
    ]
    .iter()
    .map(|k| {
        new.find(&format!("\"{k}\""))
            .unwrap_or_else(|| panic!("{k} lost"))
    })
    .collect();
    assert!(
        keys.windows(2).all(|w| w[0] < w[1]),
        "key order changed:\n{new}"
    );
    let v: serde_json::Value = serde_json::from_str(&new).unwrap();
    assert_eq!(v["runtimes"]["gpuslice"]["path"], RT);
    assert_eq!(v["runtimes"]["nvidia"]["path"], "nvidia-container-runtime");

    let opts = docker::Options {
        style: docker::Style::RuntimeType,
        default_runtime: true,
        enable_cdi: true,
        ..opts
    };
    converge(|| docker::plan(&opts).unwrap());
    let new = std::fs::read_to_string(&path).unwrap();
    golden("daemon.runtime-type.json", &dir, &new);
    let v: serde_json::Value = serde_json::from_str(&new).unwrap();
    assert_eq!(
        v["runtimes"]["gpuslice"],
        serde_json::json!({"runtimeType": "io.containerd.gpuslice.v2"})
    );
    assert_eq!(v["default-runtime"], "gpuslice");
    assert_eq!(v["features"]["cdi"], true);
}

#[test]
fn crio_new_and_existing_drop_in() {
    let dir = scratch("crio");
    for (file, gold) in [
        ("99-gpuslice.conf", "crio-new.conf"),
        ("crio-existing.conf", "crio-existing.conf"),
    ] {
        let opts = crio::Options {
            config: dir.join(file),
            runtime_path: PathBuf::from(RT),
            default_runtime: file == "crio-existing.conf",
        };
        converge(|| crio::plan(&opts).unwrap());
        let new = std::fs::read_to_string(dir.join(file)).unwrap();
        golden(gold, &dir, &new);
        let doc: DocumentMut = new.parse().unwrap();
        let t = &doc["crio"]["runtime"]["runtimes"]["gpuslice"];
        assert_eq!(t["runtime_path"].as_str(), Some(RT));
        assert_eq!(t["runtime_type"].as_str(), Some("oci"));
    }
    let kept = std::fs::read_to_string(dir.join("crio-existing.conf")).unwrap();
    assert!(
        kept.contains("# operator's CRI-O drop-in") && kept.contains("conmon_cgroup = \"pod\"")
    );
    assert!(kept.contains("default_runtime = \"gpuslice\""));
}

fn backups(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".gpuslice-backup-"))
        .collect();
    v.sort();
    v
}

#[test]
fn binary_writes_a_backup_once_and_then_says_already_configured() {
    let dir = scratch("bin");
    let cfg = dir.join("containerd-v2.toml");
    let before = std::fs::read_to_string(&cfg).unwrap();
    let args = [
        "configure",
        "containerd",
        "--file",
        cfg.to_str().unwrap(),
        "--runtime-path",
        RT,
    ];
    let o = gpuslice(&args);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    assert!(
        out.contains("updated:") && out.contains("created:"),
        "{out}"
    );
    let b = backups(&dir);
    assert_eq!(b.len(), 1, "{b:?}");
    assert_eq!(
        std::fs::read_to_string(dir.join(&b[0])).unwrap(),
        before,
        "backup holds the old text"
    );

    let after = std::fs::read_to_string(&cfg).unwrap();
    let o = gpuslice(&args);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    assert!(out.contains("already configured"), "{out}");
    assert_eq!(backups(&dir).len(), 1, "no backup when nothing changes");
    assert_eq!(std::fs::read_to_string(&cfg).unwrap(), after);
}

#[test]
fn dry_run_prints_a_unified_diff_and_writes_nothing() {
    let dir = scratch("dry");
    let json = dir.join("daemon.json");
    let before = std::fs::read_to_string(&json).unwrap();
    let o = gpuslice(&[
        "configure",
        "docker",
        "--file",
        json.to_str().unwrap(),
        "--runtime-path",
        RT,
        "--dry-run",
    ]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    assert!(
        out.starts_with(&format!(
            "--- {}\n+++ {}\n@@ ",
            json.display(),
            json.display()
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "+        \"gpuslice\": {{\n+            \"path\": \"{RT}\""
        )) || out.contains("+    \"gpuslice\""),
        "{out}"
    );
    assert!(err.contains("would change"), "{err}");
    assert_eq!(std::fs::read_to_string(&json).unwrap(), before);
    assert!(backups(&dir).is_empty());
    // containerd: the drop-in that would be created shows as a new file.
    let cfg = dir.join("containerd-v3.toml");
    let o = gpuslice(&[
        "configure",
        "containerd",
        "--file",
        cfg.to_str().unwrap(),
        "--dry-run",
    ]);
    let (out, _) = text(&o);
    assert!(
        out.contains("--- /dev/null\n+++ ") && out.contains("conf.d/gpuslice.toml"),
        "{out}"
    );
    assert!(!dir.join("conf.d").exists());
}

#[test]
fn unparseable_files_are_refused_and_untouched() {
    let dir = scratch("broken");
    for (engine, file, line) in [
        ("containerd", "containerd-broken.toml", "line 2"),
        ("docker", "daemon-broken.json", "line 3"),
    ] {
        let path = dir.join(file);
        let before = std::fs::read(&path).unwrap();
        let o = gpuslice(&["configure", engine, "--file", path.to_str().unwrap()]);
        let (out, err) = text(&o);
        assert_eq!(o.status.code(), Some(1), "{engine}: {out}{err}");
        assert!(
            err.contains(&format!("cannot parse {}: {line}", path.display())),
            "{engine}: {err}"
        );
        assert!(err.contains("left untouched"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), before, "{file} changed");
    }
    assert!(backups(&dir).is_empty());
    assert!(!dir.join("conf.d").exists());
}

#[test]
fn unknown_containerd_version_is_refused() {
    let dir = scratch("v9");
    let cfg = dir.join("c.toml");
    std::fs::write(&cfg, "version = 9\n").unwrap();
    let e = containerd::plan(&ctd(&dir, "c.toml"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("unsupported config version 9"), "{e}");
}

#[test]
fn glob_matching() {
    assert!(containerd::glob_match(
        "/etc/containerd/conf.d/*.toml",
        "/etc/containerd/conf.d/gpuslice.toml"
    ));
    assert!(!containerd::glob_match(
        "/etc/containerd/conf.d/*.toml",
        "/etc/containerd/conf.d/x/gpuslice.toml"
    ));
    assert!(containerd::glob_match("/a/?.toml", "/a/b.toml"));
    assert!(!containerd::glob_match("/a/*.conf", "/a/b.toml"));
    assert!(containerd::glob_match("/a/*.toml", "/a/.toml"));
    assert!(containerd::glob_match("/a/**x*", "/a/bxc"));
    assert!(!containerd::glob_match("/a/?", "/a/"));
    assert!(!containerd::glob_match("/a*", "/a/b"));
}

/// Found while writing the `engine_config` fuzz target (the input is kept in
/// `fuzz/corpus/engine_config/containerd-imports-many-stars`): the old recursive matcher took
/// exponential time in the number of stars (2.4 s for 14, hours for 30), so one `imports` entry
/// stalled `gpuslice configure containerd`. Must answer at once.
#[test]
fn glob_matching_many_stars_is_fast() {
    let name = "/etc/containerd/conf.d/gpuslice.toml";
    let pattern = format!("/etc/containerd/conf.d/{}x", "*".repeat(40));
    let t = std::time::Instant::now();
    assert!(!containerd::glob_match(&pattern, name));
    let pattern = format!("/etc/containerd/conf.d/{}.toml", "*".repeat(40));
    assert!(containerd::glob_match(&pattern, name));
    // Generous for a loaded machine; the old matcher needs far longer than this.
    assert!(
        t.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        t.elapsed()
    );
}

/// The runtime classes a written config defines, by name, with their `runtime_type`.
fn classes(doc: &DocumentMut, cri: &[&str]) -> Vec<(String, String)> {
    let runtimes = toml_at(doc, &[cri, &["containerd", "runtimes"]].concat());
    runtimes
        .as_table()
        .expect("runtimes is a table")
        .iter()
        .map(|(k, v)| {
            let ty = v.get("runtime_type").and_then(|t| t.as_str()).unwrap_or("");
            (k.to_string(), ty.to_string())
        })
        .collect()
}

/// Debian 12's and 13's packaged `/etc/containerd/config.toml` set only the CRI plugin's `cni`
/// table and rely on the built-in `runc` class. Any `runtimes` entry replaces that built-in map
/// when containerd decodes the table, so the configured file must name `runc` itself (else the
/// CRI plugin fails: no runtime for `default_runtime_name = "runc"`), beside `gpuslice`.
#[test]
fn containerd_debian_stock_keeps_the_builtin_runc_class() {
    for in_place in [false, true] {
        let dir = scratch(if in_place { "deb-inplace" } else { "deb" });
        let mut opts = ctd(&dir, "containerd-debian.toml");
        opts.in_place = in_place;
        converge(|| containerd::plan(&opts).unwrap());
        let file = if in_place {
            dir.join("containerd-debian.toml")
        } else {
            dir.join("conf.d/gpuslice.toml")
        };
        let text = std::fs::read_to_string(&file).unwrap();
        if !in_place {
            golden("containerd-debian.drop-in.toml", &dir, &text);
        }
        let doc: DocumentMut = text.parse().unwrap();
        let cri = ["plugins", "io.containerd.grpc.v1.cri"];
        assert_eq!(
            classes(&doc, &cri),
            [
                ("runc".to_string(), containerd::RUNC_TYPE.to_string()),
                ("gpuslice".to_string(), containerd::RUNC_TYPE.to_string()),
            ],
            "{}:\n{text}",
            file.display()
        );
        // The built-in class is written with zero-valued options only: nothing of ours.
        let runc_opts = toml_at(
            &doc,
            &[&cri[..], &["containerd", "runtimes", "runc", "options"]].concat(),
        );
        assert_eq!(runc_opts.as_table().map(|t| t.len()), Some(0));
        // The user's CNI settings are carried.
        assert_eq!(
            toml_at(&doc, &[&cri[..], &["cni", "conf_dir"]].concat()).as_str(),
            Some("/etc/cni/net.d")
        );
    }
}

/// k3s-style generated files (versions 2 and 3) define `runc` themselves: it is kept as it is
/// (its options included) and not doubled; the registry settings are carried where the drop-in
/// carries the table (version 2, containerd 1.x's rule). The version 3 drop-in (containerd 2.x
/// merges key by key) holds the gpuslice class alone, with `runc`'s options copied into it.
#[test]
fn containerd_k3s_style_keeps_its_runc_class_and_registry() {
    for (file, cri, registry, carried) in [
        (
            "containerd-k3s-v2.toml",
            ["plugins", "io.containerd.grpc.v1.cri"],
            Some([
                "plugins",
                "io.containerd.grpc.v1.cri",
                "registry",
                "config_path",
            ]),
            &["runc", "gpuslice"][..],
        ),
        (
            "containerd-k3s-v3.toml",
            ["plugins", "io.containerd.cri.v1.runtime"],
            None,
            &["gpuslice"][..],
        ),
    ] {
        let dir = scratch(file);
        let opts = ctd(&dir, file);
        converge(|| containerd::plan(&opts).unwrap());
        let text = std::fs::read_to_string(dir.join("conf.d/gpuslice.toml")).unwrap();
        let doc: DocumentMut = text.parse().unwrap();
        let want: Vec<(String, String)> = carried
            .iter()
            .map(|n| (n.to_string(), containerd::RUNC_TYPE.to_string()))
            .collect();
        assert_eq!(classes(&doc, &cri), want, "{file}:\n{text}");
        for class in carried {
            let sysd = [
                &cri[..],
                &["containerd", "runtimes", class, "options", "SystemdCgroup"],
            ]
            .concat();
            assert_eq!(toml_at(&doc, &sysd).as_bool(), Some(false), "{file}");
        }
        if let Some(keys) = registry {
            assert!(toml_at(&doc, &keys).as_str().unwrap().ends_with("certs.d"));
        }
    }
}

/// A default runtime that names another class which the file defines is copied, and no `runc`
/// is invented; one naming a class the file lacks was broken before and is not "repaired".
#[test]
fn containerd_other_default_runtime_gets_no_runc() {
    let dir = scratch("otherdefault");
    let cfg = dir.join("config.toml");
    std::fs::write(
        &cfg,
        "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  default_runtime_name = \"crun\"\n  [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.crun]\n    runtime_type = \"io.containerd.runc.v2\"\n    [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.crun.options]\n      BinaryName = \"/usr/bin/crun\"\n",
    )
    .unwrap();
    let opts = ctd(&dir, "config.toml");
    converge(|| containerd::plan(&opts).unwrap());
    let doc: DocumentMut = std::fs::read_to_string(dir.join("conf.d/gpuslice.toml"))
        .unwrap()
        .parse()
        .unwrap();
    let names: Vec<String> = classes(&doc, &["plugins", "io.containerd.grpc.v1.cri"])
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names, ["crun", "gpuslice"]);
}

/// A version 2 config beside NVIDIA's toolkit drop-in (`conf.d/99-nvidia.toml`, imported by a
/// `conf.d/*.toml` glob): `dir/config.toml`, ready for `ctd(dir, "config.toml")`.
fn beside_nvidia(tag: &str, imports: &str) -> Scratch {
    let dir = scratch(tag);
    std::fs::create_dir_all(dir.join("conf.d")).unwrap();
    std::fs::copy(
        fixtures().join("nvidia/99-nvidia.v2.toml"),
        dir.join("conf.d/99-nvidia.toml"),
    )
    .unwrap();
    std::fs::write(
        dir.join("config.toml"),
        format!("version = 2\nimports = {imports}\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n"),
    )
    .unwrap();
    dir
}

fn class_names(text: &str, cri: &[&str]) -> Vec<String> {
    let doc: DocumentMut = text.parse().unwrap();
    classes(&doc, cri).into_iter().map(|(n, _)| n).collect()
}

const CRI_V2: [&str; 2] = ["plugins", "io.containerd.grpc.v1.cri"];

/// containerd 1.x keeps the CRI table of the last import only: the drop-in (sorting after
/// `99-nvidia.toml`) carries NVIDIA's table — its classes and its `sandbox_image` — plus ours.
#[test]
fn containerd_1x_drop_in_carries_nvidias_classes_too() {
    let dir = beside_nvidia("nv1x", "[\"conf.d/*.toml\"]");
    let mut opts = ctd(&dir, "config.toml");
    opts.series = Some(1);
    converge(|| containerd::plan(&opts).unwrap());
    let text = std::fs::read_to_string(dir.join("conf.d/gpuslice.toml")).unwrap();
    assert_eq!(
        class_names(&text, &CRI_V2),
        ["nvidia", "nvidia-cdi", "runc", "gpuslice"],
        "{text}"
    );
    let doc: DocumentMut = text.parse().unwrap();
    assert_eq!(
        toml_at(&doc, &[&CRI_V2[..], &["sandbox_image"]].concat()).as_str(),
        Some("registry.k8s.io/pause:3.6")
    );
    let main = std::fs::read_to_string(dir.join("config.toml")).unwrap();
    assert!(main.contains("imports = [\"conf.d/*.toml\"]\n"), "{main}");
}

/// containerd 2.x merges key by key: the drop-in carries the gpuslice class alone, with the
/// default runtime's options copied (NVIDIA's table says `SystemdCgroup = false`).
#[test]
fn containerd_2x_drop_in_carries_only_the_class() {
    let dir = beside_nvidia("nv2x", "[\"conf.d/*.toml\"]");
    let mut opts = ctd(&dir, "config.toml");
    opts.series = Some(2);
    converge(|| containerd::plan(&opts).unwrap());
    let text = std::fs::read_to_string(dir.join("conf.d/gpuslice.toml")).unwrap();
    assert_eq!(class_names(&text, &CRI_V2), ["gpuslice"], "{text}");
    assert!(
        !text.contains("sandbox_image") && !text.contains("cni"),
        "{text}"
    );
}

/// gpuslice first (`imports` names its drop-in), NVIDIA's toolkit after (adds the glob, so its
/// file would load after ours and replace our table on 1.x): the entry naming our drop-in is
/// dropped, the glob loads it after `99-nvidia.toml`.
#[test]
fn containerd_1x_moves_its_import_behind_nvidias() {
    let dir = beside_nvidia("nvorder", "[]");
    let ours = dir.join("conf.d/gpuslice.toml");
    let cfg = dir.join("config.toml");
    let main = std::fs::read_to_string(&cfg).unwrap().replace(
        "imports = []",
        &format!("imports = [\"{}\", \"conf.d/*.toml\"]", ours.display()),
    );
    std::fs::write(&cfg, main).unwrap();
    let mut opts = ctd(&dir, "config.toml");
    opts.series = Some(1);
    converge(|| containerd::plan(&opts).unwrap());
    let main = std::fs::read_to_string(&cfg).unwrap();
    assert!(main.contains("imports = [\"conf.d/*.toml\"]"), "{main}");
    let text = std::fs::read_to_string(&ours).unwrap();
    assert!(class_names(&text, &CRI_V2).contains(&"nvidia".to_string()));
}

/// A file that sorts after the drop-in and names the CRI table would replace ours on 1.x:
/// refused, naming that file; 2.x merges it and is fine.
#[test]
fn containerd_1x_refuses_a_later_cri_import() {
    let dir = beside_nvidia("nvlater", "[\"conf.d/*.toml\"]");
    let later = dir.join("conf.d/zz-site.toml");
    std::fs::copy(dir.join("conf.d/99-nvidia.toml"), &later).unwrap();
    let mut opts = ctd(&dir, "config.toml");
    opts.series = Some(1);
    let e = containerd::plan(&opts).unwrap_err().to_string();
    assert!(
        e.contains(&later.display().to_string()) && e.contains("--drop-in"),
        "{e}"
    );
    assert!(!dir.join("conf.d/gpuslice.toml").exists());
    opts.series = Some(2);
    converge(|| containerd::plan(&opts).unwrap());
}

/// `--containerd-major` is checked; `containerd --version` lines of each series are read.
#[test]
fn containerd_series_from_its_version_line() {
    use gpuslice_cli::configure::ctd_imports::{parse_series, Merge};
    let line = "containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3";
    assert_eq!(parse_series(line), Some(1));
    let line = "containerd github.com/containerd/containerd/v2 v2.1.9 abc";
    assert_eq!(parse_series(line), Some(2));
    assert_eq!(parse_series("garbage"), None);
    assert_eq!(Merge::for_config(2, None), Merge::Replace);
    assert_eq!(Merge::for_config(2, Some(2)), Merge::Deep);
    assert_eq!(Merge::for_config(3, None), Merge::Deep);
    let o = gpuslice(&["configure", "containerd", "--containerd-major", "7"]);
    let (_, err) = text(&o);
    assert!(
        !o.status.success() && err.contains("--containerd-major"),
        "{err}"
    );
}

/// `--remove` after a configure leaves the main file byte for byte as it was, deletes the
/// drop-in, and leaves NVIDIA's drop-in alone; a second `--remove` finds nothing.
#[test]
fn containerd_remove_restores_every_stock_file() {
    use gpuslice_cli::configure::ctd_remove::plan_remove;
    for (file, series) in [
        ("containerd-debian.toml", Some(1)),
        ("containerd-v2.toml", Some(1)),
        ("containerd-v3.toml", Some(2)),
        ("containerd-k3s-v2.toml", None),
        ("containerd-k3s-v3.toml", None),
    ] {
        let dir = beside_nvidia(&format!("rm-{file}"), "[\"conf.d/*.toml\"]");
        let nvidia = std::fs::read(dir.join("conf.d/99-nvidia.toml")).unwrap();
        let cfg = dir.join(file);
        let original = std::fs::read_to_string(&cfg).unwrap();
        let mut opts = ctd(&dir, file);
        opts.series = series;
        opts.enable_cdi = true;
        opts.default_runtime = true;
        write_all(&containerd::plan(&opts).unwrap());
        assert!(dir.join("conf.d/gpuslice.toml").exists(), "{file}");
        let removal = plan_remove(&opts).unwrap();
        assert_eq!(removal.delete, [dir.join("conf.d/gpuslice.toml")], "{file}");
        for c in &removal.changes {
            std::fs::write(&c.path, &c.new).unwrap();
        }
        for p in &removal.delete {
            std::fs::remove_file(p).unwrap();
        }
        assert_eq!(std::fs::read_to_string(&cfg).unwrap(), original, "{file}");
        assert_eq!(
            std::fs::read(dir.join("conf.d/99-nvidia.toml")).unwrap(),
            nvidia
        );
        let again = plan_remove(&opts).unwrap();
        assert!(again.delete.is_empty() && !again.changes.iter().any(FileChange::changes));
    }
}

/// In the main file (version 1, `--in-place`): the class and a default naming it go; NVIDIA's
/// class in the same table stays.
#[test]
fn containerd_remove_in_place_keeps_other_classes() {
    let dir = beside_nvidia("rm-inplace", "[]");
    let cfg = dir.join("config.toml");
    let main = std::fs::read_to_string(&cfg).unwrap().replace("imports = []\n", "")
        + "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia]\n  runtime_type = \"io.containerd.runc.v2\"\n";
    std::fs::write(&cfg, &main).unwrap();
    let mut opts = ctd(&dir, "config.toml");
    opts.in_place = true;
    opts.default_runtime = true;
    write_all(&containerd::plan(&opts).unwrap());
    let o = gpuslice(&[
        "configure",
        "containerd",
        "--remove",
        "--in-place",
        "--file",
        cfg.to_str().unwrap(),
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(
        out.contains("updated:") && out.contains("restart containerd"),
        "{out}"
    );
    let doc: DocumentMut = std::fs::read_to_string(&cfg).unwrap().parse().unwrap();
    let names: Vec<String> = classes(&doc, &CRI_V2).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["runc", "nvidia"]);
    assert!(!doc.to_string().contains("default_runtime_name"));
    let o = gpuslice(&[
        "configure",
        "containerd",
        "--remove",
        "--file",
        cfg.to_str().unwrap(),
    ]);
    assert!(text(&o).0.contains("nothing changed"), "{:?}", text(&o));
}
