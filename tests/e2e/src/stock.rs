//! Stock containerd configurations made runnable in a test, and one-container Pods: shared by
//! the suites that configure a real containerd's own files (`configure_stock`,
//! `coexist_nvidia`).

use crate::containerd::Containerd;
use crate::cri::{self, ContainerSpec, Cri, PodGuard, PodSpec};
use crate::image::IMAGE;
use crate::paths::{self, ContainerdBins};
use crate::procs::run_ok;
use anyhow::{ensure, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use toml_edit::{DocumentMut, Item, Table};

const T: Duration = Duration::from_secs(120);

/// Where a stock configuration comes from.
pub enum Stock {
    /// A file under `cli/tests/fixtures/configure/`.
    Fixture(&'static str),
    /// A file inside the series' own package (`etc/containerd/config.toml` of the unpacked .deb).
    Packaged,
    /// `containerd config default` of the series.
    Default,
}

/// A file under `cli/tests/fixtures/configure/`.
pub fn fixture(name: &str) -> PathBuf {
    paths::workspace()
        .join("cli/tests/fixtures/configure")
        .join(name)
}

/// The text of a stock configuration of the series `bins`.
pub fn stock_text(bins: &ContainerdBins, stock: &Stock) -> Result<String> {
    Ok(match stock {
        Stock::Fixture(name) => std::fs::read_to_string(fixture(name))
            .with_context(|| format!("reading fixture {name}"))?,
        Stock::Packaged => {
            let p = bins.bin.join("../../etc/containerd/config.toml");
            std::fs::read_to_string(&p)
                .with_context(|| format!("the package's config {}", p.display()))?
        }
        Stock::Default => run_ok(
            Command::new(bins.containerd()).args(["config", "default"]),
            Duration::from_secs(30),
        )?,
    })
}

/// The table at `keys`, created where missing.
pub fn table<'a>(doc: &'a mut Table, keys: &[&str]) -> &'a mut Table {
    let mut t = doc;
    for k in keys {
        let item = t.entry(k).or_insert_with(|| {
            let mut n = Table::new();
            n.set_implicit(true);
            Item::Table(n)
        });
        t = item.as_table_mut().expect("a table");
    }
    t
}

/// The stock file made private to this test and runnable on this machine (nothing else of it
/// changes): root, state, sockets and the opt plugin under `dir`, NRI off, CRI with
/// `restrict_oom_score_adj` and the local image as sandbox image.
pub fn localise(text: &str, dir: &Path) -> Result<String> {
    let mut doc: DocumentMut = text.parse().context("stock config does not parse")?;
    let d = dir.display();
    let version = doc.get("version").and_then(Item::as_integer).unwrap_or(1);
    ensure!(version >= 2, "the stock cases are versions 2 and 3");
    let root = doc.as_table_mut();
    root.insert("root", toml_edit::value(format!("{d}/root")));
    root.insert("state", toml_edit::value(format!("{d}/state")));
    let mut disabled = root
        .get("disabled_plugins")
        .and_then(Item::as_array)
        .cloned()
        .unwrap_or_default();
    disabled.push("io.containerd.nri.v1.nri");
    root.insert("disabled_plugins", Item::Value(disabled.into()));
    table(root, &["grpc"]).insert("address", toml_edit::value(format!("{d}/c.sock")));
    table(root, &["ttrpc"]).insert("address", toml_edit::value(format!("{d}/c.sock.ttrpc")));
    if let Some(debug) = root.get_mut("debug").and_then(Item::as_table_mut) {
        debug.insert("address", toml_edit::value(""));
    }
    table(root, &["plugins", "io.containerd.internal.v1.opt"])
        .insert("path", toml_edit::value(format!("{d}/opt")));
    if version == 2 {
        let cri = table(root, &["plugins", "io.containerd.grpc.v1.cri"]);
        cri.insert("restrict_oom_score_adj", toml_edit::value(true));
        cri.insert("sandbox_image", toml_edit::value(IMAGE));
    } else {
        table(root, &["plugins", "io.containerd.cri.v1.runtime"])
            .insert("restrict_oom_score_adj", toml_edit::value(true));
        table(
            root,
            &["plugins", "io.containerd.cri.v1.images", "pinned_images"],
        )
        .insert("sandbox", toml_edit::value(IMAGE));
    }
    Ok(doc.to_string())
}

/// A Pod of `handler` (empty: the default) logging under `log_dir`.
pub fn pod(
    name: &str,
    handler: &str,
    log_dir: &Path,
    annotations: Vec<(String, String)>,
) -> PodSpec {
    PodSpec {
        name: name.into(),
        uid: format!("uid-{name}-{}", std::process::id()),
        annotations,
        log_dir: log_dir.to_path_buf(),
        handler: handler.into(),
    }
}

/// Runs one container in a new Pod of `handler` to its exit; returns its log.
pub fn run_pod(
    client: &Cri,
    ctd: &Containerd,
    spec: &PodSpec,
    container: &ContainerSpec,
) -> Result<String> {
    let sandbox = client.run_pod(spec).with_context(|| {
        format!(
            "RunPodSandbox (handler {:?}); containerd log:\n{}",
            spec.handler,
            ctd.log_tail(30)
        )
    })?;
    let guard = PodGuard {
        cri: client,
        id: sandbox.clone(),
    };
    let id = client
        .create_container(&sandbox, spec, container)
        .with_context(|| format!("CreateContainer; log:\n{}", ctd.log_tail(30)))?;
    client.start_container(&id)?;
    let st = client.wait_exited(&id, T)?;
    let out = cri::read_log(&spec.log_dir.join(container.log_path()))?;
    ensure!(
        st.exit_code == 0,
        "container of handler {:?} exited {} ({}):\n{out}",
        spec.handler,
        st.exit_code,
        st.reason
    );
    guard.remove()?;
    Ok(out)
}

/// A container that prints `<name>-ok` and exits 0.
pub fn echo_container(name: &str) -> ContainerSpec {
    ContainerSpec {
        name: name.into(),
        command: vec!["/bin/sh".into(), "-c".into(), format!("echo {name}-ok")],
        env: vec![],
        mounts: vec![],
        annotations: vec![],
    }
}

/// Runs the simulated-GPU info-and-fill workload in a Pod of the `gpuslice` handler asking
/// `gpuslice.io/memory: 1Gi`; returns its log.
pub fn run_sliced_pod(
    client: &Cri,
    ctd: &Containerd,
    node: &crate::suite::Node,
    log_dir: &Path,
) -> Result<String> {
    let sliced = ContainerSpec {
        name: "sliced".into(),
        command: crate::suite::info_and_fill(),
        env: crate::sim::env_pairs(node.sim.container_env()),
        mounts: node.sim.container_binds(),
        annotations: vec![],
    };
    let spec = pod(
        "sliced",
        "gpuslice",
        log_dir,
        vec![("gpuslice.io/memory".into(), "1Gi".into())],
    );
    run_pod(client, ctd, &spec, &sliced)
}

/// `containerd config dump` of the series `bins` for the config file `cfg`: containerd's own
/// merge of the file and its imports.
pub fn config_dump(bins: &ContainerdBins, cfg: &Path) -> Result<String> {
    run_ok(
        Command::new(bins.containerd())
            .arg("--config")
            .arg(cfg)
            .args(["config", "dump"]),
        Duration::from_secs(30),
    )
}
