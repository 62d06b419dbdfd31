//! A minimal CRI client, to drive containerd the way kubelet does: gRPC (HTTP/2 from the `h2`
//! crate, messages encoded by [`crate::proto`]) over containerd's unix socket, the
//! `runtime.v1.RuntimeService` calls a Pod's life needs (`RunPodSandbox`, `CreateContainer`,
//! `StartContainer`, `ContainerStatus`, stop and remove), CRI log files, and the images the CRI
//! namespace needs (the test image with a long-running default command, so that it can also
//! serve as the sandbox "pause" image the harness configures).

use crate::containerd::Containerd;
use crate::image::{TestImage, IMAGE};
use crate::procs::run_ok;
use crate::proto::{self, Msg};
use crate::sim::Bind;
use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The namespace CRI keeps its images and containers in.
pub const K8S_NS: &str = "k8s.io";
/// `NamespaceMode` values of the CRI API.
const NS_POD: u64 = 0;
const NS_CONTAINER: u64 = 1;
const NS_NODE: u64 = 2;
/// `ContainerState::CONTAINER_EXITED`.
pub const CONTAINER_EXITED: u64 = 2;

const CALL: Duration = Duration::from_secs(60);

/// A CRI client for one socket.
#[derive(Debug)]
pub struct Cri {
    sock: PathBuf,
    rt: tokio::runtime::Runtime,
}

/// A Pod as kubelet describes it to the runtime (host network, no hostname).
#[derive(Debug, Clone)]
pub struct PodSpec {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid`.
    pub uid: String,
    /// Pod annotations (containerd passes those matching `pod_annotations` to every container).
    pub annotations: Vec<(String, String)>,
    /// `log_directory` (absolute; created by the caller).
    pub log_dir: PathBuf,
    /// The RuntimeClass handler (`runtime_handler`).
    pub handler: String,
}

impl PodSpec {
    /// The `PodSandboxConfig` message.
    pub fn config(&self) -> Msg {
        let meta = Msg::new()
            .str(1, &self.name)
            .str(2, &self.uid)
            .str(3, "default");
        let ns = Msg::new()
            .int(1, NS_NODE)
            .int(2, NS_CONTAINER)
            .int(3, NS_POD);
        let linux = Msg::new().msg(2, Msg::new().msg(1, ns));
        Msg::new()
            .msg(1, meta)
            .str(3, &self.log_dir.to_string_lossy())
            .map(6, &[("app", "gpuslice-e2e")])
            .map(7, &self.annotations)
            .msg(8, linux)
    }
}

/// One container of a Pod.
#[derive(Debug, Clone)]
pub struct ContainerSpec {
    /// `metadata.name` (what `gpuslice.io/containers` lists).
    pub name: String,
    /// `command` (the image's entrypoint is replaced).
    pub command: Vec<String>,
    /// `envs`.
    pub env: Vec<(String, String)>,
    /// `mounts` (bind mounts from the host).
    pub mounts: Vec<Bind>,
    /// The container's own annotations.
    pub annotations: Vec<(String, String)>,
}

impl ContainerSpec {
    /// The log file, relative to the Pod's log directory.
    pub fn log_path(&self) -> String {
        format!("{}.log", self.name)
    }

    /// The `ContainerConfig` message.
    pub fn config(&self) -> Msg {
        let mut m = Msg::new()
            .msg(1, Msg::new().str(1, &self.name))
            .msg(2, Msg::new().str(1, IMAGE))
            .strs(3, &self.command);
        for (k, v) in &self.env {
            m = m.msg(6, Msg::new().str(1, k).str(2, v));
        }
        for b in &self.mounts {
            m = m.msg(
                7,
                Msg::new()
                    .str(1, &b.dst)
                    .str(2, &b.src.to_string_lossy())
                    .flag(3, b.ro),
            );
        }
        m.map(10, &self.annotations).str(11, &self.log_path())
    }
}

/// What `ContainerStatus` says.
#[derive(Debug, Clone)]
pub struct Status {
    /// `ContainerState` (0 created, 1 running, 2 exited, 3 unknown).
    pub state: u64,
    /// Exit code once exited.
    pub exit_code: i32,
    /// `reason` and `message`.
    pub reason: String,
}

impl Cri {
    /// A client for the CRI socket `sock` (containerd's gRPC address).
    pub fn new(sock: &Path) -> Result<Self> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok(Self {
            sock: sock.to_path_buf(),
            rt,
        })
    }

    /// One unary call, e.g. `method = "RuntimeService/Version"`; returns the response message.
    pub fn call(&self, method: &str, req: &Msg) -> Result<Vec<u8>> {
        let path = format!("/runtime.v1.{method}");
        self.rt.block_on(async {
            tokio::time::timeout(CALL, unary(&self.sock, &path, &req.0))
                .await
                .map_err(|_| anyhow!("CRI {method}: no answer within {CALL:?}"))?
        })
    }

    /// `Version`: "runtime_name runtime_version (API runtime_api_version)".
    pub fn version(&self) -> Result<String> {
        let r = self.call("RuntimeService/Version", &Msg::new().str(1, "v1"))?;
        Ok(format!(
            "{} {} (CRI {})",
            proto::get_str(&r, 2),
            proto::get_str(&r, 3),
            proto::get_str(&r, 4)
        ))
    }

    /// `RunPodSandbox`; returns the sandbox id.
    pub fn run_pod(&self, pod: &PodSpec) -> Result<String> {
        let req = Msg::new().msg(1, pod.config()).str(2, &pod.handler);
        let r = self.call("RuntimeService/RunPodSandbox", &req)?;
        Ok(proto::get_str(&r, 1))
    }

    /// `CreateContainer` in the sandbox `pod_id`; returns the container id.
    pub fn create_container(
        &self,
        pod_id: &str,
        pod: &PodSpec,
        c: &ContainerSpec,
    ) -> Result<String> {
        self.create_container_with_cdi(pod_id, pod, c, &[])
    }

    /// [`Cri::create_container`] with CDI devices in `ContainerConfig.CDI_devices` (field 17,
    /// `CDIDevice.name` = 1; containerd ≥ 1.7.2), as kubelet passes the ids a DRA driver's
    /// `NodePrepareResources` returned.
    pub fn create_container_with_cdi(
        &self,
        pod_id: &str,
        pod: &PodSpec,
        c: &ContainerSpec,
        cdi_devices: &[&str],
    ) -> Result<String> {
        let mut config = c.config();
        for d in cdi_devices {
            config = config.msg(17, Msg::new().str(1, d));
        }
        self.create_with(pod_id, pod, config)
    }

    /// `CreateContainer` of the `ContainerConfig` `config`; returns the container id.
    fn create_with(&self, pod_id: &str, pod: &PodSpec, config: Msg) -> Result<String> {
        let req = Msg::new()
            .str(1, pod_id)
            .msg(2, config)
            .msg(3, pod.config());
        let r = self.call("RuntimeService/CreateContainer", &req)?;
        Ok(proto::get_str(&r, 1))
    }

    /// [`Cri::create_container`] from the image `image` instead of the test image (a second
    /// `ContainerConfig.image` field: protobuf merges it over the first, so its name wins).
    pub fn create_container_from(
        &self,
        pod_id: &str,
        pod: &PodSpec,
        c: &ContainerSpec,
        image: &str,
    ) -> Result<String> {
        self.create_with(pod_id, pod, c.config().msg(2, Msg::new().str(1, image)))
    }

    /// `StartContainer`.
    pub fn start_container(&self, id: &str) -> Result<()> {
        self.call("RuntimeService/StartContainer", &Msg::new().str(1, id))?;
        Ok(())
    }

    /// `ContainerStatus`.
    pub fn status(&self, id: &str) -> Result<Status> {
        let r = self.call("RuntimeService/ContainerStatus", &Msg::new().str(1, id))?;
        let s = proto::get_bytes(&r, 1).context("ContainerStatus without status")?;
        Ok(Status {
            state: proto::get_int(s, 3),
            exit_code: proto::get_int(s, 7) as i64 as i32,
            reason: format!("{} {}", proto::get_str(s, 10), proto::get_str(s, 11)),
        })
    }

    /// Poll `ContainerStatus` until the container has exited; returns its status.
    pub fn wait_exited(&self, id: &str, timeout: Duration) -> Result<Status> {
        let t0 = Instant::now();
        loop {
            let s = self.status(id)?;
            if s.state == CONTAINER_EXITED {
                return Ok(s);
            }
            if t0.elapsed() > timeout {
                bail!(
                    "container {id} still in state {} after {timeout:?}",
                    s.state
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `StopPodSandbox` then `RemovePodSandbox` (removes its containers too).
    pub fn remove_pod(&self, pod_id: &str) -> Result<()> {
        let m = Msg::new().str(1, pod_id);
        self.call("RuntimeService/StopPodSandbox", &m)?;
        self.call("RuntimeService/RemovePodSandbox", &m)?;
        Ok(())
    }
}

/// A sandbox removed (stopped, then removed with its containers) when dropped.
#[derive(Debug)]
pub struct PodGuard<'a> {
    /// The client.
    pub cri: &'a Cri,
    /// The sandbox id.
    pub id: String,
}

impl Cri {
    /// `RunPodSandbox` of a host-network Pod `name` (uid unique to this process, no
    /// annotations) for runtime handler `handler`, logging to `log_dir`; the Pod and a guard
    /// that removes it.
    pub fn start_pod(
        &self,
        name: &str,
        handler: &str,
        log_dir: &Path,
    ) -> Result<(PodSpec, PodGuard<'_>)> {
        let pod = PodSpec {
            name: name.into(),
            uid: format!("uid-{name}-{}", std::process::id()),
            annotations: vec![],
            log_dir: log_dir.to_path_buf(),
            handler: handler.into(),
        };
        let id = self.run_pod(&pod)?;
        Ok((pod, PodGuard { cri: self, id }))
    }
}

impl PodGuard<'_> {
    /// Remove now, reporting errors.
    pub fn remove(mut self) -> Result<()> {
        let id = std::mem::take(&mut self.id);
        self.cri.remove_pod(&id)
    }
}

impl Drop for PodGuard<'_> {
    fn drop(&mut self) {
        if !self.id.is_empty() {
            let _ = self.cri.remove_pod(&self.id);
        }
    }
}

async fn unary(sock: &Path, path: &str, body: &[u8]) -> Result<Vec<u8>> {
    let io = tokio::net::UnixStream::connect(sock)
        .await
        .with_context(|| format!("connecting to {}", sock.display()))?;
    let (client, conn) = h2::client::handshake(io).await?;
    let driver = tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut client = client.ready().await?;
    let req = http::Request::builder()
        .method("POST")
        .uri(format!("http://localhost{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())?;
    let (resp, mut send) = client.send_request(req, false)?;
    let mut framed = Vec::with_capacity(body.len() + 5);
    framed.push(0);
    framed.extend_from_slice(&(body.len() as u32).to_be_bytes());
    framed.extend_from_slice(body);
    send.send_data(Bytes::from(framed), true)?;
    let (parts, mut rbody) = resp.await?.into_parts();
    let mut data = Vec::new();
    while let Some(chunk) = rbody.data().await {
        let chunk = chunk?;
        let _ = rbody.flow_control().release_capacity(chunk.len());
        data.extend_from_slice(&chunk);
    }
    let trailers = rbody.trailers().await?;
    driver.abort();
    let header = |k: &str| {
        trailers
            .as_ref()
            .and_then(|t| t.get(k))
            .or_else(|| parts.headers.get(k))
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let status = header("grpc-status").unwrap_or_else(|| "(none)".into());
    if status != "0" {
        bail!(
            "{path}: grpc-status {status}: {}",
            percent_decode(&header("grpc-message").unwrap_or_default())
        );
    }
    if data.len() < 5 {
        bail!("{path}: response of {} bytes, no gRPC frame", data.len());
    }
    let n = u32::from_be_bytes([data[1], data[2], data[3], data[4]]) as usize;
    data.get(5..5 + n)
        .map(<[u8]>::to_vec)
        .with_context(|| format!("{path}: truncated gRPC frame"))
}

/// grpc-message is percent-encoded.
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = b
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        if let (b'%', Some(h)) = (b[i], hex) {
            if let Ok(v) = u8::from_str_radix(h, 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The content lines of a CRI log file (`<time> <stream> <P|F> <content>`), joined; partial
/// lines (`P`) are joined with their continuation.
pub fn read_log(path: &Path) -> Result<String> {
    let raw =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut out = String::new();
    for line in raw.lines() {
        let mut it = line.splitn(4, ' ');
        let (_, _, tag, content) = (it.next(), it.next(), it.next(), it.next().unwrap_or(""));
        out.push_str(content);
        if tag != Some("P") {
            out.push('\n');
        }
    }
    Ok(out)
}

/// What every Pod suite does first on its containerd: the node's test image imported for CRI
/// (under the scratch directory's `cri-image`), a client on containerd's socket, and the CRI
/// version printed.
pub fn client_with_image(ctd: &Containerd, node: &crate::suite::Node) -> Result<Cri> {
    import_cri_image(ctd, &node.image, &node.scratch.dir("cri-image")?)?;
    let client = Cri::new(&ctd.sock)?;
    println!("CRI: {}", client.version()?);
    Ok(client)
}

/// Import the test image into the CRI namespace, with `/bin/sleep` as its default command so it
/// can serve as the sandbox image (the harness configures [`IMAGE`] as `sandbox_image` /
/// `pinned_images.sandbox`). Containers of the suites always give their own command.
pub fn import_cri_image(ctd: &Containerd, image: &TestImage, work: &Path) -> Result<()> {
    let oci = work.join("cri-image.oci.tar");
    crate::image::oci_archive_with_cmd(
        &image.layer,
        &work.join("cri-oci"),
        &oci,
        &["/bin/sleep", "86400"],
    )?;
    import_oci(ctd, &oci)
}

/// `ctr images import` of the OCI archive `oci` into the CRI namespace.
pub fn import_oci(ctd: &Containerd, oci: &Path) -> Result<()> {
    run_ok(
        ctr_ns(ctd, K8S_NS)
            .args(["images", "import", "--platform", "linux/amd64"])
            .arg(oci),
        Duration::from_secs(120),
    )?;
    Ok(())
}

/// A `ctr` command for `ctd` in namespace `ns`.
pub fn ctr_ns(ctd: &Containerd, ns: &str) -> Command {
    let mut c = Command::new(ctd.bins.ctr());
    c.arg("--address").arg(&ctd.sock).arg("--namespace").arg(ns);
    c
}

/// The OCI bundle `config.json` of a task in containerd's state directory (runc v2 shim layout:
/// `<state>/io.containerd.runtime.v2.task/<namespace>/<id>/config.json`).
pub fn bundle_config(ctd: &Containerd, ns: &str, id: &str) -> Result<serde_json::Value> {
    let p = ctd
        .dir
        .join("state/io.containerd.runtime.v2.task")
        .join(ns)
        .join(id)
        .join("config.json");
    let s = std::fs::read(&p).with_context(|| format!("reading {}", p.display()))?;
    Ok(serde_json::from_slice(&s)?)
}

/// Signs of a gpuslice edit in a spec: mounts of the interposer or slice directory, `LD_PRELOAD`
/// / `GPUSLICE_SLICE_DIR` in the environment, gpuslice hooks. Empty: not edited.
pub fn gpuslice_edits(spec: &serde_json::Value) -> Vec<String> {
    let mut v = Vec::new();
    for m in spec["mounts"].as_array().into_iter().flatten() {
        let dst = m["destination"].as_str().unwrap_or_default();
        if dst.contains("gpuslice") || dst == "/etc/ld.so.preload" {
            v.push(format!("mount {dst}"));
        }
    }
    for e in spec["process"]["env"].as_array().into_iter().flatten() {
        let e = e.as_str().unwrap_or_default();
        if e.starts_with("LD_PRELOAD=") || e.starts_with("GPUSLICE_SLICE_DIR=") {
            v.push(format!("env {e}"));
        }
    }
    for (stage, hooks) in spec["hooks"].as_object().into_iter().flatten() {
        for h in hooks.as_array().into_iter().flatten() {
            if h["path"].as_str().unwrap_or_default().contains("gpuslice") {
                v.push(format!("hook {stage}"));
            }
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%20b%3Ac"), "a b:c");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz"), "%zz");
    }

    #[test]
    fn edits_are_recognised() {
        let plain =
            json!({"process": {"env": ["PATH=/bin"]}, "mounts": [{"destination": "/proc"}]});
        assert!(gpuslice_edits(&plain).is_empty());
        let edited = json!({
            "process": {"env": ["LD_PRELOAD=/usr/lib/gpuslice/libgpuslice.so"]},
            "mounts": [{"destination": "/run/gpuslice"}],
            "hooks": {"poststop": [{"path": "/x/gpuslice-hook"}]}
        });
        assert_eq!(gpuslice_edits(&edited).len(), 3);
    }

    #[test]
    fn cri_log_lines() {
        let d = std::env::temp_dir().join(format!("gse-crilog-{}", std::process::id()));
        std::fs::write(
            &d,
            "2026-01-01T00:00:00Z stdout P abc\n2026-01-01T00:00:00Z stdout F def\n2026-01-01T00:00:00Z stderr F x=1 y\n",
        )
        .expect("write");
        let s = read_log(&d).expect("read");
        let _ = std::fs::remove_file(&d);
        assert_eq!(s, "abcdef\nx=1 y\n");
    }
}
