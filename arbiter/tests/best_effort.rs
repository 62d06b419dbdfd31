//! Compute-only (best-effort memory) slices through the daemon's request handling: their
//! effective caps are written into their region limits and rewritten when a neighbour comes,
//! goes or changes; what they hold (their `usage` files) keeps a capped admit from squeezing
//! them; the backstop judges them against their effective cap.

use std::sync::Arc;
use std::time::Duration;

use gpuslice_api::{ErrorCode, MemoryRequest, Owner, Request, Response, SliceRequest};
use gpuslice_arbiter::sched::Scheduler;
use gpuslice_arbiter::server::State;
use gpuslice_arbiter::store::Store;
use gpuslice_arbiter::{DeviceInventory, Policy, StaticInventory};
use gpuslice_region::layout::UNCAPPED;
use gpuslice_region::{Limits, Usage};
use gpuslice_test_support::Scratch as TempDir;

const GI: u64 = 1 << 30;
const MI: u64 = 1 << 20;

fn state(tag: &str, policy: Policy) -> (TempDir, State) {
    let dir = std::env::temp_dir().join(format!("gs-be-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let devices = StaticInventory::fake(&[("GPU", 40 * GI)])
        .devices()
        .unwrap();
    let (mut st, warnings) = State::open(devices, policy, Store::open(&dir).unwrap()).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    assert!(st
        .attach_scheduler(Arc::new(Scheduler::new(Duration::from_millis(5))))
        .is_empty());
    (TempDir(dir), st)
}

fn admit(st: &mut State, id: &str, memory: Option<u64>, compute: Option<u8>) -> Response {
    st.handle(Request::Admit {
        slice_id: id.into(),
        request: SliceRequest {
            memory: memory.map(MemoryRequest::Bytes),
            compute,
            ..Default::default()
        },
        owner: Owner::default(),
    })
}

fn ok(r: Response) -> Response {
    assert!(!matches!(r, Response::Error { .. }), "{r:?}");
    r
}

/// The memory cap the slice's interposer reads from its `limits` file.
fn region_cap(dir: &TempDir, id: &str) -> u64 {
    Limits::open(&dir.0.join(id)).unwrap().memory_cap(0)
}

/// Makes slice `id`'s usage file say one process of it holds `bytes` on device 0.
fn hold(dir: &TempDir, id: &str, bytes: u64) {
    let u = Usage::open(&dir.0.join(id), 1).unwrap();
    let rec = u.claim(std::process::id(), 1).unwrap();
    u.reserve(rec, 0, bytes, UNCAPPED).unwrap();
}

#[test]
fn effective_caps_are_written_to_the_regions_and_follow_the_neighbours() {
    let (dir, mut st) = state("regions", Policy::default());
    let r = st.admission().policy().reserve_on(0);
    ok(admit(&mut st, "capped", Some(4 * GI), None));
    ok(admit(&mut st, "c30", None, Some(30)));
    assert_eq!(region_cap(&dir, "c30"), 40 * GI - 4 * GI - 2 * r);
    match ok(admit(&mut st, "c70", None, Some(70))) {
        Response::Admitted { devices, .. } => {
            assert_eq!(devices[0].memory_cap, None);
            assert_eq!(devices[0].memory_best_effort, Some((36 * GI - 3 * r) / 2));
        }
        other => panic!("{other:?}"),
    }
    let share = (40 * GI - (4 * GI + r) - 2 * r) / 2;
    // Both best-effort regions say the split, the first one rewritten by the second's admit.
    assert_eq!(region_cap(&dir, "c30"), share);
    assert_eq!(region_cap(&dir, "c70"), share);
    assert_eq!(region_cap(&dir, "capped"), 4 * GI);

    // Status reports the figure on the slice's device.
    let Response::Status(s) = st.handle(Request::Status {}) else {
        panic!("no status")
    };
    let c30 = s.slices.iter().find(|x| x.slice_id == "c30").unwrap();
    assert_eq!(c30.devices[0].memory_best_effort, Some(share));

    // A capped neighbour grows by update: both shrink, in their regions too.
    ok(st.handle(Request::Update {
        slice_id: "capped".into(),
        memory: Some(MemoryRequest::Bytes(8 * GI)),
        compute: None,
        compute_limit: None,
        priority: None,
    }));
    let share = (40 * GI - (8 * GI + r) - 2 * r) / 2;
    assert_eq!(region_cap(&dir, "c30"), share);
    assert_eq!(region_cap(&dir, "c70"), share);
    assert_eq!(region_cap(&dir, "capped"), 8 * GI);

    // One best-effort slice leaves: the other gets the whole pool.
    ok(st.handle(Request::Release {
        slice_id: "c70".into(),
    }));
    assert_eq!(region_cap(&dir, "c30"), 40 * GI - 8 * GI - 2 * r);
    assert_eq!(region_cap(&dir, "capped"), 8 * GI);
}

#[test]
fn a_capped_admit_that_would_squeeze_what_a_best_effort_slice_holds_is_refused() {
    let (dir, mut st) = state("squeeze", Policy::default());
    ok(admit(&mut st, "be", None, Some(50)));
    assert_eq!(region_cap(&dir, "be"), 40 * GI - 512 * MI);
    hold(&dir, "be", 30 * GI);
    let r = admit(&mut st, "cap10", Some(10 * GI), None);
    match &r {
        Response::Error { code, message } => {
            assert_eq!(*code, ErrorCode::Refused);
            assert!(
                message.contains("\"be\" (holding 30Gi) an effective cap of 29Gi"),
                "{message}"
            );
        }
        other => panic!("admitted: {other:?}"),
    }
    assert!(st.admission().slice("cap10").is_none());
    assert!(
        !dir.0.join("cap10").exists(),
        "no files for a refused slice"
    );
    assert_eq!(region_cap(&dir, "be"), 40 * GI - 512 * MI, "untouched");
    // What leaves it what it holds fits.
    ok(admit(&mut st, "cap9", Some(9 * GI), None));
    assert_eq!(region_cap(&dir, "be"), 30 * GI);
    // Growing the capped one now is refused the same way, and changes nothing.
    let r = st.handle(Request::Update {
        slice_id: "cap9".into(),
        memory: Some(MemoryRequest::Bytes(9 * GI + 1)),
        compute: None,
        compute_limit: None,
        priority: None,
    });
    assert!(
        matches!(&r, Response::Error { message, .. } if message.contains("\"be\" (holding 30Gi)")),
        "{r:?}"
    );
    assert_eq!(region_cap(&dir, "cap9"), 9 * GI);
    assert_eq!(region_cap(&dir, "be"), 30 * GI);
}

#[test]
fn restart_rewrites_best_effort_caps() {
    let (dir, mut st) = state("restart", Policy::default());
    let r = st.admission().policy().reserve_on(0);
    ok(admit(&mut st, "be", None, None));
    ok(admit(&mut st, "cap", Some(8 * GI), None));
    // The record of "be" on disk still says 40 GiB − r (saved when it was alone); a stale
    // limits file too.
    gpuslice_region::LimitsWriter::open(&dir.0.join("be"))
        .unwrap()
        .set_memory_cap(0, 40 * GI)
        .unwrap();
    drop(st);
    let devices = StaticInventory::fake(&[("GPU", 40 * GI)])
        .devices()
        .unwrap();
    let (mut st, warnings) =
        State::open(devices, Policy::default(), Store::open(&dir.0).unwrap()).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    assert!(st
        .attach_scheduler(Arc::new(Scheduler::new(Duration::from_millis(5))))
        .is_empty());
    assert_eq!(region_cap(&dir, "be"), 40 * GI - 8 * GI - 2 * r);
    assert_eq!(
        st.admission().slice("be").unwrap().devices[0].memory_best_effort,
        Some(40 * GI - 8 * GI - 2 * r)
    );
}

#[test]
fn with_overcommit_best_effort_slices_stay_unbounded() {
    let (dir, mut st) = state(
        "overcommit",
        Policy {
            overcommit_memory: true,
            ..Policy::default()
        },
    );
    ok(admit(&mut st, "cap", Some(30 * GI), None));
    ok(admit(&mut st, "be", None, None));
    assert_eq!(region_cap(&dir, "be"), UNCAPPED);
}
