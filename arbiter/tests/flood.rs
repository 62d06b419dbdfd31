//! The control socket under a flood of connections, in process: a bounded pool of workers serves
//! them, the ones beyond the backlog get a `busy` error, and no connection goes without a reply.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gpuslice_api::{ErrorCode, Response, ResponseEnvelope};
use gpuslice_arbiter::server::{bind, serve, serve_with, Limits, State};
use gpuslice_arbiter::store::Store;
use gpuslice_arbiter::{DeviceInventory, Policy, StaticInventory};

const GI: u64 = 1 << 30;
const STATUS: &str = r#"{"version":1,"op":"status"}"#;

fn state_dir(tag: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("gs-flood-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    p
}

fn start(dir: &Path, limits: Option<Limits>) -> PathBuf {
    let devs = StaticInventory::fake(&[("NVIDIA H100 80GB", 80 * GI)])
        .devices()
        .unwrap();
    let (state, _) = State::open(devs, Policy::default(), Store::open(dir).unwrap()).unwrap();
    let sock = dir.join("arbiter.sock");
    let listener = bind(&sock).unwrap();
    let state = Arc::new(Mutex::new(state));
    std::thread::spawn(move || match limits {
        Some(l) => serve_with(listener, state, l),
        None => serve(listener, state),
    });
    sock
}

/// Threads of this process (the test harness, the accept loop and the workers; clients here
/// are all served from the test's own thread).
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

fn raise_nofile(want: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid rlimit to write into.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    lim.rlim_cur = lim.rlim_max.min(want);
    // SAFETY: as above; lowering or raising the soft limit up to the hard one is always allowed.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) }, 0);
}

/// Reads one reply line within `timeout`; `None` when the peer closed without one.
fn reply(s: &UnixStream, timeout: Duration) -> Option<Response> {
    s.set_read_timeout(Some(timeout)).unwrap();
    let mut line = String::new();
    let n = BufReader::new(s).read_line(&mut line).ok()?;
    if n == 0 {
        return None;
    }
    let env: ResponseEnvelope = serde_json::from_str(&line).expect("a JSON reply");
    Some(env.response)
}

#[test]
fn a_flood_of_status_requests_all_get_replies_from_a_bounded_pool() {
    raise_nofile(8192);
    let dir = state_dir("defaults");
    let sock = start(&dir, None);
    let before = threads();
    let clients: Vec<UnixStream> = (0..1000)
        .map(|_| {
            let mut s = UnixStream::connect(&sock).unwrap();
            s.write_all(format!("{STATUS}\n").as_bytes()).unwrap();
            s
        })
        .collect();
    // All connected and asked at once: count the arbiter's threads while they wait.
    std::thread::sleep(Duration::from_millis(300));
    let during = threads();
    let (mut ok, mut busy, mut none) = (0, 0, 0);
    // Each client hangs up after its reply, as the CLI and the hook do, freeing its worker.
    for s in clients {
        match reply(&s, Duration::from_secs(20)) {
            Some(Response::Status(_)) => ok += 1,
            Some(Response::Error {
                code: ErrorCode::Busy,
                message,
            }) => {
                assert!(message.contains("busy"), "{message}");
                busy += 1
            }
            Some(other) => panic!("unexpected reply {other:?}"),
            None => none += 1,
        }
    }
    eprintln!("1000 clients: {ok} served, {busy} busy, {none} without a reply; threads {before} -> {during}");
    assert_eq!(none, 0, "connections dropped without a reply");
    assert!(ok >= 32, "the pool served only {ok}");
    assert!(
        during <= before + Limits::default().workers + 16,
        "the arbiter grew from {before} to {during} threads"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn beyond_the_backlog_the_reply_is_busy_and_waiting_ones_are_served_later() {
    let dir = state_dir("small");
    let limits = Limits {
        workers: 2,
        backlog: 3,
        idle: Duration::from_secs(5),
    };
    let sock = start(&dir, Some(limits));
    // Two silent peers hold both workers; three more wait in the backlog.
    let silent: Vec<UnixStream> = (0..2)
        .map(|_| UnixStream::connect(&sock).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let waiting: Vec<UnixStream> = (0..3)
        .map(|_| {
            let mut s = UnixStream::connect(&sock).unwrap();
            s.write_all(format!("{STATUS}\n").as_bytes()).unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    // The next one finds the backlog full; its request is read and answered `busy`.
    let mut extra = UnixStream::connect(&sock).unwrap();
    extra.write_all(format!("{STATUS}\n").as_bytes()).unwrap();
    match reply(&extra, Duration::from_secs(5)) {
        Some(Response::Error { code, message }) => {
            assert_eq!(code, ErrorCode::Busy);
            assert!(
                message.contains("2 connections being served and 3 waiting"),
                "{message}"
            );
        }
        other => panic!("expected busy, got {other:?}"),
    }
    // The waiting ones are not answered while the workers are held...
    assert!(reply(&waiting[0], Duration::from_millis(300)).is_none());
    // ...and are served once the silent peers go.
    drop(silent);
    let t0 = Instant::now();
    for s in waiting {
        assert!(
            matches!(reply(&s, Duration::from_secs(5)), Some(Response::Status(_))),
            "a waiting connection was not served"
        );
    }
    assert!(t0.elapsed() < Duration::from_secs(4));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_silent_peer_is_closed_after_the_idle_bound() {
    let dir = state_dir("idle");
    let limits = Limits {
        workers: 1,
        backlog: 1,
        idle: Duration::from_millis(300),
    };
    let sock = start(&dir, Some(limits));
    let silent = UnixStream::connect(&sock).unwrap();
    let t0 = Instant::now();
    assert!(
        reply(&silent, Duration::from_secs(5)).is_none(),
        "closed without a reply"
    );
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    // The worker is free again.
    let mut next = UnixStream::connect(&sock).unwrap();
    next.write_all(format!("{STATUS}\n").as_bytes()).unwrap();
    assert!(matches!(
        reply(&next, Duration::from_secs(5)),
        Some(Response::Status(_))
    ));
    let _ = std::fs::remove_dir_all(&dir);
}
