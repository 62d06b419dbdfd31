//! Admission and placement scenarios, one per rule, and every refusal reason.

use std::collections::BTreeMap;

use gpuslice_api::{
    DeviceRef, DeviceSelector, ErrorCode, MemoryRequest, Owner, Placement, Priority, SliceRequest,
};
use gpuslice_arbiter::DeviceInventory;
use gpuslice_arbiter::{
    Admission, AdmitError, Change, Constraint, Policy, Refusal, StaticInventory,
};

const GI: u64 = 1 << 30;
const MI: u64 = 1 << 20;

fn node(devs: &[(&str, u64)], placement: Placement) -> Admission {
    let policy = Policy {
        placement,
        ..Policy::default()
    };
    Admission::new(StaticInventory::fake(devs).devices().unwrap(), policy)
}

fn mem(bytes: u64) -> SliceRequest {
    SliceRequest {
        memory: Some(MemoryRequest::Bytes(bytes)),
        ..Default::default()
    }
}

fn placed_on(a: &Admission, id: &str) -> Vec<u32> {
    a.slice(id)
        .unwrap()
        .devices
        .iter()
        .map(|d| d.index)
        .collect()
}

fn refusal(e: AdmitError) -> Refusal {
    match e {
        AdmitError::Refused { refusal, .. } => refusal,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn binpack_keeps_the_large_hole_on_a_mixed_node() {
    let devs = [("NVIDIA A100 80GB", 80 * GI), ("NVIDIA A100 40GB", 40 * GI)];
    let mut a = node(&devs, Placement::Binpack);
    a.admit("s1", mem(19 * GI), Owner::default()).unwrap();
    a.admit("s2", mem(19 * GI), Owner::default()).unwrap();
    // Both small slices went to the 40 GiB device, so a 70 GiB slice still fits.
    assert_eq!(placed_on(&a, "s1"), vec![1]);
    assert_eq!(placed_on(&a, "s2"), vec![1]);
    a.admit("big", mem(70 * GI), Owner::default()).unwrap();
    assert_eq!(placed_on(&a, "big"), vec![0]);

    // Spread fills the big device first and then cannot take the big slice.
    let mut s = node(&devs, Placement::Spread);
    s.admit("s1", mem(19 * GI), Owner::default()).unwrap();
    s.admit("s2", mem(19 * GI), Owner::default()).unwrap();
    assert_eq!(placed_on(&s, "s1"), vec![0]);
    let r = refusal(s.admit("big", mem(70 * GI), Owner::default()).unwrap_err());
    assert!(
        matches!(
            r,
            Refusal::NotEnoughDevices {
                wanted: 1,
                fit: 0,
                ..
            }
        ),
        "{r:?}"
    );
}

#[test]
fn spread_spreads_and_binpack_packs_equal_devices() {
    let devs = [("GPU", 40 * GI), ("GPU", 40 * GI), ("GPU", 40 * GI)];
    let mut s = node(&devs, Placement::Spread);
    for i in 0..3 {
        s.admit(&format!("s{i}"), mem(4 * GI), Owner::default())
            .unwrap();
    }
    let mut used: Vec<u32> = (0..3)
        .flat_map(|i| placed_on(&s, &format!("s{i}")))
        .collect();
    used.sort();
    assert_eq!(used, vec![0, 1, 2]);

    let mut b = node(&devs, Placement::Binpack);
    for i in 0..3 {
        b.admit(&format!("s{i}"), mem(4 * GI), Owner::default())
            .unwrap();
    }
    let used: Vec<u32> = (0..3)
        .flat_map(|i| placed_on(&b, &format!("s{i}")))
        .collect();
    assert_eq!(used, vec![0, 0, 0]);
}

#[test]
fn binpack_considers_compute_left() {
    let devs = [("GPU", 40 * GI), ("GPU", 40 * GI)];
    let mut a = node(&devs, Placement::Binpack);
    // Equal memory load on both devices, but device 1 has 60% guaranteed.
    a.admit("m0", mem(10 * GI), Owner::default()).unwrap();
    a.admit(
        "m1",
        SliceRequest {
            devices: DeviceSelector::List(vec![DeviceRef::Index(1)]),
            compute: Some(60),
            ..mem(10 * GI)
        },
        Owner::default(),
    )
    .unwrap();
    assert_eq!(placed_on(&a, "m0"), vec![0]);
    a.admit(
        "x",
        SliceRequest {
            compute: Some(10),
            ..mem(GI)
        },
        Owner::default(),
    )
    .unwrap();
    assert_eq!(placed_on(&a, "x"), vec![1]);
}

#[test]
fn percent_memory_resolves_on_the_chosen_device() {
    let devs = [("NVIDIA H100 80GB", 80 * GI), ("NVIDIA A100 40GB", 40 * GI)];
    let mut a = node(&devs, Placement::Binpack);
    let r = SliceRequest {
        memory: Some(MemoryRequest::Percent(25)),
        ..Default::default()
    };
    let got = a.admit("p", r.clone(), Owner::default()).unwrap();
    assert_eq!(got.devices[0].index, 1);
    assert_eq!(got.devices[0].memory_cap, Some(10 * GI));
    let r = SliceRequest {
        model: Some("h100".into()),
        ..r
    };
    let got = a.admit("q", r, Owner::default()).unwrap();
    assert_eq!(got.devices[0].index, 0);
    assert_eq!(got.devices[0].memory_cap, Some(20 * GI));
}

#[test]
fn multi_device_requests() {
    let devs = [("GPU", 40 * GI), ("GPU", 80 * GI), ("GPU", 40 * GI)];
    let mut a = node(&devs, Placement::Binpack);
    let r = SliceRequest {
        devices: DeviceSelector::Count(2),
        compute: Some(50),
        ..mem(30 * GI)
    };
    let got = a.admit("two", r.clone(), Owner::default()).unwrap();
    assert_eq!(got.devices.len(), 2);
    // The two 40 GiB devices are the tightest fits; reported in index order.
    assert_eq!(placed_on(&a, "two"), vec![0, 2]);
    let st = a.status();
    assert_eq!(st.devices[0].compute_guaranteed, 50);
    assert_eq!(st.devices[1].compute_guaranteed, 0);
    // Three devices asked, only one has room for 30 GiB now.
    let r3 = SliceRequest {
        devices: DeviceSelector::Count(3),
        ..mem(30 * GI)
    };
    let e = refusal(a.admit("three", r3, Owner::default()).unwrap_err());
    match e {
        Refusal::NotEnoughDevices {
            wanted,
            fit,
            devices,
        } => {
            assert_eq!((wanted, fit), (3, 1));
            assert_eq!(devices.len(), 2);
            assert!(devices
                .iter()
                .all(|d| matches!(d.failed[0], Constraint::Memory { .. })));
        }
        other => panic!("{other:?}"),
    }
    assert!(a.slice("three").is_none());
}

#[test]
fn explicit_lists_are_honoured_or_refused() {
    let devs = [("GPU", 40 * GI), ("GPU", 40 * GI)];
    let mut a = node(&devs, Placement::Binpack);
    let list = |refs: Vec<DeviceRef>| SliceRequest {
        devices: DeviceSelector::List(refs),
        ..mem(30 * GI)
    };
    let got = a
        .admit(
            "u",
            list(vec![DeviceRef::Uuid("GPU-fake-1".into())]),
            Owner::default(),
        )
        .unwrap();
    assert_eq!(got.devices[0].index, 1);
    // Device 1 is now too full for another 30 GiB: refused, not moved elsewhere.
    let e = refusal(
        a.admit("v", list(vec![DeviceRef::Index(1)]), Owner::default())
            .unwrap_err(),
    );
    match &e {
        Refusal::ListedDeviceFull(d) => {
            assert_eq!(d.index, 1);
            assert_eq!(
                d.failed,
                vec![Constraint::Memory {
                    cap: Some(30 * GI),
                    needed: 30 * GI + 512 * MI,
                    available: 40 * GI - 30 * GI - 512 * MI,
                }]
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        e.to_string(),
        "requested device 1 (GPU-fake-1): memory: cap 30Gi + context reserve 512Mi = 30720Mi \
         > 9728Mi uncommitted"
            .replace(
                "30720Mi",
                &gpuslice_api::quantity::format_bytes(30 * GI + 512 * MI)
            )
    );
    let e = refusal(
        a.admit("w", list(vec![DeviceRef::Index(7)]), Owner::default())
            .unwrap_err(),
    );
    assert_eq!(e, Refusal::UnknownDevice(DeviceRef::Index(7)));
    let e = refusal(
        a.admit(
            "w",
            list(vec![DeviceRef::Uuid("GPU-nope".into())]),
            Owner::default(),
        )
        .unwrap_err(),
    );
    assert_eq!(e.to_string(), "device GPU-nope does not exist on this node");
    // Same device under two names.
    let e = a
        .admit(
            "w",
            SliceRequest {
                devices: DeviceSelector::List(vec![
                    DeviceRef::Index(0),
                    DeviceRef::Uuid("GPU-fake-0".into()),
                ]),
                ..mem(GI)
            },
            Owner::default(),
        )
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::BadRequest);
}

#[test]
fn compute_guarantees_sum_to_at_most_100() {
    let mut a = node(&[("GPU", 80 * GI)], Placement::Binpack);
    let c = |g| SliceRequest {
        compute: Some(g),
        ..mem(GI)
    };
    a.admit("a", c(30), Owner::default()).unwrap();
    a.admit("b", c(70), Owner::default()).unwrap();
    let e = a.admit("c", c(1), Owner::default()).unwrap_err();
    assert_eq!(e.code(), ErrorCode::Refused);
    assert!(
        e.to_string()
            .contains("compute: guarantee 1% > 0% not yet guaranteed"),
        "{e}"
    );
    // Best effort still fits.
    a.admit("d", mem(GI), Owner::default()).unwrap();
}

#[test]
fn model_constraint_and_no_devices() {
    let mut a = node(&[("NVIDIA A100-SXM4-40GB", 40 * GI)], Placement::Binpack);
    let e = a
        .admit(
            "m",
            SliceRequest {
                model: Some("H100".into()),
                ..mem(GI)
            },
            Owner::default(),
        )
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("model \"H100\" does not match \"NVIDIA A100-SXM4-40GB\""),
        "{e}"
    );
    let mut empty = Admission::new(vec![], Policy::default());
    let e = refusal(empty.admit("x", mem(GI), Owner::default()).unwrap_err());
    assert_eq!(e, Refusal::NoDevices);
}

#[test]
fn best_effort_slices_commit_their_reserve_unless_overcommit() {
    // 40 GiB, 512 MiB reserve: 78 capped slices of 0 B would not fit, nor does a best-effort
    // slice once capped ones hold all but less than its reserve.
    let mut a = node(&[("GPU", 40 * GI)], Placement::Binpack);
    a.admit("big", mem(39 * GI), Owner::default()).unwrap();
    a.admit("be", SliceRequest::default(), Owner::default())
        .unwrap();
    assert_eq!(a.status().devices[0].memory_committed, 40 * GI);
    // Nothing left to share: it runs on its context reserve alone.
    assert_eq!(
        a.slice("be").unwrap().devices[0].memory_best_effort,
        Some(0)
    );
    let e = a
        .admit("be2", SliceRequest::default(), Owner::default())
        .unwrap_err();
    assert!(
        e.to_string().contains(
            "a best-effort slice (no memory cap) needs its context reserve 512Mi but only 0 is \
             uncommitted"
        ),
        "{e}"
    );

    let mut o = Admission::new(
        StaticInventory::fake(&[("GPU", 40 * GI)])
            .devices()
            .unwrap(),
        Policy {
            overcommit_memory: true,
            ..Policy::default()
        },
    );
    o.admit("a", mem(30 * GI), Owner::default()).unwrap();
    o.admit("b", mem(30 * GI), Owner::default()).unwrap();
    o.admit("c", SliceRequest::default(), Owner::default())
        .unwrap();
    // Overcommitted memory has no pool to split: best-effort slices stay unbounded.
    assert_eq!(o.slice("c").unwrap().devices[0].memory_best_effort, None);
    // Compute guarantees are never overcommitted.
    o.admit(
        "g",
        SliceRequest {
            compute: Some(100),
            ..mem(GI)
        },
        Owner::default(),
    )
    .unwrap();
    assert!(o
        .admit(
            "h",
            SliceRequest {
                compute: Some(1),
                ..mem(GI)
            },
            Owner::default()
        )
        .is_err());
}

#[test]
fn context_reserve_counts() {
    // 4 slices of 9.5 GiB + 512 MiB reserve = 40 GiB exactly; a fifth byte does not fit.
    let mut a = node(&[("GPU", 40 * GI)], Placement::Binpack);
    for i in 0..4 {
        a.admit(&format!("s{i}"), mem(9 * GI + 512 * MI), Owner::default())
            .unwrap();
    }
    assert_eq!(a.status().devices[0].memory_committed, 40 * GI);
    assert!(a.admit("x", mem(1), Owner::default()).is_err());
}

#[test]
fn idempotent_admit_and_conflict() {
    let mut a = node(&[("GPU", 40 * GI)], Placement::Binpack);
    let first = a.admit("s", mem(GI), Owner::default()).unwrap();
    assert!(!first.existing);
    let again = a
        .admit(
            "s",
            mem(GI),
            Owner {
                pid: Some(9),
                ..Owner::default()
            },
        )
        .unwrap();
    assert!(again.existing);
    assert_eq!(again.devices, first.devices);
    assert_eq!(a.status().devices[0].memory_committed, GI + 512 * MI);
    let e = a.admit("s", mem(2 * GI), Owner::default()).unwrap_err();
    assert_eq!(e, AdmitError::Conflict("s".into()));
    assert_eq!(e.code(), ErrorCode::Conflict);
    assert_eq!(
        a.admit("../etc", mem(GI), Owner::default())
            .unwrap_err()
            .code(),
        ErrorCode::BadRequest
    );
    let bad = SliceRequest {
        compute: Some(50),
        compute_limit: Some(10),
        ..mem(GI)
    };
    assert_eq!(
        a.admit("b", bad, Owner::default()).unwrap_err().code(),
        ErrorCode::BadRequest
    );
}

#[test]
fn update_checks_like_admit_and_warns_on_shrink() {
    let mut a = node(&[("GPU", 40 * GI)], Placement::Binpack);
    a.admit(
        "a",
        SliceRequest {
            compute: Some(30),
            ..mem(10 * GI)
        },
        Owner::default(),
    )
    .unwrap();
    a.admit(
        "b",
        SliceRequest {
            compute: Some(30),
            ..mem(10 * GI)
        },
        Owner::default(),
    )
    .unwrap();
    let none = BTreeMap::new();
    // Grow within room.
    let up = a
        .update(
            "a",
            &Change {
                memory: Some(MemoryRequest::Bytes(20 * GI)),
                compute: Some(70),
                ..Change::default()
            },
            &none,
        )
        .unwrap();
    assert_eq!(up.devices[0].memory_cap, Some(20 * GI));
    assert!(up.warnings.is_empty());
    // Too much memory; state unchanged.
    let e = a
        .update(
            "a",
            &Change {
                memory: Some(MemoryRequest::Bytes(30 * GI)),
                ..Change::default()
            },
            &none,
        )
        .unwrap_err();
    assert!(matches!(refusal(e), Refusal::UpdateDoesNotFit(_)));
    assert_eq!(a.slice("a").unwrap().devices[0].memory_cap, Some(20 * GI));
    // Too much compute.
    assert!(a
        .update(
            "b",
            &Change {
                compute: Some(31),
                ..Change::default()
            },
            &none
        )
        .is_err());
    // Limit below guarantee: a request error naming the key.
    let e = a
        .update(
            "b",
            &Change {
                compute_limit: Some(10),
                ..Change::default()
            },
            &none,
        )
        .unwrap_err();
    assert!(e.to_string().contains("gpuslice.io/compute-limit"), "{e}");
    // Best effort, priority, and a shrink below use.
    let used: BTreeMap<String, u64> = [("GPU-fake-0".to_string(), 8 * GI)].into();
    let up = a
        .update(
            "b",
            &Change {
                memory: Some(MemoryRequest::Bytes(4 * GI)),
                compute: Some(0),
                priority: Some(Priority::High),
                ..Change::default()
            },
            &used,
        )
        .unwrap();
    assert_eq!(up.warnings.len(), 1);
    assert!(
        up.warnings[0].contains("below current use 8Gi"),
        "{:?}",
        up.warnings
    );
    let b = a.slice("b").unwrap();
    assert_eq!(b.request.compute, None);
    assert_eq!(b.request.priority, Priority::High);
    assert_eq!(a.status().devices[0].compute_guaranteed, 70);
    assert_eq!(
        a.update("zz", &Change::default(), &none).unwrap_err(),
        AdmitError::NotFound("zz".into())
    );
}

#[test]
fn release_returns_capacity() {
    let mut a = node(&[("GPU", 40 * GI)], Placement::Binpack);
    a.admit("a", mem(30 * GI), Owner::default()).unwrap();
    assert!(a.admit("b", mem(30 * GI), Owner::default()).is_err());
    a.release("a").unwrap();
    assert_eq!(a.status().devices[0].memory_committed, 0);
    a.admit("b", mem(30 * GI), Owner::default()).unwrap();
    assert_eq!(a.release("a").unwrap_err().code(), ErrorCode::NotFound);
}

#[test]
fn restore_rebuilds_and_warns_instead_of_refusing() {
    let devs = StaticInventory::fake(&[("GPU", 40 * GI), ("GPU", 40 * GI)])
        .devices()
        .unwrap();
    let mut a = Admission::new(devs.clone(), Policy::default());
    a.admit("a", mem(30 * GI), Owner::default()).unwrap();
    a.admit("b", mem(30 * GI), Owner::default()).unwrap();
    let records: Vec<_> = a.slices().cloned().collect();

    let mut b = Admission::new(devs.clone(), Policy::default());
    for r in records.clone() {
        assert!(b.restore(r).unwrap().is_empty());
    }
    assert_eq!(b.status(), a.status());

    // A smaller node (config/inventory change): restored with a warning, not refused.
    let one = vec![devs[0].clone()];
    let mut c = Admission::new(one.clone(), Policy::default());
    let mut moved = records[1].clone();
    moved.devices[0].uuid = devs[0].uuid.clone();
    assert!(c.restore(records[0].clone()).unwrap().is_empty());
    let w = c.restore(moved).unwrap();
    assert_eq!(w.len(), 1, "{w:?}");
    // A record for a device that is gone is an error.
    let mut d = Admission::new(one, Policy::default());
    let gone = records
        .iter()
        .find(|r| r.devices[0].uuid != devs[0].uuid)
        .unwrap()
        .clone();
    assert!(matches!(
        d.restore(gone),
        Err(AdmitError::MissingDevice { .. })
    ));
}

/// `[admission] dra_only`: only the DRA kubelet plugin's slices (`dra-<claim uid>`, no owner)
/// are admitted; a container's (annotations, environment), a bare process's (`gpuslice run`)
/// or one that only borrows the id shape is refused, naming the slice and why.
#[test]
fn dra_only_admits_the_kubelet_plugins_slices_and_refuses_the_rest() {
    let policy = Policy {
        dra_only: true,
        ..Policy::default()
    };
    let mut a = Admission::new(
        StaticInventory::fake(&[("NVIDIA H100", 80 * GI)])
            .devices()
            .unwrap(),
        policy,
    );
    let claim = "dra-5b0c3a52-9f1e-4c7e-9b7a-1d2e3f405060";
    a.admit(claim, mem(16 * GI), Owner::default()).unwrap();
    let container = Owner {
        container_id: Some("a1b2c3".into()),
        ..Owner::default()
    };
    let process = Owner {
        pid: Some(4242),
        ..Owner::default()
    };
    for (id, owner) in [
        ("a1b2c3", container.clone()),
        ("run-4242", process),
        ("dra-5b0c3a52-9f1e-4c7e-9b7a-1d2e3f405061", container),
        ("dra-not-a-uuid", Owner::default()),
    ] {
        let e = a.admit(id, mem(GI), owner).unwrap_err();
        assert_eq!(refusal(e.clone()), Refusal::DraOnly, "{id}");
        assert_eq!(e.code(), ErrorCode::Refused);
        let text = e.to_string();
        assert!(
            text.starts_with(&format!("slice \"{id}\" refused: ")),
            "{text}"
        );
        for needle in [
            "[admission] dra_only = true",
            "ResourceClaim",
            "docs/dra.md",
        ] {
            assert!(text.contains(needle), "{text}");
        }
    }
    assert_eq!(a.slices().count(), 1);
    // The claim's cap and guarantee are the scheduler's: not changed here; priority and the
    // limit are the node's.
    let used = BTreeMap::new();
    for change in [
        Change {
            memory: Some(MemoryRequest::Bytes(40 * GI)),
            ..Change::default()
        },
        Change {
            compute: Some(50),
            ..Change::default()
        },
    ] {
        let e = a.update(claim, &change, &used).unwrap_err();
        assert_eq!(refusal(e.clone()), Refusal::DraAccounted);
        assert!(e.to_string().contains("ResourceClaim"), "{e}");
    }
    a.update(
        claim,
        &Change {
            priority: Some(Priority::High),
            compute_limit: Some(80),
            ..Change::default()
        },
        &used,
    )
    .unwrap();
    // Off (the default): the same admits go through.
    let mut open = node(&[("NVIDIA H100", 80 * GI)], Placement::Binpack);
    open.admit("a1b2c3", mem(GI), Owner::default()).unwrap();
}

/// A best-effort request: a guarantee, no memory.
fn compute_only(pct: u8) -> SliceRequest {
    SliceRequest {
        compute: Some(pct),
        ..Default::default()
    }
}

fn best_effort_of(a: &Admission, id: &str) -> (Option<u64>, Option<u64>) {
    let d = &a.slice(id).unwrap().devices[0];
    (d.memory_cap, d.memory_best_effort)
}

#[test]
fn two_compute_only_slices_share_the_pool_beside_a_capped_one() {
    let mut a = node(&[("GPU", 40 * GI)], Placement::Binpack);
    let r = a.policy().reserve_on(0);
    assert_eq!(r, 512 * MI);
    a.admit("capped", mem(4 * GI), Owner::default()).unwrap();
    let got = a.admit("c30", compute_only(30), Owner::default()).unwrap();
    // Alone, it gets everything no one was promised.
    assert_eq!(
        got.devices[0].memory_best_effort,
        Some(40 * GI - 4 * GI - r - r)
    );
    a.admit("c70", compute_only(70), Owner::default()).unwrap();
    let share = (40 * GI - (4 * GI + r) - 2 * r) / 2;
    assert_eq!(best_effort_of(&a, "c30"), (None, Some(share)));
    assert_eq!(best_effort_of(&a, "c70"), (None, Some(share)));
    // The capped neighbour's promise is untouched, and is all it is told.
    assert_eq!(best_effort_of(&a, "capped"), (Some(4 * GI), None));
    let st = a.status();
    assert_eq!(st.devices[0].memory_committed, 4 * GI + 3 * r);
    assert_eq!(st.devices[0].compute_guaranteed, 100);
    // The figures are what status reports too.
    let c70 = st.slices.iter().find(|s| s.slice_id == "c70").unwrap();
    assert_eq!(c70.devices[0].memory_best_effort, Some(share));
    // The promise plus both shares and reserves never exceed the device.
    assert!(4 * GI + r + 2 * (share + r) <= 40 * GI);

    // One leaves: the other gets the whole pool.
    a.release("c70").unwrap();
    assert_eq!(
        best_effort_of(&a, "c30"),
        (None, Some(40 * GI - 4 * GI - 2 * r))
    );
    // The capped one leaves too: the whole device less its own reserve.
    a.release("capped").unwrap();
    assert_eq!(best_effort_of(&a, "c30"), (None, Some(40 * GI - r)));
    // It takes a cap by update: no longer best effort.
    a.update(
        "c30",
        &Change {
            memory: Some(MemoryRequest::Bytes(GI)),
            ..Change::default()
        },
        &BTreeMap::new(),
    )
    .unwrap();
    assert_eq!(best_effort_of(&a, "c30"), (Some(GI), None));
}

#[test]
fn a_capped_admit_never_squeezes_a_best_effort_slice_below_what_it_holds() {
    let mut a = node(&[("GPU", 40 * GI)], Placement::Binpack);
    let r = a.policy().reserve_on(0);
    a.admit("be", compute_only(30), Owner::default()).unwrap();
    assert_eq!(best_effort_of(&a, "be"), (None, Some(40 * GI - r)));
    let holds = |id: &str, _: &str| if id == "be" { 30 * GI } else { 0 };

    // 10 GiB + reserve would leave it 29 GiB: refused, naming it and what it holds.
    let before = a.status();
    let e = a
        .admit_holding("cap10", mem(10 * GI), Owner::default(), &holds)
        .unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains(
            "it would leave best-effort slice(s) \"be\" (holding 30Gi) an effective cap of 29Gi \
             each, below what they hold"
        ),
        "{msg}"
    );
    assert!(
        matches!(&refusal(e), Refusal::NotEnoughDevices { devices, .. }
            if matches!(devices[0].failed[..], [Constraint::BestEffortHeld { share, .. }] if share == 29 * GI)),
        "{msg}"
    );
    assert_eq!(a.status(), before, "a refusal changes nothing");
    // Listed explicitly: the same reason.
    let e = a
        .admit_holding(
            "cap10",
            SliceRequest {
                devices: DeviceSelector::List(vec![DeviceRef::Index(0)]),
                ..mem(10 * GI)
            },
            Owner::default(),
            &holds,
        )
        .unwrap_err();
    assert!(matches!(refusal(e), Refusal::ListedDeviceFull(_)));

    // 9 GiB leaves exactly 30 GiB: admitted, and the best-effort cap shrinks to it.
    a.admit_holding("cap9", mem(9 * GI), Owner::default(), &holds)
        .unwrap();
    assert_eq!(best_effort_of(&a, "be"), (None, Some(30 * GI)));
    assert_eq!(best_effort_of(&a, "cap9"), (Some(9 * GI), None));

    // Raising the cap by update is held to the same rule…
    let grow = Change {
        memory: Some(MemoryRequest::Bytes(10 * GI)),
        ..Change::default()
    };
    let e = a.update_holding("cap9", &grow, &holds).unwrap_err();
    assert!(
        matches!(&e, AdmitError::Refused { refusal: Refusal::UpdateDoesNotFit(d), .. }
            if matches!(d.failed[..], [Constraint::BestEffortHeld { .. }])),
        "{e}"
    );
    assert_eq!(best_effort_of(&a, "cap9"), (Some(9 * GI), None));
    // …and so is a second best-effort slice (it would halve the share).
    let e = a
        .admit_holding("be2", compute_only(10), Owner::default(), &holds)
        .unwrap_err();
    assert!(e.to_string().contains("\"be\" (holding 30Gi)"), "{e}");
    // An update that lowers nothing (a priority) is not held to it.
    a.update_holding(
        "cap9",
        &Change {
            priority: Some(Priority::High),
            ..Change::default()
        },
        &holds,
    )
    .unwrap();

    // Once it holds less, the same requests fit.
    let less = |_: &str, _: &str| 2 * GI;
    a.update_holding("cap9", &grow, &less).unwrap();
    assert_eq!(best_effort_of(&a, "be"), (None, Some(29 * GI)));
    a.admit_holding("be2", compute_only(10), Owner::default(), &less)
        .unwrap();
    let share = (40 * GI - (10 * GI + r) - 2 * r) / 2;
    assert_eq!(best_effort_of(&a, "be"), (None, Some(share)));
    assert_eq!(best_effort_of(&a, "be2"), (None, Some(share)));
}

#[test]
fn a_capped_slice_goes_where_it_squeezes_no_one() {
    // Bin-pack would put it on device 0 (less left there), but the best-effort slice there
    // holds what that would take away.
    let mut a = node(&[("GPU", 40 * GI), ("GPU", 80 * GI)], Placement::Binpack);
    a.admit(
        "be",
        SliceRequest {
            devices: DeviceSelector::List(vec![DeviceRef::Index(0)]),
            ..Default::default()
        },
        Owner::default(),
    )
    .unwrap();
    let holds = |id: &str, _: &str| if id == "be" { 35 * GI } else { 0 };
    a.admit_holding("c", mem(8 * GI), Owner::default(), &holds)
        .unwrap();
    assert_eq!(placed_on(&a, "c"), vec![1]);
    a.admit("d", mem(8 * GI), Owner::default()).unwrap();
    assert_eq!(
        placed_on(&a, "d"),
        vec![0],
        "nothing held: bin-pack as usual"
    );
}

#[test]
fn restore_recomputes_best_effort_caps() {
    let devs = StaticInventory::fake(&[("GPU", 40 * GI)])
        .devices()
        .unwrap();
    let mut a = Admission::new(devs.clone(), Policy::default());
    let r = a.policy().reserve_on(0);
    a.admit("be", compute_only(30), Owner::default()).unwrap();
    a.admit("cap", mem(8 * GI), Owner::default()).unwrap();
    // The record of "be" on disk was saved when it was alone (a stale, larger figure).
    let mut records: Vec<_> = a.slices().cloned().collect();
    records[0].devices[0].memory_best_effort = Some(40 * GI - r);
    let mut b = Admission::new(devs, Policy::default());
    for rec in records {
        assert!(b.restore(rec).unwrap().is_empty());
    }
    assert_eq!(
        best_effort_of(&b, "be"),
        (None, Some(40 * GI - 8 * GI - 2 * r))
    );
    // A restored capped record claiming a best-effort figure does not keep it.
    assert_eq!(best_effort_of(&b, "cap"), (Some(8 * GI), None));
}

#[test]
fn a_best_effort_slice_goes_where_its_share_is_largest() {
    // Bin-pack would put it where the least is left (device 1, 9 GiB after the 70 GiB cap);
    // it goes to device 0, 39.5 GiB, and the 80 GiB device keeps its hole as it was.
    let mut a = node(&[("GPU", 40 * GI), ("GPU", 80 * GI)], Placement::Binpack);
    a.admit("big", mem(70 * GI), Owner::default()).unwrap();
    assert_eq!(placed_on(&a, "big"), vec![1]);
    a.admit("be", compute_only(30), Owner::default()).unwrap();
    assert_eq!(placed_on(&a, "be"), vec![0]);
    assert_eq!(best_effort_of(&a, "be"), (None, Some(40 * GI - 512 * MI)));
    // The share counts the neighbours: the second to fourth still get more on device 0
    // (19.5, 12.8, 9.5 GiB each) than the 9 GiB device 1 offers; the fifth (7.5) does not.
    for id in ["be2", "be3", "be4"] {
        a.admit(id, compute_only(10), Owner::default()).unwrap();
        assert_eq!(placed_on(&a, id), vec![0], "{id}");
    }
    a.admit("be5", compute_only(10), Owner::default()).unwrap();
    assert_eq!(placed_on(&a, "be5"), vec![1]);
    assert_eq!(best_effort_of(&a, "be5"), (None, Some(9 * GI)));
    assert_eq!(
        best_effort_of(&a, "be"),
        (None, Some((40 * GI - 4 * 512 * MI) / 4))
    );
}

/// A device a CUDA process outside gpuslice holds (a whole-GPU tenant) takes no new slice: a
/// count request goes to another device, a listed one is refused naming the process, a node
/// with no other device refuses naming it; the slice already there stays and can be updated;
/// once the process is gone the device takes slices again.
#[test]
fn a_foreign_owned_device_takes_no_new_slice() {
    let devs = [("GPU", 40 * GI), ("GPU", 40 * GI)];
    let mut a = node(&devs, Placement::Binpack);
    a.admit("before", mem(GI), Owner::default()).unwrap();
    assert_eq!(placed_on(&a, "before"), vec![0]);
    let whole = gpuslice_api::ForeignProcess {
        device: 0,
        pid: 7001,
        comm: "python3".into(),
        used: Some(2 * GI),
    };
    a.set_foreign(vec![whole.clone()]);
    // Bin-pack would put it beside "before" on device 0; device 1 it is.
    a.admit("next", mem(GI), Owner::default()).unwrap();
    assert_eq!(placed_on(&a, "next"), vec![1]);
    let listed = SliceRequest {
        devices: DeviceSelector::List(vec![DeviceRef::Index(0)]),
        ..mem(GI)
    };
    let e = a
        .admit("listed", listed.clone(), Owner::default())
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::Refused);
    let text = e.to_string();
    assert!(
        text.contains("device 0 (")
            && text.contains("foreign-owned")
            && text.contains("pid 7001 python3"),
        "{text}"
    );
    match refusal(e) {
        Refusal::ListedDeviceFull(d) => assert_eq!(
            d.failed,
            vec![Constraint::Foreign {
                processes: vec![(7001, "python3".into())]
            }]
        ),
        other => panic!("{other:?}"),
    }
    // Both devices foreign-owned: a count request names each.
    a.set_foreign(vec![
        whole.clone(),
        gpuslice_api::ForeignProcess {
            device: 1,
            pid: 7002,
            ..whole.clone()
        },
    ]);
    let text = a
        .admit("none", mem(GI), Owner::default())
        .unwrap_err()
        .to_string();
    assert!(
        text.contains("needs 1 device(s), 0 fit")
            && text.contains("pid 7001")
            && text.contains("pid 7002"),
        "{text}"
    );
    // What was there first stays, can be updated, and is listed beside the process.
    let up = Change {
        memory: Some(MemoryRequest::Bytes(2 * GI)),
        ..Change::default()
    };
    a.update("before", &up, &BTreeMap::new()).unwrap();
    assert_eq!(a.status().foreign.len(), 2);
    assert!(a.status().devices[0].slices.contains(&"before".to_string()));
    // The process is gone: device 0 takes slices again.
    a.set_foreign(Vec::new());
    a.admit("listed", listed, Owner::default()).unwrap();
    assert_eq!(placed_on(&a, "listed"), vec![0]);
    assert!(a.status().foreign.is_empty());
}
