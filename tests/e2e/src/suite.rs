//! Shared set-up and assertions of the suites: a node (scratch directory, simulated GPU, test
//! image), the workload command lines, and the checks "sees the whole device" / "sees and is
//! held to a 1 GiB slice".

use crate::image::{self, TestImage, WORKLOAD};
use crate::scratch::Scratch;
use crate::sim::{SimNode, DEVICE_MEM};
use crate::{workload, Arbiter, GIB};
use anyhow::{ensure, Context, Result};
use std::process::Output;

/// One test's node.
#[derive(Debug)]
pub struct Node {
    /// The simulated GPU (its state lives in the scratch directory).
    pub sim: SimNode,
    /// The test image.
    pub image: TestImage,
    /// The scratch directory (dropped last).
    pub scratch: Scratch,
}

impl Node {
    /// Scratch directory, simulated node and image, for a test tagged `tag`.
    pub fn new(tag: &str) -> Result<Self> {
        Self::with_devices(tag, crate::sim::DEVICES)
    }

    /// The dist tree's `gpuslice-arbiter` on this node, in `scratch/arbiter` (`state/`,
    /// `config.toml`, `arbiter.log`): the simulated NVML, metrics off (no fixed port), fail
    /// closed; returns once it answers.
    pub fn start_arbiter(&self) -> Result<Arbiter> {
        self.start_arbiter_config("[metrics]\nenabled = false\n")
    }

    /// [`Node::start_arbiter`] serving metrics on a free loopback port; returns the arbiter and
    /// the endpoint's `host:port` (from its log).
    pub fn start_arbiter_with_metrics(&self) -> Result<(Arbiter, String)> {
        let a = self.start_arbiter_config("[metrics]\nlisten = \"127.0.0.1:0\"\n")?;
        let addr = a
            .metrics_address(std::time::Duration::from_secs(10))
            .map_err(anyhow::Error::msg)?;
        Ok((a, addr))
    }

    fn start_arbiter_config(&self, metrics: &str) -> Result<Arbiter> {
        let mut a = Arbiter::new(
            crate::paths::product("gpuslice-arbiter"),
            &self.scratch.dir("arbiter")?,
            &format!("fail = \"closed\"\n\n{metrics}"),
        )?;
        a.envs(self.sim.host_env()).start()?;
        Ok(a)
    }

    /// [`Node::new`] with the simulated devices `devices` (`GPUSLICE_SIM_DEVICES`).
    pub fn with_devices(tag: &str, devices: &str) -> Result<Self> {
        crate::procs::become_subreaper();
        let scratch = Scratch::new(tag);
        let sim = SimNode::with_devices(&scratch, devices)?;
        let image = image::build(&scratch.dir("image")?)?;
        Ok(Self {
            sim,
            image,
            scratch,
        })
    }
}

/// The node most containerd suites run on: a [`Node`], an arbiter on it, and containerd `series`
/// with `gpuslice-runtime` as its runc binary and the test image imported. Fields drop in
/// order: containerd, then the arbiter, then the node's scratch directory.
pub struct RuntimeNode {
    /// containerd.
    pub ctd: crate::containerd::Containerd,
    /// The arbiter.
    pub arbiter: Arbiter,
    /// The node.
    pub node: Node,
    /// `gpuslice-runtime` of the dist tree (the runc binary to name in `ctr run`).
    pub rt: std::path::PathBuf,
}

impl RuntimeNode {
    /// Starts it for the suite `suite` (tagged `tag`); `None` (the suite is skipped, as
    /// [`crate::gate::require`] reports) when root, the engines or the dist tree are missing.
    pub fn start(series: &str, suite: &str, tag: &str) -> Result<Option<RuntimeNode>> {
        let bins = crate::paths::containerd(series);
        if !crate::gate::require(suite, &crate::gate::containerd_needs(&bins)) {
            return Ok(None);
        }
        let node = Node::new(tag)?;
        let arbiter = node.start_arbiter()?;
        let rt = crate::paths::product("gpuslice-runtime");
        let ctd = crate::containerd::Containerd::start(
            &bins,
            &node.scratch,
            &crate::containerd::Options {
                gpuslice_runtime: Some(rt.clone()),
                env: arbiter.client_env(),
            },
        )?;
        ctd.import(&node.image.oci)?;
        Ok(Some(RuntimeNode {
            ctd,
            arbiter,
            node,
            rt,
        }))
    }
}

/// `gpuslice-workload info` followed by `fill --chunk 256Mi`, in one container (via `sh -c`).
pub fn info_and_fill() -> Vec<String> {
    vec![
        "/bin/sh".into(),
        "-c".into(),
        format!("{WORKLOAD} info && echo --- && {WORKLOAD} fill --chunk 256Mi"),
    ]
}

/// The output's stdout, or an error with everything when the run failed.
pub fn stdout_ok(what: &str, o: &Output) -> Result<String> {
    ensure!(
        o.status.success(),
        "{what} failed: {}",
        crate::procs::describe(o)
    );
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

/// `info` + `fill` output of a container with no slice: the whole simulated device, OOM only
/// at the device's capacity.
pub fn assert_whole_device(out: &str) -> Result<()> {
    let (info, fill) = out
        .split_once("---")
        .context("no --- separator in output")?;
    ensure!(
        workload::get_u64(info, "total_mem") == Some(DEVICE_MEM),
        "cuDeviceTotalMem: expected {DEVICE_MEM}:\n{out}"
    );
    ensure!(
        workload::get_u64(info, "meminfo_total") == Some(DEVICE_MEM),
        "cuMemGetInfo total: expected {DEVICE_MEM}:\n{out}"
    );
    let nvml = workload::line_with(info, "nvml_device");
    ensure!(
        nvml.get("total").and_then(|v| v.parse::<u64>().ok()) == Some(DEVICE_MEM),
        "NVML total: expected {DEVICE_MEM}:\n{out}"
    );
    let bytes = workload::get_u64(fill, "bytes").context("fill printed no bytes=")?;
    ensure!(
        workload::get(fill, "refusal").as_deref() == Some("CUDA_ERROR_OUT_OF_MEMORY"),
        "fill did not end in CUDA_ERROR_OUT_OF_MEMORY:\n{out}"
    );
    ensure!(
        bytes > DEVICE_MEM - 2 * GIB && bytes < DEVICE_MEM,
        "fill got {bytes} bytes on an unsliced {DEVICE_MEM}-byte device:\n{out}"
    );
    Ok(())
}

/// `info` + `fill` output of a container with a 1 GiB slice: every query reports 1 GiB and
/// allocation stops with OOM at exactly 1 GiB.
pub fn assert_one_gib_slice(out: &str) -> Result<()> {
    assert_capped_slice(out, GIB)
}

/// `info` + `fill` output of a container with a slice capped at `cap` bytes (a multiple of the
/// 256 MiB chunk): every query reports `cap` and allocation stops with OOM at exactly `cap`.
pub fn assert_capped_slice(out: &str, cap: u64) -> Result<()> {
    let nvml = workload::line_with(out, "nvml_device");
    capped(out, cap, &nvml)
}

/// [`assert_capped_slice`] on a node with several GPUs, the slice on the one with `uuid`: CUDA's
/// only device is that GPU (its `name` is `name`), and NVML's row of that UUID reports `cap`.
/// NVML's other rows are not judged: the simulated NVML lists every GPU of the node, where on a
/// real node the container has only its GPU's device node.
pub fn assert_capped_slice_on(out: &str, cap: u64, uuid: &str, name: &str) -> Result<()> {
    let nvml = out
        .lines()
        .map(workload::tokens)
        .find(|t| {
            t.iter().any(|(k, _)| k == "nvml_device")
                && t.iter().any(|(k, v)| k == "uuid" && v == uuid)
        })
        .map(|t| t.into_iter().collect())
        .unwrap_or_default();
    ensure!(
        workload::get(out, "name").as_deref() == Some(name),
        "CUDA's device 0 is not {name}:\n{out}"
    );
    ensure!(
        !out.lines().any(|l| l.starts_with("device=1 ")),
        "CUDA shows more than the slice's GPU:\n{out}"
    );
    capped(out, cap, &nvml)
}

fn capped(out: &str, cap: u64, nvml: &std::collections::BTreeMap<String, String>) -> Result<()> {
    let (info, fill) = out
        .split_once("---")
        .context("no --- separator in output")?;
    ensure!(
        workload::get_u64(info, "total_mem") == Some(cap),
        "cuDeviceTotalMem: expected {cap}:\n{out}"
    );
    ensure!(
        workload::get_u64(info, "meminfo_total") == Some(cap),
        "cuMemGetInfo total: expected {cap}:\n{out}"
    );
    ensure!(
        nvml.get("total").and_then(|v| v.parse::<u64>().ok()) == Some(cap),
        "NVML total: expected {cap}:\n{out}"
    );
    ensure!(
        workload::get(fill, "refusal").as_deref() == Some("CUDA_ERROR_OUT_OF_MEMORY"),
        "fill did not end in CUDA_ERROR_OUT_OF_MEMORY:\n{out}"
    );
    ensure!(
        workload::get_u64(fill, "bytes") == Some(cap),
        "fill with 256Mi chunks must stop at exactly {cap} bytes:\n{out}"
    );
    Ok(())
}

/// One row of the dist tree's `gpuslice doctor` run with `args` and `env`, engines looked up
/// first in `bin_dir`: `(status, detail)` of the row named `row` (`containerd-daemon`, …).
pub fn doctor_row(
    args: &[&std::ffi::OsStr],
    env: &[(String, String)],
    bin_dir: &std::path::Path,
    row: &str,
) -> Result<(String, String)> {
    let out = std::process::Command::new(crate::paths::product("gpuslice"))
        .arg("doctor")
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env(
            "PATH",
            format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", bin_dir.display()),
        )
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some(row))
        .with_context(|| format!("no {row} row:\n{text}"))?;
    let mut f = line.split_whitespace().skip(1);
    let status = f.next().unwrap_or("").to_string();
    Ok((status, f.collect::<Vec<_>>().join(" ")))
}
