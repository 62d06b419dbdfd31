//! gpuslice beside NVIDIA's container toolkit on real containerd 1.6, 1.7 and 2.1: each
//! series' `containerd config default` (version 2 on 1.x, 3 on 2.1), made private to the test,
//! gets what toolkit 1.18's `nvidia-ctk runtime configure` writes — `imports =
//! ["<dir>/conf.d/*.toml"]` and `conf.d/99-nvidia.toml` (on version 2: the main file's CRI
//! table copied plus the `nvidia` and `nvidia-cdi` classes, toolkit PR 1311; on version 3: the
//! classes alone; fixtures `cli/tests/fixtures/configure/nvidia/`) — and then `gpuslice
//! configure containerd` told the series. Then
//! - `containerd config dump` lists `runc`, `nvidia`, `nvidia-cdi` and `gpuslice` (before the
//!   fix, 1.x's dump lost `nvidia`: gpuslice's drop-in, loaded last, copied the main file only),
//! - the 1.x drop-in carries NVIDIA's classes, the 2.1 drop-in the gpuslice class alone,
//! - a Pod of the `nvidia` handler runs a container through the toolkit's `BinaryName` (a
//!   stand-in that logs its call and execs runc), one of the `gpuslice` handler runs held to a
//!   1 GiB slice, and one of the default handler runs.
//!
//! And the other order on 1.7: gpuslice first, then the toolkit writing its drop-in from
//! `containerd config dump` and appending its glob behind gpuslice's `imports` entry, then
//! gpuslice again (as its DaemonSet at every start): only the glob is left in `imports`, the
//! drop-in carries NVIDIA's classes, and the same checks pass.

use anyhow::{ensure, Context, Result};
use gpuslice_e2e::containerd::Containerd;
use gpuslice_e2e::cri;
use gpuslice_e2e::gate::{containerd_needs, require};
use gpuslice_e2e::paths::{self, ContainerdBins};
use gpuslice_e2e::procs::run_ok;
use gpuslice_e2e::stock::{
    config_dump, echo_container, fixture, localise, pod, run_pod, run_sliced_pod, stock_text,
    table, Stock,
};
use gpuslice_e2e::suite::{assert_one_gib_slice, Node};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use toml_edit::{DocumentMut, Item};

/// The CRI runtime plugin's table keys of a config version.
fn cri_keys(version: i64) -> [&'static str; 2] {
    if version >= 3 {
        ["plugins", "io.containerd.cri.v1.runtime"]
    } else {
        ["plugins", "io.containerd.grpc.v1.cri"]
    }
}

/// NVIDIA's stand-in runtime: logs its arguments to `calls`, then is runc.
fn stand_in(dir: &Path, calls: &Path) -> Result<std::path::PathBuf> {
    let path = dir.join("nvidia-container-runtime");
    let text = format!(
        "#!/bin/sh\necho \"$@\" >> {}\nexec {} \"$@\"\n",
        calls.display(),
        paths::runc().display()
    );
    std::fs::write(&path, text)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    Ok(path)
}

/// Writes what the toolkit writes beside `main` (already localised): the glob import appended
/// to the main file's `imports` and `conf.d/99-nvidia.toml` with its classes pointing at
/// `runtime`, on version 2 over a copy of the CRI table of `source` (the toolkit's
/// `--config-source`: the main file, or `containerd config dump`'s output).
fn install_nvidia(cfg: &Path, dir: &Path, runtime: &Path, source: Option<&str>) -> Result<i64> {
    let mut main: DocumentMut = std::fs::read_to_string(cfg)?.parse()?;
    let version = main.get("version").and_then(Item::as_integer).unwrap_or(1);
    let glob = format!("{}/conf.d/*.toml", dir.display());
    let mut imports = main
        .get("imports")
        .and_then(Item::as_array)
        .cloned()
        .unwrap_or_default();
    imports.push(glob);
    main.insert("imports", Item::Value(imports.into()));
    std::fs::write(cfg, main.to_string())?;
    let source: DocumentMut = match source {
        Some(text) => text.parse().context("the toolkit's source config")?,
        None => main.clone(),
    };
    let name = if version >= 3 {
        "99-nvidia.v3.toml"
    } else {
        "99-nvidia.v2.toml"
    };
    let nvidia: DocumentMut =
        std::fs::read_to_string(fixture(&format!("nvidia/{name}")))?.parse()?;
    let keys = cri_keys(version);
    let runtimes = [&keys[..], &["containerd", "runtimes"]].concat();
    let classes = nvidia
        .as_table()
        .get(keys[0])
        .and_then(|p| p.get(keys[1]))
        .and_then(|c| c.get("containerd"))
        .and_then(|c| c.get("runtimes"))
        .and_then(Item::as_table)
        .context("the fixture's runtimes")?
        .clone();
    // Version 2: the toolkit's source table copied (the main file's), then its classes.
    let mut out = DocumentMut::new();
    out.insert("version", toml_edit::value(version));
    if version < 3 {
        let cri = source
            .get(keys[0])
            .and_then(|p| p.get(keys[1]))
            .cloned()
            .context("the main file's CRI table")?;
        table(out.as_table_mut(), &keys[..1]).insert(keys[1], cri);
    }
    let target = table(out.as_table_mut(), &runtimes);
    for (name, class) in classes.iter().filter(|(n, _)| n.starts_with("nvidia")) {
        let mut class = class.clone();
        class["options"]["BinaryName"] = toml_edit::value(runtime.display().to_string());
        target.insert(name, class);
    }
    std::fs::create_dir_all(dir.join("conf.d"))?;
    std::fs::write(dir.join("conf.d/99-nvidia.toml"), out.to_string())?;
    Ok(version)
}

/// The CRI runtime classes of `containerd config dump`.
fn dumped_classes(bins: &ContainerdBins, cfg: &Path) -> Result<Vec<String>> {
    let out = config_dump(bins, cfg)?;
    let doc: DocumentMut = out.parse().context("config dump does not parse")?;
    let cri = if bins.major() >= 2 {
        "io.containerd.cri.v1.runtime"
    } else {
        "io.containerd.grpc.v1.cri"
    };
    let mut names: Vec<String> = doc["plugins"][cri]["containerd"]["runtimes"]
        .as_table()
        .with_context(|| format!("no runtimes in the dump:\n{out}"))?
        .iter()
        .map(|(k, _)| k.to_string())
        .collect();
    names.sort();
    Ok(names)
}

/// `gpuslice configure containerd` for the series of `bins`; its output.
fn configure(bins: &ContainerdBins, cfg: &Path) -> Result<String> {
    run_ok(
        Command::new(paths::product("gpuslice"))
            .args(["configure", "containerd", "--containerd-major"])
            .arg(bins.major().to_string())
            .arg("--file")
            .arg(cfg),
        Duration::from_secs(30),
    )
}

/// The four classes in containerd's own merge, then containerd started on the result: Pods of
/// the default handler, of `nvidia` (its stand-in logged a `create` in `calls`) and of
/// `gpuslice` (1 GiB seen and enforced).
fn all_classes_run(c: &Case) -> Result<()> {
    let (bins, node, arbiter, cfg, calls) = (&c.bins, &c.node, &c.arbiter, &c.cfg, &c.calls);
    let series = &bins.series;
    let classes = dumped_classes(bins, cfg)?;
    ensure!(
        classes == ["gpuslice", "nvidia", "nvidia-cdi", "runc"],
        "{series}: classes in `containerd config dump`: {classes:?}"
    );
    let dir = cfg.parent().context("config dir")?;
    let ctd = Containerd::start_from_file(bins, dir, cfg, &arbiter.client_env())?;
    let client = cri::client_with_image(&ctd, node)?;
    let logs = node.scratch.dir("pod-logs")?;
    for handler in ["", "nvidia"] {
        let name = if handler.is_empty() { "plain" } else { handler };
        let out = run_pod(
            &client,
            &ctd,
            &pod(name, handler, &logs, vec![]),
            &echo_container(name),
        )?;
        ensure!(out.contains(&format!("{name}-ok")), "{handler:?}:\n{out}");
    }
    let called = std::fs::read_to_string(calls).unwrap_or_default();
    ensure!(
        called.contains("create"),
        "{series}: the nvidia class's BinaryName never ran:\n{called}"
    );
    let out = run_sliced_pod(&client, &ctd, node, &logs)?;
    assert_one_gib_slice(&out)
}

/// One case's node: the series, a node with its arbiter, the series' `config default` made
/// private to the test in `dir/config.toml`. Fields drop in order: the arbiter before the
/// node's scratch directory.
struct Case {
    arbiter: gpuslice_e2e::Arbiter,
    node: Node,
    bins: ContainerdBins,
    dir: PathBuf,
    cfg: PathBuf,
    calls: PathBuf,
}

impl Case {
    /// `None` when the suite cannot run here.
    fn new(series: &str, tag: &str) -> Result<Option<Case>> {
        let bins = paths::containerd(series);
        if !require(&format!("coexist-nvidia/{tag}"), &containerd_needs(&bins)) {
            return Ok(None);
        }
        let node = Node::new(&format!("nv-{tag}"))?;
        let arbiter = node.start_arbiter()?;
        let dir = node.scratch.dir("ctd")?;
        let cfg = dir.join("config.toml");
        std::fs::write(&cfg, localise(&stock_text(&bins, &Stock::Default)?, &dir)?)?;
        let calls = dir.join("nvidia-calls");
        Ok(Some(Case {
            arbiter,
            node,
            bins,
            dir,
            cfg,
            calls,
        }))
    }
}

/// NVIDIA's toolkit first, then gpuslice.
fn coexist(series: &str) -> Result<()> {
    let Some(c) = Case::new(series, series)? else {
        return Ok(());
    };
    let version = install_nvidia(&c.cfg, &c.dir, &stand_in(&c.dir, &c.calls)?, None)?;

    let out = configure(&c.bins, &c.cfg)?;
    ensure!(out.contains("created:"), "configure:\n{out}");
    let drop_in = std::fs::read_to_string(c.dir.join("conf.d/gpuslice.toml"))?;
    println!("{series}: the drop-in\n{drop_in}");
    let carries_nvidia = drop_in.contains(".nvidia]");
    ensure!(
        carries_nvidia == (c.bins.major() == 1),
        "{series}: the drop-in carries NVIDIA's class: {carries_nvidia} (version {version})"
    );
    all_classes_run(&c)
}

/// gpuslice first (its `imports` entry names the drop-in), then NVIDIA's toolkit from
/// `containerd config dump` (appending its glob behind that entry, so on 1.x its copy, which
/// holds the gpuslice class from the dump, loads last), then gpuslice again as its DaemonSet
/// does at every start: the entry naming the drop-in goes (the glob covers it and loads it
/// after `99-nvidia.toml`), and every class still runs.
fn nvidia_after_gpuslice(series: &str) -> Result<()> {
    let Some(c) = Case::new(series, &format!("{series}-second"))? else {
        return Ok(());
    };
    ensure!(configure(&c.bins, &c.cfg)?.contains("created:"));
    let dump = config_dump(&c.bins, &c.cfg)?;
    install_nvidia(&c.cfg, &c.dir, &stand_in(&c.dir, &c.calls)?, Some(&dump))?;
    let before: DocumentMut = std::fs::read_to_string(&c.cfg)?.parse()?;
    ensure!(
        before["imports"].as_array().map_or(0, |a| a.len()) == 2,
        "gpuslice's entry, then NVIDIA's glob:\n{before}"
    );

    let out = configure(&c.bins, &c.cfg)?;
    ensure!(out.contains("updated:"), "rerun:\n{out}");
    let main: DocumentMut = std::fs::read_to_string(&c.cfg)?.parse()?;
    let imports: Vec<&str> = main["imports"]
        .as_array()
        .context("imports")?
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    ensure!(
        imports == [format!("{}/conf.d/*.toml", c.dir.display())],
        "only NVIDIA's glob is left: {imports:?}"
    );
    let drop_in = std::fs::read_to_string(c.dir.join("conf.d/gpuslice.toml"))?;
    ensure!(drop_in.contains(".nvidia]"), "{drop_in}");
    all_classes_run(&c)
}

#[test]
fn gpuslice_beside_nvidia_toolkit_on_containerd_1_6() -> Result<()> {
    coexist("1.6")
}

#[test]
fn gpuslice_beside_nvidia_toolkit_on_containerd_1_7() -> Result<()> {
    coexist("1.7")
}

#[test]
fn gpuslice_beside_nvidia_toolkit_on_containerd_2_1() -> Result<()> {
    coexist("2.1")
}

#[test]
fn nvidia_toolkit_after_gpuslice_then_gpuslice_again_on_containerd_1_7() -> Result<()> {
    nvidia_after_gpuslice("1.7")
}
