//! `gpuslice doctor`: checks the node — NVIDIA driver and NVML, the arbiter, the interposer,
//! the CDI spec and each engine's configuration — and prints one row per check (OK / WARN /
//! FAIL) with, for each problem, the command that fixes it. Exit status 0 only without FAIL.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gpuslice_api::{Request, Response};
use toml_edit::Item;

use crate::client::{self, Client};
use crate::configure::containerd::{
    cri_keys, glob_match, version_of, CLASS, POD_ANNOTATIONS, RUNC_TYPE, SHIM_TYPE,
};
use crate::configure::{docker, read_optional, tomlx};

mod check;
pub mod live;
pub mod owners;

pub use check::{Check, Level};

/// Where to look.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// The arbiter's state directory.
    pub state_dir: PathBuf,
    /// NVML library (`None`: the system's).
    pub nvml_library: Option<PathBuf>,
    /// The interposer.
    pub interposer: PathBuf,
    /// The CDI spec.
    pub cdi_spec: PathBuf,
    /// containerd's main config.
    pub containerd_config: PathBuf,
    /// Docker's daemon.json.
    pub docker_config: PathBuf,
    /// CRI-O's drop-in directory.
    pub crio_dir: PathBuf,
    /// The `/proc/driver/nvidia/version` file.
    pub driver_version_file: PathBuf,
    /// The executable that runs the dlopen probe (`gpuslice doctor --dlopen-probe FILE`).
    pub probe_exe: Option<PathBuf>,
    /// containerd's gRPC socket (`None`: its config's `grpc.address`, else the default).
    pub containerd_address: Option<PathBuf>,
    /// dockerd's socket (`None`: the first `unix://` entry of daemon.json's `hosts`, else the
    /// default).
    pub docker_socket: Option<PathBuf>,
    /// `PATH` the engines' binaries (`containerd`, `ctr`, `dockerd`, `docker`, `crio`) are
    /// looked up in.
    pub search_path: Option<std::ffi::OsString>,
}

/// Runs every check.
pub fn run_checks(i: &Inputs) -> Vec<Check> {
    let mut v = vec![driver(i), nvml(i)];
    let (arbiter_row, status) = arbiter(i);
    v.extend(owners::gpu_owners(
        i.nvml_library.as_deref(),
        Path::new("/proc"),
        status.as_ref().map(|s| s.foreign.as_slice()),
    ));
    v.extend([arbiter_row, interposer(i), cdi(i)]);
    let path = i.search_path.as_deref();
    let present =
        |binary: &str, config: &Path| config.exists() || live::which(binary, path).is_some();
    // Engines the node does not have get no rows.
    let mut engines = Vec::new();
    // The running daemon is checked where its files are configured for gpuslice.
    if present("containerd", &i.containerd_config) {
        match load_containerd(i) {
            Err(row) => engines.push(row),
            Ok(files) => {
                let file = containerd(i, &files);
                let ok = file.level == Level::Ok;
                engines.push(file);
                if ok {
                    engines.extend(containerd_live(i, &files));
                }
            }
        }
    }
    if present("dockerd", &i.docker_config) {
        let file = docker_check(i);
        let ok = file.level == Level::Ok;
        engines.push(file);
        if ok {
            let socket = i
                .docker_socket
                .clone()
                .unwrap_or_else(|| live::docker_socket(&docker_hosts(&i.docker_config)));
            engines.extend(live::docker(&i.docker_config, &socket, path));
        }
    }
    if present("crio", &i.crio_dir) {
        engines.push(crio(i));
    }
    let configured = engines
        .iter()
        .any(|c| c.level == Level::Ok && !c.name.ends_with("-daemon"));
    v.extend(engines);
    if !configured {
        v.push(Check::bad(
            "engines",
            Level::Fail,
            "no container engine is configured for gpuslice",
            format!(
                "gpuslice configure containerd --file {}   (or: configure docker / configure crio)",
                i.containerd_config.display()
            ),
        ));
    }
    v
}

/// The running containerd (socket from the config unless given), for the `files` loaded.
fn containerd_live(i: &Inputs, files: &[(PathBuf, toml_edit::DocumentMut)]) -> Option<Check> {
    let address = i.containerd_address.clone().unwrap_or_else(|| {
        tomlx::get_table(files[0].1.as_table(), &["grpc"])
            .and_then(|g| g.get("address"))
            .and_then(Item::as_str)
            .filter(|a| !a.is_empty())
            .map_or_else(|| PathBuf::from(live::CONTAINERD_SOCKET), PathBuf::from)
    });
    let paths: Vec<PathBuf> = files.iter().map(|(f, _)| f.clone()).collect();
    live::containerd(&live::ContainerdLive {
        config: &i.containerd_config,
        files: &paths,
        address,
        path: i.search_path.as_deref(),
    })
}

/// daemon.json's `hosts` (empty when absent or unreadable).
fn docker_hosts(config: &Path) -> Vec<String> {
    std::fs::read_to_string(config)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v.get("hosts").cloned())
        .and_then(|h| serde_json::from_value(h).ok())
        .unwrap_or_default()
}

/// The table, one row per check, each problem followed by its fix.
pub fn render(checks: &[Check]) -> String {
    let w = checks
        .iter()
        .map(|c| c.name.len())
        .max()
        .unwrap_or(5)
        .max(5);
    let mut s = format!("{:<w$}  {:<7}DETAIL\n", "CHECK", "STATUS");
    for c in checks {
        let _ = writeln!(s, "{:<w$}  {:<7}{}", c.name, c.level.word(), c.detail);
        if let Some(f) = &c.fix {
            let _ = writeln!(s, "{:<w$}  {:<7}fix: {f}", "", "");
        }
    }
    let fails = checks.iter().filter(|c| c.level == Level::Fail).count();
    let warns = checks.iter().filter(|c| c.level == Level::Warn).count();
    let _ = writeln!(s, "\n{fails} failed, {warns} warnings");
    s
}

/// 0 without FAIL, else 1.
pub fn exit_code(checks: &[Check]) -> i32 {
    i32::from(checks.iter().any(|c| c.level == Level::Fail))
}

fn driver(i: &Inputs) -> Check {
    match std::fs::read_to_string(&i.driver_version_file) {
        Ok(t) => Check::ok("driver", t.lines().next().unwrap_or("").trim().to_string()),
        Err(_) => Check::bad(
            "driver",
            Level::Warn,
            format!(
                "no NVIDIA kernel driver ({} missing); fine only on the simulated GPU",
                i.driver_version_file.display()
            ),
            "install the NVIDIA driver (apt-get install nvidia-driver) and reboot",
        ),
    }
}

fn nvml(i: &Inputs) -> Check {
    let lib = i.nvml_library.as_ref().map_or_else(
        || "libnvidia-ml.so.1".to_string(),
        |p| p.display().to_string(),
    );
    let fix = "install the NVIDIA driver's NVML (libnvidia-ml.so.1), or name it: GPUSLICE_NVML_LIBRARY=FILE / nvml_library in /etc/gpuslice/config.toml";
    let init = match &i.nvml_library {
        Some(p) => nvml_wrapper::Nvml::builder().lib_path(p.as_os_str()).init(),
        None => nvml_wrapper::Nvml::init(),
    };
    let nvml = match init {
        Ok(n) => n,
        Err(e) => {
            return Check::bad(
                "nvml",
                Level::Fail,
                format!("cannot load NVML from {lib}: {e}"),
                fix,
            )
        }
    };
    let count = match nvml.device_count() {
        Ok(n) => n,
        Err(e) => return Check::bad("nvml", Level::Fail, format!("NVML device count: {e}"), fix),
    };
    if count == 0 {
        return Check::bad(
            "nvml",
            Level::Fail,
            format!("NVML ({lib}) sees no GPU"),
            fix,
        );
    }
    let mut names = Vec::new();
    for idx in 0..count {
        match nvml.device_by_index(idx) {
            Ok(d) => {
                let name = d.name().unwrap_or_else(|_| "?".into());
                let mem = d.memory_info().map(|m| m.total >> 20).unwrap_or(0);
                names.push(format!("{idx}: {name} {mem} MiB"));
            }
            Err(e) => {
                return Check::bad("nvml", Level::Fail, format!("NVML device {idx}: {e}"), fix)
            }
        }
    }
    Check::ok(
        "nvml",
        format!("{count} GPU(s) via {lib} [{}]", names.join(", ")),
    )
}

/// The `arbiter` row, and its `status` reply when it answered.
fn arbiter(i: &Inputs) -> (Check, Option<gpuslice_api::NodeStatus>) {
    let fix = format!(
        "systemctl start gpuslice-arbiter   (or run: gpuslice-arbiter --state-dir {})",
        i.state_dir.display()
    );
    let mut client = match Client::connect(&i.state_dir, client::TIMEOUT) {
        Ok(c) => c,
        Err(e) => return (Check::bad("arbiter", Level::Fail, e.to_string(), fix), None),
    };
    match client.call(Request::Status {}) {
        Ok(Response::Status(s)) => (
            Check::ok(
                "arbiter",
                format!(
                    "answering at {}: {} device(s), {} slice(s)",
                    i.state_dir
                        .join(gpuslice_api::protocol::SOCKET_NAME)
                        .display(),
                    s.devices.len(),
                    s.slices.len()
                ),
            ),
            Some(s),
        ),
        Ok(other) => (
            Check::bad(
                "arbiter",
                Level::Fail,
                format!("unexpected reply to status: {other:?}"),
                fix,
            ),
            None,
        ),
        Err(e) => (Check::bad("arbiter", Level::Fail, e.to_string(), fix), None),
    }
}

/// Whether `bytes` start with an ELF header of a shared object (`ET_DYN`).
pub fn is_elf_shared_object(bytes: &[u8]) -> Result<(), String> {
    if bytes.len() < 18 || &bytes[..4] != b"\x7fELF" {
        return Err("not an ELF file".into());
    }
    let e_type = match bytes[5] {
        1 => u16::from_le_bytes([bytes[16], bytes[17]]),
        2 => u16::from_be_bytes([bytes[16], bytes[17]]),
        _ => return Err("ELF file with an unknown byte order".into()),
    };
    if e_type != 3 {
        return Err(format!(
            "ELF file of type {e_type}, not a shared object (3)"
        ));
    }
    Ok(())
}

fn interposer(i: &Inputs) -> Check {
    let p = &i.interposer;
    let fix = format!(
        "install the gpuslice package (or cargo xtask dist) so that {} exists, or set interposer = \"…\" in /etc/gpuslice/config.toml",
        p.display()
    );
    let mut head = [0u8; 64];
    let n = match std::fs::File::open(p).and_then(|mut f| std::io::Read::read(&mut f, &mut head)) {
        Ok(n) => n,
        Err(e) => {
            return Check::bad(
                "interposer",
                Level::Fail,
                format!("{}: {e}", p.display()),
                fix,
            )
        }
    };
    if let Err(why) = is_elf_shared_object(&head[..n]) {
        return Check::bad(
            "interposer",
            Level::Fail,
            format!("{}: {why}", p.display()),
            fix,
        );
    }
    let Some(exe) = &i.probe_exe else {
        return Check::ok(
            "interposer",
            format!("{} (ELF shared object; load not tried)", p.display()),
        );
    };
    match probe(exe, p) {
        Ok(()) => Check::ok(
            "interposer",
            format!("{} loads (dlopen in a child process)", p.display()),
        ),
        Err(e) => Check::bad(
            "interposer",
            Level::Fail,
            format!("{} does not load: {e}", p.display()),
            fix,
        ),
    }
}

/// Runs `exe doctor --dlopen-probe lib` with a time limit.
fn probe(exe: &Path, lib: &Path) -> Result<(), String> {
    let mut child = Command::new(exe)
        .arg("doctor")
        .arg("--dlopen-probe")
        .arg(lib)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match child.try_wait() {
            Ok(Some(st)) => {
                let mut err = String::new();
                if let Some(mut s) = child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut s, &mut err);
                }
                return if st.success() {
                    Ok(())
                } else {
                    Err(err.trim().to_string())
                };
            }
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err("dlopen did not return within 20 s".into());
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// The child side of the probe: dlopen with `RTLD_LAZY | RTLD_LOCAL`; 0 when it loads.
pub fn dlopen_probe(lib: &Path) -> i32 {
    use std::os::unix::ffi::OsStrExt as _;
    let Ok(c) = std::ffi::CString::new(lib.as_os_str().as_bytes()) else {
        eprintln!("path contains a NUL byte");
        return 1;
    };
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call; loading a library
    // runs its constructors, which is why this runs in a child process of its own.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) };
    if h.is_null() {
        // SAFETY: dlerror returns NULL or a NUL-terminated string valid until the next dl* call.
        let e = unsafe { libc::dlerror() };
        let msg = if e.is_null() {
            "dlopen failed".to_string()
        } else {
            // SAFETY: non-NULL, NUL-terminated (see above); copied before any other dl* call.
            unsafe { std::ffi::CStr::from_ptr(e) }
                .to_string_lossy()
                .into_owned()
        };
        eprintln!("{msg}");
        return 1;
    }
    0
}

fn cdi(i: &Inputs) -> Check {
    let p = &i.cdi_spec;
    let fix = format!("gpuslice cdi generate --output {}", p.display());
    let text = match std::fs::read_to_string(p) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Check::bad(
                "cdi-spec",
                Level::Warn,
                format!(
                    "{} missing (needed only for CDI devices: --device gpuslice.io/gpu=0)",
                    p.display()
                ),
                fix,
            )
        }
        Err(e) => {
            return Check::bad(
                "cdi-spec",
                Level::Fail,
                format!("{}: {e}", p.display()),
                fix,
            )
        }
    };
    let v: serde_yaml_ng::Value = match serde_yaml_ng::from_str(&text) {
        Ok(v) => v,
        Err(e) => {
            return Check::bad(
                "cdi-spec",
                Level::Fail,
                format!("{} does not parse: {e}", p.display()),
                fix,
            )
        }
    };
    let kind = v.get("kind").and_then(|k| k.as_str()).unwrap_or("");
    let devices = v
        .get("devices")
        .and_then(|d| d.as_sequence())
        .map_or(0, Vec::len);
    if kind != "gpuslice.io/gpu" || devices == 0 {
        return Check::bad(
            "cdi-spec",
            Level::Fail,
            format!("{}: kind {kind:?} with {devices} device(s); expected kind \"gpuslice.io/gpu\" with devices", p.display()),
            fix,
        );
    }
    Check::ok("cdi-spec", format!("{}: {devices} device(s)", p.display()))
}

/// Files `imports` names (globs expanded in their directory), relative to the config's dir.
fn imported_files(doc: &toml_edit::DocumentMut, config: &Path) -> Vec<PathBuf> {
    let base = config.parent().unwrap_or(Path::new("/"));
    let mut out = Vec::new();
    let Some(arr) = doc.get("imports").and_then(Item::as_array) else {
        return out;
    };
    for pat in arr.iter().filter_map(|v| v.as_str()) {
        let full = base.join(pat);
        if !pat.contains(['*', '?']) {
            out.push(full);
            continue;
        }
        let (Some(dir), Some(name)) = (full.parent(), full.file_name()) else {
            continue;
        };
        let name = name.to_string_lossy();
        if let Ok(rd) = std::fs::read_dir(dir) {
            let mut found: Vec<PathBuf> = rd
                .filter_map(Result::ok)
                .filter(|e| glob_match(&name, &e.file_name().to_string_lossy()))
                .map(|e| e.path())
                .collect();
            found.sort();
            out.extend(found);
        }
    }
    out
}

fn containerd_fix(p: &Path) -> String {
    format!(
        "gpuslice configure containerd --file {} && systemctl restart containerd",
        p.display()
    )
}

/// containerd's main config and the imports it names that exist, parsed (in load order), or
/// the row saying why they cannot be read.
fn load_containerd(i: &Inputs) -> Result<Vec<(PathBuf, toml_edit::DocumentMut)>, Check> {
    let p = &i.containerd_config;
    let fix = containerd_fix(p);
    let text = match read_optional(p) {
        Ok(Some(t)) => t,
        Ok(None) => {
            return Err(Check::bad(
                "containerd",
                Level::Warn,
                format!("{} missing (containerd not installed here?)", p.display()),
                fix,
            ))
        }
        Err(e) => return Err(Check::bad("containerd", Level::Fail, e.to_string(), fix)),
    };
    let doc = match tomlx::parse(p, &text) {
        Ok(d) => d,
        Err(e) => {
            return Err(Check::bad(
                "containerd",
                Level::Fail,
                e.to_string(),
                format!("fix the syntax error, then: {fix}"),
            ))
        }
    };
    // An unknown version is refused before any import is read.
    if let Err(e) = version_of(&doc, p) {
        return Err(Check::bad("containerd", Level::Fail, e.to_string(), fix));
    }
    // Imports are read after the main file: the last class found wins.
    let mut files = vec![(p.clone(), doc)];
    for f in imported_files(&files[0].1, p) {
        if let Ok(Some(t)) = read_optional(&f) {
            match tomlx::parse(&f, &t) {
                Ok(d) => files.push((f, d)),
                Err(e) => return Err(Check::bad("containerd", Level::Fail, e.to_string(), fix)),
            }
        }
    }
    Ok(files)
}

/// The `gpuslice` class in the loaded files (the last one found wins, as in containerd).
fn containerd(i: &Inputs, files: &[(PathBuf, toml_edit::DocumentMut)]) -> Check {
    let p = &i.containerd_config;
    let fix = containerd_fix(p);
    let version = match version_of(&files[0].1, p) {
        Ok(v) => v,
        Err(e) => return Check::bad("containerd", Level::Fail, e.to_string(), fix),
    };
    let keys = cri_keys(version).unwrap_or(["plugins", "cri"]);
    let found = files.iter().rev().find_map(|(f, d)| {
        tomlx::get_table(d.as_table(), &keys)
            .and_then(|c| tomlx::get_table(c, &["containerd", "runtimes", CLASS]))
            .map(|t| (f.clone(), t.clone()))
    });
    let Some((file, class)) = found else {
        return Check::bad(
            "containerd",
            Level::Warn,
            format!(
                "no `{CLASS}` runtime class in {} (config version {version}) or its imports",
                p.display()
            ),
            fix,
        );
    };
    let rt = class
        .get("runtime_type")
        .and_then(Item::as_str)
        .unwrap_or("");
    let binary = tomlx::get_table(&class, &["options"])
        .and_then(|o| o.get("BinaryName"))
        .and_then(Item::as_str);
    let annotations = class
        .get("pod_annotations")
        .and_then(Item::as_array)
        .is_some_and(|a| a.iter().any(|v| v.as_str() == Some(POD_ANNOTATIONS)));
    let how = match (rt, binary) {
        (SHIM_TYPE, _) => format!("runtime_type {SHIM_TYPE}"),
        (RUNC_TYPE, Some(b)) if Path::new(b).exists() => format!("BinaryName {b}"),
        (RUNC_TYPE, Some(b)) => {
            return Check::bad(
                "containerd",
                Level::Fail,
                format!(
                    "class `{CLASS}` in {}: BinaryName {b} does not exist",
                    file.display()
                ),
                fix,
            )
        }
        _ => {
            return Check::bad(
                "containerd",
                Level::Fail,
                format!(
                    "class `{CLASS}` in {}: runtime_type {rt:?} without a gpuslice BinaryName",
                    file.display()
                ),
                fix,
            )
        }
    };
    if !annotations {
        return Check::bad(
            "containerd",
            Level::Warn,
            format!("class `{CLASS}` in {} lacks pod_annotations = [\"{POD_ANNOTATIONS}\"] (Pod annotations will not reach gpuslice)", file.display()),
            fix,
        );
    }
    Check::ok(
        "containerd",
        format!("class `{CLASS}` in {} ({how})", file.display()),
    )
}

fn docker_check(i: &Inputs) -> Check {
    let p = &i.docker_config;
    let fix = format!(
        "gpuslice configure docker --file {} && systemctl restart docker",
        p.display()
    );
    let text = match read_optional(p) {
        Ok(Some(t)) => t,
        Ok(None) => {
            return Check::bad(
                "docker",
                Level::Warn,
                format!("{} missing", p.display()),
                fix,
            )
        }
        Err(e) => return Check::bad("docker", Level::Fail, e.to_string(), fix),
    };
    let v: docker::Json = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => {
            return Check::bad(
                "docker",
                Level::Fail,
                format!("cannot parse {}: {e}", p.display()),
                format!("fix the syntax error, then: {fix}"),
            )
        }
    };
    let class = match &v {
        docker::Json::Object(m) => match m.get("runtimes") {
            Some(docker::Json::Object(r)) => r.get("gpuslice"),
            _ => None,
        },
        _ => None,
    };
    let Some(docker::Json::Object(class)) = class else {
        return Check::bad(
            "docker",
            Level::Warn,
            format!("no runtimes.gpuslice in {}", p.display()),
            fix,
        );
    };
    match (class.get("path"), class.get("runtimeType")) {
        (Some(docker::Json::String(path)), _) if Path::new(path).exists() => {
            Check::ok("docker", format!("runtimes.gpuslice.path {path}"))
        }
        (Some(docker::Json::String(path)), _) => Check::bad(
            "docker",
            Level::Fail,
            format!("runtimes.gpuslice.path {path} does not exist"),
            fix,
        ),
        (_, Some(docker::Json::String(t))) => {
            Check::ok("docker", format!("runtimes.gpuslice.runtimeType {t}"))
        }
        _ => Check::bad(
            "docker",
            Level::Fail,
            "runtimes.gpuslice has neither path nor runtimeType",
            fix,
        ),
    }
}

fn crio(i: &Inputs) -> Check {
    let dir = &i.crio_dir;
    let fix = format!(
        "gpuslice configure crio --file {} && systemctl restart crio",
        dir.join("99-gpuslice.conf").display()
    );
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Check::bad(
            "crio",
            Level::Warn,
            format!("{} missing (CRI-O not installed here?)", dir.display()),
            fix,
        );
    };
    let mut files: Vec<PathBuf> = rd
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    for f in files.iter().rev() {
        let Ok(t) = std::fs::read_to_string(f) else {
            continue;
        };
        let d = match tomlx::parse(f, &t) {
            Ok(d) => d,
            Err(e) => return Check::bad("crio", Level::Fail, e.to_string(), fix),
        };
        if let Some(c) = tomlx::get_table(d.as_table(), &["crio", "runtime", "runtimes", CLASS]) {
            let path = c.get("runtime_path").and_then(Item::as_str).unwrap_or("");
            if !Path::new(path).exists() {
                return Check::bad(
                    "crio",
                    Level::Fail,
                    format!("{}: runtime_path {path:?} does not exist", f.display()),
                    fix,
                );
            }
            return Check::ok(
                "crio",
                format!("runtime handler `{CLASS}` in {}", f.display()),
            );
        }
    }
    Check::bad(
        "crio",
        Level::Warn,
        format!("no [crio.runtime.runtimes.{CLASS}] in {}", dir.display()),
        fix,
    )
}
