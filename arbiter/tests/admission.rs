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
fn uncapped_slices_take_the_whole_device_unless_overcommit() {
    let mut a = node(&[("GPU", 40 * GI)], Placement::Binpack);
    a.admit("small", mem(GI), Owner::default()).unwrap();
    let e = a
        .admit("whole", SliceRequest::default(), Owner::default())
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("uncapped slice needs the whole device"),
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
