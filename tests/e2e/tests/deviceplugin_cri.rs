//! The device-plugin path to a container, on real containerd 1.6 and 2.1, the real arbiter, the
//! real `gpuslice-kubelet-plugin --mode device-plugin` binary of the dist tree and the simulated
//! heterogeneous node (H100-class 80 GiB at index 0, A100-class 40 GiB at index 1).
//!
//! **No real kubelet ran** — none can be obtained on these machines — nor a scheduler or API
//! server. kubelet's part is played by the kubelet stand-in
//! (`gpuslice_test_support::kubelet`): it serves kubelet's `Registration` on
//! `<dir>/kubelet.sock`, dials the plugin back (`GetDevicePluginOptions`, `ListAndWatch`), and
//! for each container does what kubelet's device manager does (the free healthy ids,
//! `GetPreferredAllocation`, `Allocate`), all over the real device plugin API v1beta1 and real
//! unix sockets. Then, as kubelet would, it creates the container through CRI with the
//! RuntimeClass handler `gpuslice` and the environment `Allocate` returned.
//!
//! Checked: each GPU advertises its memory less eight of its own measured context charges in
//! 1 GiB units (72 + 32 with the simulator's H200 costs); Pods of 30, 30 and 40 units go to the
//! A100, the H100 and the H100, all three running at once, each a slice at the arbiter on
//! exactly that GPU with exactly that cap; each container sees its cap in `cuDeviceTotalMem`,
//! `cuMemGetInfo` and NVML, on that GPU (name and UUID), and gets `CUDA_ERROR_OUT_OF_MEMORY` at
//! exactly its cap; a fourth Pod of 50 is refused by the preferred allocation naming both GPUs' free units; a
//! container whose Pod annotation `gpuslice.io/memory` disagrees with its allocation is refused
//! at start with the runtime's message and gets no slice; afterwards nothing is left behind, and
//! the plugin stops on SIGTERM removing its socket.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use gpuslice_api::protocol::{Request, Response};
use gpuslice_api::NodeStatus;
use gpuslice_e2e::containerd::{Containerd, Options};
use gpuslice_e2e::cri::{self, ContainerSpec, PodGuard, PodSpec};
use gpuslice_e2e::daemon::Daemon;
use gpuslice_e2e::gate::{containerd_needs, require, Need};
use gpuslice_e2e::image::WORKLOAD;
use gpuslice_e2e::paths;
use gpuslice_e2e::sim::TWO_DEVICES;
use gpuslice_e2e::snapshot::Snapshot;
use gpuslice_e2e::suite::{assert_capped_slice_on, Node};
use gpuslice_e2e::Arbiter;
use gpuslice_kubelet_plugin::deviceplugin::{RESOURCE, SOCKET};
use gpuslice_oci::client::Client;
use gpuslice_test_support::kubelet::{healthy, Kubelet};

const T: Duration = Duration::from_secs(180);
const WAIT: Duration = Duration::from_secs(30);
const GIB: u64 = 1 << 30;

fn status(arbiter: &Arbiter) -> Result<NodeStatus> {
    let mut c = Client::connect(&arbiter.state_dir, Duration::from_secs(10))?;
    match c.call(Request::Status {})? {
        Response::Status(st) => Ok(st),
        other => bail!("arbiter status: {other:?}"),
    }
}

/// Whole GiB units the device plugin advertises for `d`: its memory less eight measured
/// per-process charges.
fn advertised_units(d: &gpuslice_api::protocol::DeviceStatus) -> Result<usize> {
    let charge = d
        .context
        .as_ref()
        .with_context(|| format!("{}: no context footprint in status", d.name))?
        .charge;
    let units = d.memory_total.saturating_sub(8 * charge) / GIB;
    usize::try_from(units).context("units")
}

/// The container kubelet would create: the image's workload (`info`, then `fill` holding what
/// it got for a while, so the three Pods hold their slices at once), the simulated node's
/// environment and mounts, and the environment `Allocate` returned.
fn container(node: &Node, name: &str, allocate_env: &[(String, String)]) -> ContainerSpec {
    let env = gpuslice_e2e::sim::env_pairs(node.sim.container_env())
        .into_iter()
        .chain(allocate_env.iter().cloned())
        .collect();
    ContainerSpec {
        name: name.into(),
        command: vec![
            "/bin/sh".into(),
            "-c".into(),
            format!("{WORKLOAD} info && echo --- && {WORKLOAD} fill --chunk 256Mi --hold-ms 10000"),
        ],
        env,
        mounts: node.sim.container_binds(),
        annotations: vec![],
    }
}

fn env_of<'a>(env: &'a [(String, String)], key: &str) -> Option<&'a str> {
    env.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// One placed Pod: its sandbox guard, container and what kubelet chose.
struct Placed<'a> {
    name: String,
    units: u64,
    uuid: String,
    id: String,
    spec: ContainerSpec,
    guard: PodGuard<'a>,
}

fn device_plugin_to_containers(series: &str) -> Result<()> {
    let bins = paths::containerd(series);
    let suite = format!("deviceplugin-cri-{series}");
    let mut needs = containerd_needs(&bins);
    needs.push(Need::Binary(paths::product("gpuslice-kubelet-plugin")));
    if !require(&suite, &needs) {
        return Ok(());
    }
    let t0 = Instant::now();
    let node = Node::with_devices(&format!("dp{}", series.replace('.', "")), TWO_DEVICES)?;
    let arbiter = node.start_arbiter()?;
    let st = status(&arbiter)?;
    ensure!(
        st.devices.len() == 2,
        "the node's devices: {:?}",
        st.devices
    );
    let (h100, a100) = (st.devices[0].clone(), st.devices[1].clone());
    ensure!(
        h100.name.contains("H100") && a100.name.contains("A100"),
        "{h100:?} {a100:?}"
    );
    // What the plugin must advertise: each GPU's memory less eight of the arbiter's measured
    // per-process charges (the plugin's default reserve), in whole GiB units (76 + 36 when a
    // context was charged 512 MiB; 72 + 32 with the simulator's H200 costs, each GPU its own).
    let (h100_units, a100_units) = (advertised_units(&h100)?, advertised_units(&a100)?);
    let ctd = Containerd::start(
        &bins,
        &node.scratch,
        &Options {
            gpuslice_runtime: Some(paths::product("gpuslice-runtime")),
            env: arbiter.client_env(),
        },
    )?;
    let client = cri::client_with_image(&ctd, &node)?;

    // kubelet (the stand-in) and the plugin binary, as the DaemonSet runs it.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let dp_dir = node.scratch.join("device-plugins");
    let mut kubelet = rt.block_on(async { Kubelet::start(&dp_dir) })?;
    let plugin_dir = node.scratch.dir("kubelet-plugin")?;
    let mut cmd = Command::new(paths::product("gpuslice-kubelet-plugin"));
    cmd.args(["--mode", "device-plugin", "--node-name", "e2e-node"])
        .arg("--state-dir")
        .arg(&arbiter.state_dir)
        .arg("--config")
        .arg(&arbiter.config)
        .arg("--device-plugin-dir")
        .arg(&dp_dir)
        .args(["--device-plugin-poll", "1", "--unit", "1Gi"])
        .envs(node.sim.host_env());
    let mut plugin = Daemon::spawn(
        "gpuslice-kubelet-plugin",
        cmd,
        &plugin_dir.join("plugin.log"),
        &plugin_dir,
    )?;
    let regs = rt
        .block_on(kubelet.wait_registrations(1, WAIT))
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("plugin log:\n{}", plugin.log_tail(30)))?;
    ensure!(
        regs[0].resource_name == RESOURCE && regs[0].endpoint == SOCKET,
        "{regs:?}"
    );
    let devs = rt
        .block_on(kubelet.wait_devices(
            &format!("{h100_units} + {a100_units} healthy units"),
            WAIT,
            |d| healthy(d, &h100.uuid) == h100_units && healthy(d, &a100.uuid) == a100_units,
        ))
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("plugin log:\n{}", plugin.log_tail(30)))?;
    println!(
        "advertised {RESOURCE}: {} units ({} on {} {}, {} on {} {})",
        devs.len(),
        healthy(&devs, &h100.uuid),
        h100.name,
        h100.uuid,
        healthy(&devs, &a100.uuid),
        a100.name,
        a100.uuid
    );
    // Everything is up: what is there now must be all that is there at the end.
    let before = Snapshot::take(Some(&arbiter.state_dir));

    let log_dir = node.scratch.dir("pod-logs")?;
    let mut allocated = BTreeSet::new();
    let mut placed = Vec::new();
    for (name, units) in [("pod-a", 30u64), ("pod-b", 30), ("pod-c", 40)] {
        let got = rt
            .block_on(kubelet.allocate(&mut allocated, units as i32))
            .map_err(anyhow::Error::msg)
            .with_context(|| format!("{name}: allocation of {units} units"))?;
        let uuid = env_of(&got.envs, "GPUSLICE_DEVICES")
            .context("Allocate set no GPUSLICE_DEVICES")?
            .to_string();
        ensure!(
            env_of(&got.envs, "GPUSLICE_MEMORY") == Some(&(units * GIB).to_string()),
            "{name}: Allocate env {:?}",
            got.envs
        );
        let (pod, guard) = client
            .start_pod(name, "gpuslice", &log_dir)
            .with_context(|| format!("RunPodSandbox; containerd log:\n{}", ctd.log_tail(30)))?;
        let spec = container(&node, &format!("{name}-train"), &got.envs);
        let sandbox = guard.id.clone();
        let id = client
            .create_container(&sandbox, &pod, &spec)
            .with_context(|| format!("CreateContainer {name}; log:\n{}", ctd.log_tail(30)))?;
        client
            .start_container(&id)
            .with_context(|| format!("StartContainer {name}; log:\n{}", ctd.log_tail(30)))?;
        println!("{name}: {units} units → {uuid} (container {id})");
        placed.push(Placed {
            name: name.into(),
            units,
            uuid,
            id,
            spec,
            guard,
        });
    }
    // Bin-packed, none split: 30 on the A100 (33 → 3), 30 then 40 on the H100 (73 → 43 → 3).
    let chosen: Vec<(&str, &str)> = placed
        .iter()
        .map(|p| (p.name.as_str(), p.uuid.as_str()))
        .collect();
    ensure!(
        chosen
            == [
                ("pod-a", a100.uuid.as_str()),
                ("pod-b", h100.uuid.as_str()),
                ("pod-c", h100.uuid.as_str())
            ],
        "placement: {chosen:?}"
    );
    // All three slices at once, each on the chosen GPU with its cap.
    let st = status(&arbiter)?;
    for p in &placed {
        let s = st
            .slices
            .iter()
            .find(|s| s.slice_id == p.id)
            .with_context(|| format!("{}: no slice {} at the arbiter: {st:?}", p.name, p.id))?;
        ensure!(
            s.devices.len() == 1
                && s.devices[0].uuid == p.uuid
                && s.devices[0].memory_cap == Some(p.units * GIB),
            "{}: slice {s:?}",
            p.name
        );
    }
    for d in &st.devices {
        println!(
            "arbiter: {} {} committed {} GiB of {} GiB",
            d.name,
            d.uuid,
            d.memory_committed / GIB,
            d.memory_total / GIB
        );
    }

    // A fourth Pod of 50: no single GPU has it; kubelet's admission would fail the Pod.
    let e = rt
        .block_on(kubelet.allocate(&mut allocated, 50))
        .err()
        .context("a Pod of 50 units was allocated")?;
    println!("pod-d of 50 units: {e}");
    ensure!(
        e.starts_with("ResourceExhausted: gpuslice.io/gpu-memory: the container asks 50 units")
            && e.contains(&format!(
                "GPU 0 {} ({}): {} units ({}Gi) free of {h100_units}",
                h100.uuid,
                h100.name,
                h100_units - 70,
                h100_units - 70
            ))
            && e.contains(&format!(
                "GPU 1 {} ({}): {} units ({}Gi) free of {a100_units}",
                a100.uuid,
                a100.name,
                a100_units - 30,
                a100_units - 30
            )),
        "{e}"
    );

    // A container whose Pod annotation disagrees with its allocation: refused, no slice. It is
    // allocated what one GPU has left (each GPU's units follow its own measured charge) and
    // annotated one GiB less.
    let spare = (h100_units - 70).max(a100_units - 30);
    ensure!(
        spare >= 2,
        "only {spare} units left on either GPU for the disagreeing Pod"
    );
    let got = rt
        .block_on(kubelet.allocate(&mut allocated, i32::try_from(spare)?))
        .map_err(anyhow::Error::msg)?;
    let annotated = format!("{}Gi", spare - 1);
    let pod = PodSpec {
        name: "disagrees".into(),
        uid: format!("uid-disagrees-{}", std::process::id()),
        annotations: vec![("gpuslice.io/memory".into(), annotated.clone())],
        log_dir: log_dir.clone(),
        handler: "gpuslice".into(),
    };
    let sandbox = client.run_pod(&pod)?;
    let guard = PodGuard {
        cri: &client,
        id: sandbox.clone(),
    };
    let spec = container(&node, "disagrees-train", &got.envs);
    let refused = client
        .create_container(&sandbox, &pod, &spec)
        .and_then(|id| client.start_container(&id).map(|()| id));
    let e = match refused {
        Ok(id) => {
            let st = client.wait_exited(&id, T)?;
            let out = cri::read_log(&log_dir.join(spec.log_path()))?;
            bail!(
                "a container with gpuslice.io/memory={annotated} and {spare} allocated units \
                 started (exit {}):\n{out}",
                st.exit_code
            );
        }
        Err(e) => format!("{e:#}"),
    };
    println!("disagreeing annotation, containerd {series}: {e}");
    ensure!(
        e.contains(&format!(
            "gpuslice.io/memory=\"{annotated}\": disagrees with the allocation"
        )) && e.contains(&format!("{spare}Gi")),
        "the refusal does not say why: {e}"
    );
    let ids: BTreeSet<&str> = placed.iter().map(|p| p.id.as_str()).collect();
    let st = status(&arbiter)?;
    ensure!(
        st.slices.iter().all(|s| ids.contains(s.slice_id.as_str())),
        "the refused container got a slice: {:?}",
        st.slices
    );
    guard.remove()?;

    for p in &placed {
        let st = client.wait_exited(&p.id, T)?;
        let out = cri::read_log(&log_dir.join(p.spec.log_path()))?;
        println!(
            "containerd {series}, {} ({} units on {}):\n{out}",
            p.name, p.units, p.uuid
        );
        ensure!(
            st.exit_code == 0,
            "{} exited {} ({}):\n{out}\narbiter log:\n{}",
            p.name,
            st.exit_code,
            st.reason,
            arbiter.log()
        );
        let name = if p.uuid == a100.uuid {
            &a100.name
        } else {
            &h100.name
        };
        assert_capped_slice_on(&out, p.units * GIB, &p.uuid, name)
            .with_context(|| p.name.clone())?;
    }
    for p in placed {
        p.guard.remove()?;
    }
    if let Some(d) = Snapshot::settle(&before, Some(&arbiter.state_dir), Duration::from_secs(15)) {
        bail!("device-plugin Pods on containerd {series} left something behind:\n{d}");
    }
    ensure!(
        status(&arbiter)?.slices.is_empty(),
        "slices left at the arbiter"
    );
    plugin.stop();
    ensure!(
        !dp_dir.join(SOCKET).exists(),
        "the plugin left its socket; log:\n{}",
        plugin.log_tail(20)
    );
    kubelet.stop();
    println!("{suite} passed in {:.1}s", t0.elapsed().as_secs_f64());
    Ok(())
}

#[test]
fn deviceplugin_cri_1_6_allocated_units_cap_the_containers() -> Result<()> {
    device_plugin_to_containers("1.6")
}

#[test]
fn deviceplugin_cri_2_1_allocated_units_cap_the_containers() -> Result<()> {
    device_plugin_to_containers("2.1")
}
