//! The grpc-go client of `tests/grpcgo/client.go`, built once per test binary with Debian's Go and
//! grpc-go (`golang-go`, `golang-google-grpc-dev`: no module download). When they are missing and
//! the test runs as root on Debian they are installed with apt-get first; otherwise the test says
//! SKIPPED (a failure under `CI=true`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

const SOURCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/grpcgo/client.go");
/// Debian's GOPATH tree of Go library sources.
const GOCODE: &str = "/usr/share/gocode";
const GRPC: &str = "/usr/share/gocode/src/google.golang.org/grpc";

fn have_go() -> bool {
    Command::new("go")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success())
        && Path::new(GRPC).is_dir()
}

fn install() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root || !Path::new("/usr/bin/apt-get").exists() {
        return Err("no Go with grpc-go, and not root on Debian to install them".into());
    }
    for args in [
        &["-qq", "update"][..],
        &[
            "-y",
            "-qq",
            "install",
            "golang-go",
            "golang-google-grpc-dev",
        ][..],
    ] {
        let out = Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .output()
            .map_err(|e| format!("apt-get: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "apt-get {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    Ok(())
}

fn build() -> Result<PathBuf, String> {
    if !have_go() {
        install()?;
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("grpcgo");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let bin = dir.join("client");
    let out = Command::new("go")
        .args(["build", "-o"])
        .arg(&bin)
        .arg(SOURCE)
        .env("GO111MODULE", "off")
        .env("GOPATH", GOCODE)
        .env("GOCACHE", dir.join("cache"))
        .env("GOFLAGS", "")
        .output()
        .map_err(|e| format!("go build: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "go build {SOURCE}: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(bin)
}

/// The built client, or `None` (SKIPPED; a failure under `CI=true`).
pub fn client() -> Option<PathBuf> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match BUILT.get_or_init(build) {
        Ok(p) => Some(p.clone()),
        Err(e) => {
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{e}");
            eprintln!("\n*** SKIPPED: {e} ***\n");
            None
        }
    }
}

/// How the client sets `:authority`.
#[derive(Clone, Copy, Debug)]
pub enum Authority {
    /// grpc-go's own choice for a target that is a path (Debian's grpc-go: the raw path).
    Default,
    /// The path percent-encoded, as grpc-go >= 1.54 sends it.
    Encoded,
    /// `grpc.WithAuthority(value)`.
    Set(&'static str),
}

/// One unary call of `method` with the encoded `request` over `socket`, dialled by path as
/// kubelet dials: the response bytes, or grpc-go's "code: message".
pub fn call(
    client: &Path,
    socket: &Path,
    method: &str,
    request: &[u8],
    authority: Authority,
) -> Result<Vec<u8>, String> {
    let hex: String = request.iter().map(|b| format!("{b:02x}")).collect();
    let authority = match authority {
        Authority::Default => "default",
        Authority::Encoded => "encoded",
        Authority::Set(v) => v,
    };
    let out = Command::new(client)
        .arg("-socket")
        .arg(socket)
        .args(["-method", method, "-request", &hex, "-authority", authority])
        .output()
        .map_err(|e| format!("{}: {e}", client.display()))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let text = text.trim();
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).map_err(|e| e.to_string()))
        .collect()
}
