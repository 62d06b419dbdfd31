//! Fail closed through the shim v2 the way kubelet takes it, on containerd 1.6, 1.7 and 2.1: a
//! Pod asking for a slice (`gpuslice.io/memory: 1Gi`) whose container's image has no glibc (only
//! a static busybox) cannot have the interposer preloaded, so `containerd-shim-gpuslice-v2`
//! refuses it right after runc v2's Create (the image's root filesystem is mounted only then).
//!
//! Checked: `StartContainer` fails with the refusal naming the image (`image
//! "localhost/gpuslice-static:latest": the interposer cannot be preloaded, refusing the
//! container: the image has no glibc`); the container never runs; no slice is
//! left in the arbiter's state directory (and the arbiter lists none); after the Pod is
//! removed nothing is left behind (state directory, mounts, processes). A container of the
//! same Pod from the glibc test image is admitted and runs (the refusal is the image's, not
//! the Pod's).

use anyhow::{ensure, Context, Result};
use gpuslice_e2e::cri::{self, PodGuard, PodSpec};
use gpuslice_e2e::gate::require;
use gpuslice_e2e::paths;
use gpuslice_e2e::pod::{slices, workload_container};
use gpuslice_e2e::shimv2;
use gpuslice_e2e::snapshot::Snapshot;
use gpuslice_e2e::static_image::{import_static_image, STATIC_IMAGE};
use gpuslice_e2e::suite::Node;
use std::time::Duration;

fn refused(series: &str) -> Result<()> {
    let bins = paths::containerd(series);
    let suite = format!("cri-{series}/shim-refuses-image");
    if !require(&suite, &shimv2::shim_needs(&bins)) {
        return Ok(());
    }
    let node = Node::new(&format!("r{series}"))?;
    let arbiter = node.start_arbiter()?;
    let ctd = shimv2::start_cri_shim(&bins, &node, &arbiter)?;
    let client = cri::client_with_image(&ctd, &node)?;
    import_static_image(&ctd, &node.scratch.dir("static-image")?)?;
    let before = Snapshot::take(Some(&arbiter.state_dir));
    let slices_before = slices(&arbiter.state_dir);
    let log_dir = node.scratch.dir("pod-logs")?;
    let pod = PodSpec {
        name: "gpuslice-refuse".into(),
        uid: format!("uid-refuse-{series}-{}", std::process::id()),
        annotations: vec![("gpuslice.io/memory".into(), "1Gi".into())],
        log_dir: log_dir.clone(),
        handler: "gpuslice".into(),
    };
    let sandbox = client.run_pod(&pod).context("RunPodSandbox")?;
    let guard = PodGuard {
        cri: &client,
        id: sandbox.clone(),
    };

    let mut spec = workload_container(&node, "static");
    spec.command = vec!["/bin/sh".into(), "-c".into(), "echo ran; sleep 30".into()];
    let id = client
        .create_container_from(&sandbox, &pod, &spec, STATIC_IMAGE)
        .with_context(|| format!("CreateContainer; log:\n{}", ctd.log_tail(30)))?;
    let err = match client.start_container(&id) {
        Ok(()) => anyhow::bail!(
            "containerd {series}: a container of a glibc-less image started in a slice"
        ),
        Err(e) => format!("{e:#}"),
    };
    println!("containerd {series}: StartContainer refused: {err}");
    ensure!(
        err.contains("the interposer cannot be preloaded, refusing the container")
            && err.contains("the image has no glibc"),
        "containerd {series}: not the refusal: {err}"
    );
    // The image is named (containerd's CRI annotation `io.kubernetes.cri.image-name`).
    ensure!(err.contains(STATIC_IMAGE), "the image is not named: {err}");
    let st = client.status(&id)?;
    ensure!(st.state != 1, "the refused container is running: {st:?}");
    ensure!(
        !std::fs::read_to_string(log_dir.join(spec.log_path()))
            .unwrap_or_default()
            .contains("ran"),
        "the refused container's command ran"
    );
    ensure!(
        slices(&arbiter.state_dir) == slices_before,
        "a slice was left for the refused container: {:?}",
        slices(&arbiter.state_dir)
    );
    let listed = arbiter.call(r#"{"version":1,"op":"status"}"#);
    ensure!(
        listed["slices"].as_array().is_none_or(Vec::is_empty),
        "the arbiter still lists a slice: {listed}"
    );

    // The same Pod, the glibc test image: admitted and run.
    let ok = workload_container(&node, "glibc");
    let ok_id = client.create_container(&sandbox, &pod, &ok)?;
    client.start_container(&ok_id)?;
    let st = client.wait_exited(&ok_id, Duration::from_secs(120))?;
    let out = cri::read_log(&log_dir.join(ok.log_path()))?;
    ensure!(
        st.exit_code == 0,
        "the glibc container failed: {st:?}\n{out}"
    );
    gpuslice_e2e::suite::assert_one_gib_slice(&out)?;

    guard.remove()?;
    if let Some(d) = Snapshot::settle(&before, Some(&arbiter.state_dir), Duration::from_secs(30)) {
        anyhow::bail!("the refusal on containerd {series} left something behind:\n{d}");
    }
    Ok(())
}

#[test]
fn cri_1_6_shim_refuses_a_glibc_less_image() -> Result<()> {
    refused("1.6")
}

#[test]
fn cri_1_7_shim_refuses_a_glibc_less_image() -> Result<()> {
    refused("1.7")
}

#[test]
fn cri_2_1_shim_refuses_a_glibc_less_image() -> Result<()> {
    refused("2.1")
}
