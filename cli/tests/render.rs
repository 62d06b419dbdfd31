//! Option parsing errors (named after the option), and status rendering from a fixed value:
//! golden table text and the JSON shape.

use clap::Parser;
use gpuslice_api::{Priority, Request};
use gpuslice_cli::args::{Cli, Command};
use gpuslice_cli::options::{slice_request, update_request, OptionError};
use gpuslice_cli::status::{bytes, DeviceView, SliceRow, StatusView, Strikes};

const GI: u64 = 1 << 30;

fn run_err(args: &[&str]) -> OptionError {
    let mut v = vec!["gpuslice", "run"];
    v.extend_from_slice(args);
    v.extend_from_slice(&["--", "true"]);
    let cli = Cli::try_parse_from(v).unwrap();
    let Command::Run(r) = cli.command else {
        panic!("not run")
    };
    slice_request(&r).unwrap_err()
}

#[test]
fn run_option_errors_name_option_value_reason() {
    let e = run_err(&["--memory", "12Q"]);
    assert_eq!(e.option, "--memory");
    assert_eq!(e.value, "12Q");
    assert!(e.reason.contains("unknown unit"), "{e}");
    assert!(e.to_string().starts_with("--memory=\"12Q\": "), "{e}");

    let e = run_err(&["--compute", "101"]);
    assert_eq!((e.option.as_str(), e.value.as_str()), ("--compute", "101"));

    let e = run_err(&["--compute", "50", "--compute-limit", "20"]);
    assert_eq!(e.option, "--compute-limit");
    assert!(e.reason.contains("--compute=\"50\""), "{e}");
    assert!(!e.to_string().contains("gpuslice.io/"), "{e}");

    let e = run_err(&["--priority", "urgent"]);
    assert_eq!(e.option, "--priority");
    let e = run_err(&["--devices", "0,,1"]);
    assert_eq!(e.option, "--devices");
    let e = run_err(&["--model", " "]);
    assert_eq!(e.option, "--model");
}

#[test]
fn run_options_build_the_request() {
    let cli = Cli::try_parse_from([
        "gpuslice",
        "run",
        "--memory",
        "1.5Gi",
        "--compute",
        "30",
        "--compute-limit",
        "60",
        "--priority",
        "HIGH",
        "--devices",
        "2",
        "--model",
        "H100",
        "--",
        "app",
        "--flag",
    ])
    .unwrap();
    let Command::Run(r) = cli.command else {
        panic!()
    };
    let req = slice_request(&r).unwrap();
    assert_eq!(req.memory, Some("1536Mi".parse().unwrap()));
    assert_eq!((req.compute, req.compute_limit), (Some(30), Some(60)));
    assert_eq!(req.priority, Priority::High);
    assert_eq!(req.devices.count(), 2);
    assert_eq!(req.model.as_deref(), Some("H100"));
    assert_eq!(r.command, vec!["app", "--flag"]);
    // No options: best effort, uncapped, one device.
    let cli = Cli::try_parse_from(["gpuslice", "run", "--", "app"]).unwrap();
    let Command::Run(r) = cli.command else {
        panic!()
    };
    assert_eq!(slice_request(&r).unwrap(), Default::default());
    // A command is required.
    assert!(Cli::try_parse_from(["gpuslice", "run", "--memory", "1Gi"]).is_err());
}

fn update(args: &[&str]) -> Result<Request, OptionError> {
    let mut v = vec!["gpuslice", "update"];
    v.extend_from_slice(args);
    let cli = Cli::try_parse_from(v).unwrap();
    let Command::Update(u) = cli.command else {
        panic!()
    };
    update_request(&u.slice, &u.request)
}

#[test]
fn update_options() {
    match update(&["s1", "--memory", "4Gi", "--compute", "0"]).unwrap() {
        Request::Update {
            slice_id,
            memory,
            compute,
            compute_limit,
            priority,
        } => {
            assert_eq!(slice_id, "s1");
            assert_eq!(memory, Some("4Gi".parse().unwrap()));
            assert_eq!(compute, Some(0), "--compute 0 = best effort");
            assert_eq!((compute_limit, priority), (None, None));
        }
        other => panic!("{other:?}"),
    }
    match update(&["s1", "--priority", "low"]).unwrap() {
        Request::Update { priority, .. } => assert_eq!(priority, Some(Priority::Low)),
        other => panic!("{other:?}"),
    }
    let e = update(&["s1"]).unwrap_err();
    assert!(e.reason.contains("nothing to change"), "{e}");
    let e = update(&["s1", "--memory", "0"]).unwrap_err();
    assert_eq!((e.option.as_str(), e.value.as_str()), ("--memory", "0"));
}

fn fixed() -> StatusView {
    StatusView {
        devices: vec![
            DeviceView {
                index: 0,
                uuid: "GPU-aaaa".into(),
                name: "NVIDIA H100 80GB HBM3".into(),
                memory_total: 80 * GI,
                memory_committed: 9 * GI + GI / 2,
                compute_guaranteed: 30,
                context: Some(gpuslice_api::ContextStatus {
                    footprint: 518 << 20,
                    source: "measured".into(),
                    driver: "580.159.04".into(),
                    charge: 774 << 20,
                    reason: None,
                }),
                foreign: vec![],
                slices: vec![
                    SliceRow {
                        slice_id: "train".into(),
                        memory_cap: Some(8 * GI),
                        memory_best_effort: None,
                        memory_used: Some(3 * GI / 2),
                        compute_guaranteed: Some(30),
                        compute_limit: 60,
                        achieved_1s: Some(29.5),
                        achieved_10s: Some(30.04),
                        priority: Priority::Normal,
                        processes: Some(vec![41230, 41231]),
                        backstop: vec![gpuslice_api::BackstopEvent {
                            slice_id: "train".into(),
                            device: 0,
                            kind: "memory".into(),
                            action: "kill".into(),
                            pids: vec![41231],
                            message: "killed pid 41231 on device 0 (over its memory cap: \
                                      memory 9.30 GiB > cap 8 GiB + context allowance 1 GiB)"
                                .into(),
                            at_ms: 1,
                        }],
                        footprints: vec![],
                        strikes: Some(Strikes::default()),
                    },
                    SliceRow {
                        slice_id: "infer-1".into(),
                        memory_cap: None,
                        memory_best_effort: None,
                        memory_used: None,
                        compute_guaranteed: None,
                        compute_limit: 100,
                        achieved_1s: None,
                        achieved_10s: None,
                        priority: Priority::High,
                        processes: None,
                        backstop: vec![],
                        footprints: vec![],
                        strikes: None,
                    },
                ],
            },
            DeviceView {
                index: 1,
                uuid: "GPU-bbbb".into(),
                name: "NVIDIA A100-SXM4-40GB".into(),
                memory_total: 40 * GI,
                memory_committed: 0,
                compute_guaranteed: 0,
                context: None,
                foreign: vec![],
                slices: vec![],
            },
        ],
    }
}

#[test]
fn table_golden() {
    let want = "\
GPU 0  NVIDIA H100 80GB HBM3  GPU-aaaa  memory 80Gi  committed 9.5Gi  guaranteed 30%
  context 518Mi (measured, driver 580.159.04); each process charged 774Mi for its context and modules
  SLICE    MEM CAP  MEM USED  GUAR  LIMIT  ACH 1s  ACH 10s  PRIO    PROCS
  train    8Gi      1.5Gi     30%   60%    29.5%   30.0%    normal  2 (41230,41231)
  infer-1  none     n/a       -     100%   n/a     n/a      high    n/a
  train: backstop: killed pid 41231 on device 0 (over its memory cap: memory 9.30 GiB > cap 8 GiB + context allowance 1 GiB)
GPU 1  NVIDIA A100-SXM4-40GB  GPU-bbbb  memory 40Gi  committed 0B  guaranteed 0%
  (no slices)
";
    assert_eq!(fixed().render(), want);
    assert_eq!(StatusView::default().render(), "no GPU on this node\n");
}

#[test]
fn json_shape() {
    let v: serde_json::Value = serde_json::from_str(&fixed().to_json()).unwrap();
    let d0 = &v["devices"][0];
    assert_eq!(d0["index"], 0);
    assert_eq!(d0["memory_total"], 80 * GI);
    let s = &d0["slices"][0];
    assert_eq!(s["slice_id"], "train");
    assert_eq!(s["memory_cap"], 8 * GI);
    assert_eq!(s["memory_used"], 3 * GI / 2);
    assert_eq!(s["compute_guaranteed"], 30);
    assert_eq!(s["compute_limit"], 60);
    assert_eq!(s["achieved_1s"], 29.5);
    assert_eq!(s["priority"], "normal");
    assert_eq!(s["processes"], serde_json::json!([41230, 41231]));
    assert_eq!(s["backstop"][0]["action"], "kill");
    assert_eq!(s["backstop"][0]["pids"], serde_json::json!([41231]));
    let s = &d0["slices"][1];
    assert!(s["memory_cap"].is_null() && s["achieved_10s"].is_null());
    assert!(
        s.get("backstop").is_none(),
        "no backstop key without events"
    );
    assert!(v["devices"][1]["slices"].as_array().unwrap().is_empty());
    // Round trip.
    let back: StatusView = serde_json::from_value(v).unwrap();
    assert_eq!(back, fixed());
}

#[test]
fn byte_formatting() {
    assert_eq!(bytes(0), "0B");
    assert_eq!(bytes(512 << 20), "512Mi");
    assert_eq!(bytes(3 * GI / 2), "1.5Gi");
    assert_eq!(bytes(80 * GI), "80Gi");
    assert_eq!(bytes(1536), "1.5Ki");
}

#[test]
fn achieved_shares_come_from_the_status_reply() {
    use gpuslice_api::{
        AssignedDevice, DeviceStatus, NodeStatus, Owner, ShareStatus, SliceRequest, SliceStatus,
    };
    let dev = |shares: Vec<ShareStatus>| DeviceStatus {
        index: 0,
        uuid: "GPU-aaaa".into(),
        name: "NVIDIA H100 80GB HBM3".into(),
        memory_total: 80 * GI,
        memory_committed: 0,
        compute_guaranteed: 30,
        slices: vec!["train".into()],
        shares,
        context: None,
    };
    let slice: SliceStatus = serde_json::from_value(serde_json::json!({
        "slice_id": "train",
        "request": serde_json::to_value(SliceRequest::default()).unwrap(),
        "owner": serde_json::to_value(Owner::default()).unwrap(),
        "devices": [serde_json::to_value(AssignedDevice {
            index: 0,
            uuid: "GPU-aaaa".into(),
            name: "NVIDIA H100 80GB HBM3".into(),
            memory_cap: None,
            memory_best_effort: None,
            memory_total: 80 * GI,
        }).unwrap()],
    }))
    .unwrap();
    let share = ShareStatus {
        slice_id: "train".into(),
        achieved_1s_bp: 2950,
        achieved_10s_bp: 3004,
        grants: 7,
        wait_ns: 0,
        holding: true,
        ..Default::default()
    };
    let with = NodeStatus {
        devices: vec![dev(vec![share])],
        slices: vec![slice.clone()],
        backstop: Vec::new(),
        processes: Vec::new(),
        foreign: Vec::new(),
    };
    let view = StatusView::build(&with, std::path::Path::new("/nonexistent"));
    let row = &view.devices[0].slices[0];
    assert_eq!(
        (row.achieved_1s, row.achieved_10s),
        (Some(29.5), Some(30.04))
    );
    // Without a scheduler the reply has no shares: the columns say n/a, never a number.
    let without = NodeStatus {
        devices: vec![dev(vec![])],
        slices: vec![slice],
        backstop: Vec::new(),
        processes: Vec::new(),
        foreign: Vec::new(),
    };
    let view = StatusView::build(&without, std::path::Path::new("/nonexistent"));
    assert_eq!(view.devices[0].slices[0].achieved_1s, None);
    assert_eq!(view.devices[0].slices[0].strikes, None);
}

#[test]
fn strikes_come_from_the_status_reply() {
    use gpuslice_api::{AssignedDevice, DeviceStatus, NodeStatus, ShareStatus, SliceStatus};
    let slice = |id: &str| SliceStatus {
        slice_id: id.into(),
        request: Default::default(),
        owner: Default::default(),
        devices: vec![AssignedDevice {
            index: 0,
            uuid: "GPU-aaaa".into(),
            name: "NVIDIA H100 80GB HBM3".into(),
            memory_cap: None,
            memory_best_effort: None,
            memory_total: 80 * GI,
        }],
    };
    let node = NodeStatus {
        devices: vec![DeviceStatus {
            index: 0,
            uuid: "GPU-aaaa".into(),
            name: "NVIDIA H100 80GB HBM3".into(),
            memory_total: 80 * GI,
            memory_committed: 0,
            compute_guaranteed: 0,
            slices: vec!["liar".into(), "honest".into()],
            shares: vec![
                ShareStatus {
                    slice_id: "liar".into(),
                    strikes: 3,
                    strikes_total: 5,
                    backed_off: true,
                    ..Default::default()
                },
                ShareStatus {
                    slice_id: "honest".into(),
                    grants: 9,
                    ..Default::default()
                },
            ],
            context: None,
        }],
        slices: vec![slice("liar"), slice("honest")],
        backstop: Vec::new(),
        processes: Vec::new(),
        foreign: Vec::new(),
    };
    let view = StatusView::build(&node, std::path::Path::new("/nonexistent"));
    let rows = &view.devices[0].slices;
    assert_eq!(
        rows[0].strikes,
        Some(Strikes {
            consecutive: 3,
            total: 5,
            backed_off: true
        })
    );
    assert_eq!(rows[1].strikes, Some(Strikes::default()));
    let text = view.render();
    assert!(
        text.contains(
            "  liar: 5 lease(s) lost claiming demand without launching (3 in a row, backed off now)\n"
        ),
        "{text}"
    );
    assert!(!text.contains("honest:"), "{text}");
    let v: serde_json::Value = serde_json::from_str(&view.to_json()).unwrap();
    let s = &v["devices"][0]["slices"];
    assert_eq!(s[0]["strikes"]["total"], 5);
    assert_eq!(s[0]["strikes"]["backed_off"], true);
    assert_eq!(s[1]["strikes"]["total"], 0);
}

/// Docker's and containerd's 64-digit container ids show as 12 digits in the table (as in
/// `docker ps`); other ids whole. `update` resolves a unique prefix, and names the candidates
/// of an ambiguous one.
#[test]
fn long_container_ids_are_shortened_and_prefixes_resolve() {
    use gpuslice_cli::status::{resolve_prefix, short_id};
    let a = "648b7a2aabe75b02767068ac2d9e86f412749a9d09d8cd48aafa1ab2675528ea".to_string();
    let b = "648b7a2aabe7ffffffffffffffffffffffffffffffffffffffffffffffffffff".to_string();
    assert_eq!(short_id(&a), "648b7a2aabe7");
    assert_eq!(short_id("train"), "train");
    assert_eq!(short_id(&"g".repeat(64)), "g".repeat(64), "not hex: whole");
    let ids = vec![a.clone(), b.clone(), "train".to_string()];
    assert_eq!(resolve_prefix("train", &ids), Ok("train"));
    assert_eq!(resolve_prefix("648b7a2aabe75", &ids), Ok(a.as_str()));
    assert_eq!(resolve_prefix(&b, &ids), Ok(b.as_str()));
    let e = resolve_prefix("648b7a2aabe7", &ids).unwrap_err();
    assert!(
        e.contains("start of 2 slices") && e.contains("648b7a2aabe7"),
        "{e}"
    );
    assert_eq!(resolve_prefix("zzz", &ids).unwrap_err(), "no slice \"zzz\"");
}

/// A slice without a cap shows its best-effort share (`be …`) from the status reply, in the
/// table and in JSON; without one (`overcommit_memory`, an older arbiter) it stays `none`.
#[test]
fn best_effort_shares_come_from_the_status_reply() {
    use gpuslice_api::{AssignedDevice, DeviceStatus, NodeStatus, SliceStatus};
    let slice = |id: &str, share: Option<u64>| SliceStatus {
        slice_id: id.into(),
        request: Default::default(),
        owner: Default::default(),
        devices: vec![AssignedDevice {
            index: 0,
            uuid: "GPU-aaaa".into(),
            name: "NVIDIA H100 80GB HBM3".into(),
            memory_cap: None,
            memory_best_effort: share,
            memory_total: 80 * GI,
        }],
    };
    let node = NodeStatus {
        devices: vec![DeviceStatus {
            index: 0,
            uuid: "GPU-aaaa".into(),
            name: "NVIDIA H100 80GB HBM3".into(),
            memory_total: 80 * GI,
            memory_committed: GI,
            compute_guaranteed: 0,
            slices: vec!["c30".into(), "old".into()],
            shares: vec![],
            context: None,
        }],
        slices: vec![slice("c30", Some(39 * GI + GI / 2)), slice("old", None)],
        backstop: Vec::new(),
        processes: Vec::new(),
        foreign: Vec::new(),
    };
    let view = StatusView::build(&node, std::path::Path::new("/nonexistent"));
    let text = view.render();
    assert!(text.contains("  c30    be 39.5Gi  n/a"), "{text}");
    assert!(text.contains("  old    none       n/a"), "{text}");
    let v: serde_json::Value = serde_json::from_str(&view.to_json()).unwrap();
    let s = &v["devices"][0]["slices"];
    assert_eq!(s[0]["memory_best_effort"], 39 * GI + GI / 2);
    assert!(s[0]["memory_cap"].is_null());
    assert!(s[1].get("memory_best_effort").is_none());
}

/// Each slice process's own footprint (NVML's figure less what the interposer counted) comes
/// from the status reply: one line per process in the table, `footprints` in JSON.
#[test]
fn process_footprints_come_from_the_status_reply() {
    use gpuslice_api::{AssignedDevice, DeviceStatus, NodeStatus, ProcessFootprint, SliceStatus};
    const MI: u64 = 1 << 20;
    let node = NodeStatus {
        devices: vec![DeviceStatus {
            index: 0,
            uuid: "GPU-aaaa".into(),
            name: "NVIDIA H200".into(),
            memory_total: 141 * GI,
            memory_committed: 9 * GI,
            compute_guaranteed: 0,
            slices: vec!["train".into()],
            shares: vec![],
            context: None,
        }],
        slices: vec![SliceStatus {
            slice_id: "train".into(),
            request: Default::default(),
            owner: Default::default(),
            devices: vec![AssignedDevice {
                index: 0,
                uuid: "GPU-aaaa".into(),
                name: "NVIDIA H200".into(),
                memory_cap: Some(8 * GI),
                memory_best_effort: None,
                memory_total: 141 * GI,
            }],
        }],
        backstop: Vec::new(),
        processes: vec![
            ProcessFootprint {
                slice_id: "train".into(),
                device: 0,
                pid: 4121,
                used: 8 * GI + 520 * MI,
                counted: Some(8 * GI),
                footprint: Some(520 * MI),
            },
            ProcessFootprint {
                slice_id: "train".into(),
                device: 0,
                pid: 4122,
                used: 600 * MI,
                counted: None,
                footprint: None,
            },
            ProcessFootprint {
                slice_id: "gone".into(),
                device: 0,
                pid: 9,
                used: 1,
                counted: Some(0),
                footprint: Some(1),
            },
        ],
        foreign: Vec::new(),
    };
    let view = StatusView::build(&node, std::path::Path::new("/nonexistent"));
    let text = view.render();
    assert!(
        text.contains(
            "  train: pid 4121: NVML 8.5Gi, counted 8Gi, own 520Mi (context and modules)"
        ),
        "{text}"
    );
    assert!(
        text.contains("  train: pid 4122: NVML 600Mi, counted n/a"),
        "{text}"
    );
    assert!(!text.contains("pid 9:"), "a slice not in the reply: {text}");
    let v: serde_json::Value = serde_json::from_str(&view.to_json()).unwrap();
    let f = &v["devices"][0]["slices"][0]["footprints"];
    assert_eq!(f[0]["footprint"], 520 * MI);
    assert_eq!(f[0]["counted"], 8 * GI);
    assert!(f[1]["footprint"].is_null());
}

/// A device the arbiter could not measure says so, with the probe's reason, under its context
/// line; `--json` carries the reason.
#[test]
fn an_unmeasured_context_says_why() {
    let mut view = fixed();
    let why = "NVML does not list the probe process: the arbiter is not in the host's pid \
               namespace (its pids [48211, 7] from the host inward), and NVML lists host pids; \
               run it with hostPID: true to measure contexts";
    view.devices[0].context = Some(gpuslice_api::ContextStatus {
        footprint: 518 << 20,
        source: "assumed".into(),
        driver: "580.159.04".into(),
        charge: 904 << 20,
        reason: Some(why.into()),
    });
    let text = view.render();
    assert!(
        text.contains(&format!(
            "  context 518Mi (assumed, driver 580.159.04); each process charged 904Mi for its \
             context and modules\n  context NOT MEASURED: {why}; charged the assumed size \
             with a margin\n"
        )),
        "{text}"
    );
    let v: serde_json::Value = serde_json::from_str(&view.to_json()).unwrap();
    assert_eq!(v["devices"][0]["context"]["reason"], why);
    assert!(fixed().to_json().find("\"reason\"").is_none());
}

/// A device with a CUDA process outside gpuslice: named with its pid, command and memory in
/// the table and in the JSON, and the slices already there are said to share it.
#[test]
fn a_foreign_owned_device_is_named_with_its_processes() {
    let mut view = fixed();
    let p = |device| gpuslice_api::ForeignProcess {
        device,
        pid: 7001,
        comm: "python3".into(),
        used: Some(2 * GI),
    };
    view.devices[0].foreign = vec![p(0)];
    view.devices[1].foreign = vec![p(1)];
    let text = view.render();
    assert!(
        text.contains(
            "  FOREIGN-OWNED by pid 7001 (python3, 2Gi) (CUDA without gpuslice): no new slice is \
             placed here; the slices below were here first and share the GPU with it\n"
        ),
        "{text}"
    );
    let gpu1 = &text[text.find("GPU 1").unwrap()..];
    assert!(
        gpu1.contains("placed here\n  (no slices)"),
        "no slices, no sharing said: {gpu1}"
    );
    let v: serde_json::Value = serde_json::from_str(&view.to_json()).unwrap();
    assert_eq!(v["devices"][0]["foreign"][0]["pid"], 7001);
    assert_eq!(v["devices"][0]["foreign"][0]["comm"], "python3");
    // Without any, the key is absent (older readers see what they saw).
    assert!(fixed().to_json().find("\"foreign\"").is_none());
}
