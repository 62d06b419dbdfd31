//! Control protocol: JSON shape of each message, round trips, versioning, strictness.

use gpuslice_api::protocol::valid_slice_id;
use gpuslice_api::*;
use serde_json::json;

fn round_trip_req(r: Request) {
    let line = serde_json::to_string(&RequestEnvelope::new(r.clone())).unwrap();
    assert!(!line.contains('\n'));
    let back: RequestEnvelope = serde_json::from_str(&line).unwrap();
    assert_eq!(back.version, PROTOCOL_VERSION);
    assert_eq!(back.request, r);
}

#[test]
fn admit_wire_format() {
    let req = Request::Admit {
        slice_id: "ctr-1".into(),
        request: SliceRequest {
            memory: Some(MemoryRequest::Bytes(8 << 30)),
            compute: Some(30),
            ..Default::default()
        },
        owner: Owner {
            container_id: Some("abc".into()),
            pid: Some(42),
            cgroup: None,
            pod: None,
        },
    };
    let v = serde_json::to_value(RequestEnvelope::new(req.clone())).unwrap();
    assert_eq!(
        v,
        json!({
            "version": 1, "op": "admit", "slice_id": "ctr-1",
            "request": {"memory": "8Gi", "compute": 30, "priority": "normal", "devices": {"count": 1}},
            "owner": {"container_id": "abc", "pid": 42}
        })
    );
    round_trip_req(req);
}

/// A Kubernetes container's owner carries its Pod (the metrics' labels); one without is the
/// wire format of before.
#[test]
fn an_owner_carries_its_pod() {
    let owner = Owner {
        container_id: Some("abc".into()),
        pod: Some(gpuslice_api::PodRef {
            namespace: "ml".into(),
            name: "trainer-7f9c".into(),
            container: "train".into(),
        }),
        ..Owner::default()
    };
    let v = serde_json::to_value(&owner).unwrap();
    assert_eq!(
        v,
        json!({"container_id": "abc",
               "pod": {"namespace": "ml", "name": "trainer-7f9c", "container": "train"}})
    );
    assert_eq!(serde_json::from_value::<Owner>(v).unwrap(), owner);
    let e = serde_json::from_value::<Owner>(json!({"pod": {"uid": "x"}})).unwrap_err();
    assert!(e.to_string().contains("uid"), "{e}");
}

#[test]
fn every_request_round_trips() {
    round_trip_req(Request::Release {
        slice_id: "a".into(),
    });
    round_trip_req(Request::Status {});
    round_trip_req(Request::Update {
        slice_id: "a".into(),
        memory: Some(MemoryRequest::Percent(10)),
        compute: Some(0),
        compute_limit: None,
        priority: Some(Priority::High),
    });
    round_trip_req(Request::Admit {
        slice_id: "b".into(),
        request: SliceRequest {
            devices: DeviceSelector::List(vec![
                DeviceRef::Index(1),
                DeviceRef::Uuid("GPU-x".into()),
            ]),
            model: Some("A100".into()),
            ..Default::default()
        },
        owner: Owner::default(),
    });
}

#[test]
fn minimal_hand_written_lines_parse() {
    let r: RequestEnvelope = serde_json::from_str(r#"{"version":1,"op":"status"}"#).unwrap();
    assert_eq!(r.request, Request::Status {});
    let r: RequestEnvelope = serde_json::from_str(
        r#"{"version":1,"op":"admit","slice_id":"x","request":{"memory":"25%"}}"#,
    )
    .unwrap();
    match r.request {
        Request::Admit { request, owner, .. } => {
            assert_eq!(request.memory, Some(MemoryRequest::Percent(25)));
            assert_eq!(owner, Owner::default());
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn strictness() {
    // Unknown op, unknown field in a request, bad quantity, missing version.
    assert!(serde_json::from_str::<RequestEnvelope>(r#"{"version":1,"op":"explode"}"#).is_err());
    assert!(serde_json::from_str::<RequestEnvelope>(
        r#"{"version":1,"op":"admit","slice_id":"x","request":{"memroy":"1Gi"}}"#
    )
    .is_err());
    let e = serde_json::from_str::<RequestEnvelope>(
        r#"{"version":1,"op":"admit","slice_id":"x","request":{"memory":"1Q"}}"#,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("unknown unit"), "{e}");
    assert!(serde_json::from_str::<RequestEnvelope>(r#"{"op":"status"}"#).is_err());
    // Unknown fields beside the op, for the operation without fields too.
    for line in [
        r#"{"version":1,"op":"status","verbose":true}"#,
        r#"{"version":1,"op":"release","slice_id":"x","force":true}"#,
        r#"{"version":1,"op":"admit","slice_id":"x","request":{},"ownr":{}}"#,
    ] {
        let e = serde_json::from_str::<RequestEnvelope>(line)
            .expect_err(line)
            .to_string();
        assert!(e.contains("unknown field"), "{line}: {e}");
    }
}

#[test]
fn responses_round_trip() {
    let dev = AssignedDevice {
        index: 0,
        uuid: "GPU-0".into(),
        name: "NVIDIA H100".into(),
        memory_total: 80 << 30,
        memory_cap: Some(8 << 30),
        memory_best_effort: None,
    };
    let all = vec![
        Response::Admitted {
            slice_id: "a".into(),
            slice_dir: "/run/gpuslice/a".into(),
            devices: vec![dev.clone()],
            existing: false,
        },
        Response::Released {
            slice_id: "a".into(),
        },
        Response::Updated {
            slice_id: "a".into(),
            devices: vec![dev.clone()],
            warnings: vec!["w".into()],
        },
        Response::Status(NodeStatus {
            devices: vec![DeviceStatus {
                index: 0,
                uuid: "GPU-0".into(),
                name: "NVIDIA H100".into(),
                memory_total: 80 << 30,
                memory_committed: 8 << 30,
                compute_guaranteed: 30,
                slices: vec!["a".into()],
                shares: vec![],
                context: None,
            }],
            slices: vec![SliceStatus {
                slice_id: "a".into(),
                request: SliceRequest::default(),
                owner: Owner::default(),
                devices: vec![dev],
            }],
            backstop: vec![gpuslice_api::BackstopEvent {
                slice_id: "a".into(),
                device: 0,
                kind: "memory".into(),
                action: "kill".into(),
                pids: vec![4121],
                message: "killed pid 4121".into(),
                at_ms: 1,
            }],
            processes: vec![gpuslice_api::ProcessFootprint {
                slice_id: "a".into(),
                device: 0,
                pid: 4121,
                used: 8 << 30,
                counted: Some(7 << 30),
                footprint: Some(1 << 30),
            }],
            foreign: vec![gpuslice_api::ForeignProcess {
                device: 1,
                pid: 7001,
                comm: "python3".into(),
                used: Some(2 << 30),
            }],
        }),
        Response::Error {
            code: ErrorCode::Refused,
            message: "no".into(),
        },
    ];
    for r in all {
        let line = serde_json::to_string(&ResponseEnvelope::new(r.clone())).unwrap();
        let back: ResponseEnvelope = serde_json::from_str(&line).unwrap();
        assert_eq!(back.response, r, "{line}");
    }
    let v = serde_json::to_value(ResponseEnvelope::new(Response::Error {
        code: ErrorCode::NotFound,
        message: "m".into(),
    }))
    .unwrap();
    assert_eq!(
        v,
        json!({"version":1,"result":"error","code":"not_found","message":"m"})
    );
}

#[test]
fn slice_ids() {
    assert!(valid_slice_id("abc-123_x.y"));
    assert!(!valid_slice_id(""));
    assert!(!valid_slice_id(".."));
    assert!(!valid_slice_id("a/b"));
    assert!(!valid_slice_id(&"x".repeat(129)));
    // The socket lives beside the slice directories.
    assert!(!valid_slice_id(gpuslice_api::protocol::SOCKET_NAME));
    assert!(!valid_slice_id("other.sock"));
    assert!(valid_slice_id("sock"));
}

#[test]
fn share_status_strike_fields_are_optional_both_ways() {
    // An arbiter that predates the strike fields: they read as 0 / false.
    let old = json!({"slice_id":"a","achieved_1s_bp":1,"achieved_10s_bp":2,"grants":3,
                     "wait_ns":4,"holding":false});
    let s: ShareStatus = serde_json::from_value(old.clone()).unwrap();
    assert_eq!((s.strikes, s.strikes_total, s.backed_off), (0, 0, false));
    // An honest slice serialises exactly as before (older readers see no new key).
    assert_eq!(serde_json::to_value(&s).unwrap(), old);
    // A struck slice carries them; a reader that ignores unknown keys (every older client:
    // ShareStatus never denied them) still parses the rest.
    let hit = ShareStatus {
        strikes: 2,
        strikes_total: 7,
        backed_off: true,
        ..s.clone()
    };
    let v = serde_json::to_value(&hit).unwrap();
    assert_eq!(
        (&v["strikes"], &v["strikes_total"], &v["backed_off"]),
        (&json!(2), &json!(7), &json!(true))
    );
    assert_eq!(serde_json::from_value::<ShareStatus>(v).unwrap(), hit);
}
