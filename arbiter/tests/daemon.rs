//! The control socket end to end, in process: a real unix socket on a temporary state directory,
//! a fixed device inventory, admit / refuse / update / status / release, bad lines, and a restart
//! that rebuilds the slices from the records on disk.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use gpuslice_api::{ErrorCode, Response, ResponseEnvelope};
use gpuslice_arbiter::server::{bind, serve, State};
use gpuslice_arbiter::store::{Store, RECORD_FILE};
use gpuslice_arbiter::{DeviceInventory, Policy, StaticInventory};
use gpuslice_test_support::Scratch as TempDir;

const GI: u64 = 1 << 30;

fn start(dir: &Path, sock_name: &str) -> PathBuf {
    let devs =
        StaticInventory::fake(&[("NVIDIA H100 80GB", 80 * GI), ("NVIDIA A100 40GB", 40 * GI)])
            .devices()
            .unwrap();
    let store = Store::open(dir).unwrap();
    let (state, warnings) = State::open(devs, Policy::default(), store).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    let sock = dir.join(sock_name);
    let listener = bind(&sock).unwrap();
    let state = Arc::new(Mutex::new(state));
    std::thread::spawn(move || serve(listener, state));
    sock
}

struct Client {
    r: BufReader<UnixStream>,
    w: UnixStream,
}
impl Client {
    fn connect(sock: &Path) -> Client {
        let s = UnixStream::connect(sock).unwrap();
        Client {
            w: s.try_clone().unwrap(),
            r: BufReader::new(s),
        }
    }
    fn call(&mut self, line: &str) -> Response {
        writeln!(self.w, "{line}").unwrap();
        let mut out = String::new();
        self.r.read_line(&mut out).unwrap();
        let env: ResponseEnvelope = serde_json::from_str(&out).unwrap();
        assert_eq!(env.version, 1);
        env.response
    }
}

fn code(r: &Response) -> ErrorCode {
    match r {
        Response::Error { code, .. } => *code,
        other => panic!("expected an error, got {other:?}"),
    }
}

#[test]
fn serve_admit_refuse_update_release_and_restart() {
    let tmp = TempDir::new("daemon");
    let sock = start(&tmp.0, "arbiter.sock");
    let mode = std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let mut c = Client::connect(&sock);

    let r = c.call(r#"{"version":1,"op":"admit","slice_id":"a","request":{"memory":"30Gi","compute":30},"owner":{"pid":1}}"#);
    let Response::Admitted {
        slice_dir,
        devices,
        existing,
        ..
    } = r
    else {
        panic!("{r:?}")
    };
    assert!(!existing);
    assert_eq!(slice_dir, tmp.0.join("a"));
    assert_eq!(
        devices[0].index, 1,
        "bin-pack puts 30Gi on the 40 GiB device"
    );
    assert!(tmp.0.join("a").join(RECORD_FILE).is_file());

    // Idempotent repeat over the wire.
    let r = c.call(
        r#"{"version":1,"op":"admit","slice_id":"a","request":{"memory":"30Gi","compute":30}}"#,
    );
    assert!(
        matches!(r, Response::Admitted { existing: true, .. }),
        "{r:?}"
    );

    // Refusal with the reason.
    let r = c.call(
        r#"{"version":1,"op":"admit","slice_id":"b","request":{"memory":"79Gi","model":"A100"}}"#,
    );
    assert_eq!(code(&r), ErrorCode::Refused);
    let Response::Error { message, .. } = &r else {
        unreachable!()
    };
    assert!(message.contains("memory: cap 79Gi"), "{message}");
    assert!(!tmp.0.join("b").exists());

    let r = c.call(r#"{"version":1,"op":"admit","slice_id":"b","request":{"memory":"4Gi","compute":70,"priority":"high"}}"#);
    assert!(matches!(r, Response::Admitted { .. }), "{r:?}");

    // Update: too much compute refused, then a valid change.
    let r = c.call(r#"{"version":1,"op":"update","slice_id":"a","compute":71}"#);
    assert_eq!(code(&r), ErrorCode::Refused);
    let r =
        c.call(r#"{"version":1,"op":"update","slice_id":"a","memory":"8Gi","compute_limit":50}"#);
    let Response::Updated { devices, .. } = r else {
        panic!("{r:?}")
    };
    assert_eq!(devices[0].memory_cap, Some(8 * GI));

    // Protocol errors.
    assert_eq!(code(&c.call("not json")), ErrorCode::BadRequest);
    assert_eq!(
        code(&c.call(r#"{"version":2,"op":"status"}"#)),
        ErrorCode::Version
    );
    assert_eq!(
        code(&c.call(r#"{"version":1,"op":"launch"}"#)),
        ErrorCode::BadRequest
    );
    assert_eq!(
        code(&c.call(r#"{"version":1,"op":"admit","slice_id":"c","request":{"memory":"12Q"}}"#)),
        ErrorCode::BadRequest
    );
    assert_eq!(
        code(&c.call(r#"{"version":1,"op":"release","slice_id":"zz"}"#)),
        ErrorCode::NotFound
    );
    assert_eq!(
        code(&c.call(r#"{"version":1,"op":"admit","slice_id":"a","request":{"memory":"1Gi"}}"#)),
        ErrorCode::Conflict
    );

    let Response::Status(before) = c.call(r#"{"version":1,"op":"status"}"#) else {
        panic!()
    };
    assert_eq!(before.slices.len(), 2);

    // "Restart": a second arbiter on the same state directory sees the same slices.
    let sock2 = start(&tmp.0, "arbiter2.sock");
    let mut c2 = Client::connect(&sock2);
    let Response::Status(after) = c2.call(r#"{"version":1,"op":"status"}"#) else {
        panic!()
    };
    assert_eq!(after, before);
    let a = after.slices.iter().find(|s| s.slice_id == "a").unwrap();
    assert_eq!(a.request.compute_limit, Some(50));
    assert_eq!(a.devices[0].memory_cap, Some(8 * GI));

    // Release removes the directory.
    let r = c2.call(r#"{"version":1,"op":"release","slice_id":"a"}"#);
    assert!(matches!(r, Response::Released { .. }), "{r:?}");
    assert!(!tmp.0.join("a").exists());
}

#[test]
fn bind_refuses_a_live_socket_and_replaces_a_stale_one() {
    let tmp = TempDir::new("bind");
    let sock = tmp.0.join("arbiter.sock");
    let first = bind(&sock).unwrap();
    assert!(bind(&sock).is_err(), "a live socket must not be stolen");
    drop(first);
    // The file remains but nobody listens: stale, replaced.
    assert!(sock.exists());
    let _second = bind(&sock).unwrap();
}

#[test]
fn unreadable_records_are_reported_not_fatal() {
    let tmp = TempDir::new("records");
    std::fs::create_dir_all(tmp.0.join("bad")).unwrap();
    std::fs::write(tmp.0.join("bad").join(RECORD_FILE), b"{ nope").unwrap();
    std::fs::create_dir_all(tmp.0.join("not-a-slice")).unwrap();
    let devs = StaticInventory::fake(&[("GPU", 40 * GI)])
        .devices()
        .unwrap();
    let (state, warnings) =
        State::open(devs, Policy::default(), Store::open(&tmp.0).unwrap()).unwrap();
    assert_eq!(state.admission().slices().count(), 0);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("bad"), "{warnings:?}");
}
