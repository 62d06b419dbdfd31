//! Reading slice requests from annotations and environment: precedence, HAMi migration, errors.

use std::collections::BTreeMap;

use gpuslice_api::{DeviceRef, DeviceSelector, MemoryRequest, Priority, SliceRequest};

const GI: u64 = 1 << 30;
const MI: u64 = 1 << 20;

fn ann(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn err(a: &[(&str, &str)], e: &[(&str, &str)]) -> String {
    SliceRequest::from_sources(&ann(a), &env(e))
        .expect_err("expected an error")
        .to_string()
}

fn ok(a: &[(&str, &str)], e: &[(&str, &str)]) -> Option<SliceRequest> {
    SliceRequest::from_sources(&ann(a), &env(e)).expect("expected a request")
}

#[test]
fn nothing_asked_means_none() {
    assert_eq!(ok(&[], &[]), None);
    assert_eq!(
        ok(
            &[("io.kubernetes.cri.container-type", "sandbox")],
            &[("PATH", "/bin")]
        ),
        None
    );
}

#[test]
fn full_request_from_annotations() {
    let r = ok(
        &[
            ("gpuslice.io/memory", "8Gi"),
            ("gpuslice.io/compute", "30"),
            ("gpuslice.io/compute-limit", "60%"),
            ("gpuslice.io/priority", "High"),
            ("gpuslice.io/devices", "2"),
            ("gpuslice.io/model", "H100"),
        ],
        &[],
    )
    .unwrap();
    assert_eq!(r.memory, Some(MemoryRequest::Bytes(8 * GI)));
    assert_eq!(r.compute, Some(30));
    assert_eq!(r.compute_limit, Some(60));
    assert_eq!(r.limit(), 60);
    assert_eq!(r.priority, Priority::High);
    assert_eq!(r.devices, DeviceSelector::Count(2));
    assert_eq!(r.model.as_deref(), Some("H100"));
}

#[test]
fn defaults_when_partially_asked() {
    let r = ok(&[], &[("GPUSLICE_COMPUTE", "20")]).unwrap();
    assert_eq!(r.memory, None);
    assert_eq!(r.compute, Some(20));
    assert_eq!(r.limit(), 100);
    assert_eq!(r.priority, Priority::Normal);
    assert_eq!(r.devices, DeviceSelector::Count(1));
}

#[test]
fn annotations_win_per_key_and_last_env_wins() {
    let r = ok(
        &[("gpuslice.io/memory", "2Gi")],
        &[
            ("GPUSLICE_MEMORY", "4Gi"),
            ("GPUSLICE_PRIORITY", "high"),
            ("GPUSLICE_PRIORITY", "low"),
        ],
    )
    .unwrap();
    assert_eq!(r.memory, Some(MemoryRequest::Bytes(2 * GI)));
    assert_eq!(r.priority, Priority::Low);
}

#[test]
fn hami_variables_only_without_gpuslice_keys() {
    let r = ok(
        &[],
        &[
            ("CUDA_DEVICE_MEMORY_LIMIT", "4096m"),
            ("CUDA_DEVICE_SM_LIMIT", "50"),
        ],
    )
    .unwrap();
    assert_eq!(r.memory, Some(MemoryRequest::Bytes(4096 * MI)));
    assert_eq!(r.compute_limit, Some(50));
    assert_eq!(r.compute, None);

    let r = ok(&[], &[("CUDA_DEVICE_MEMORY_LIMIT", "4g")]).unwrap();
    assert_eq!(r.memory, Some(MemoryRequest::Bytes(4 * GI)));

    // Any gpuslice key turns HAMi's variables off entirely.
    let r = ok(
        &[("gpuslice.io/priority", "low")],
        &[
            ("CUDA_DEVICE_MEMORY_LIMIT", "4g"),
            ("CUDA_DEVICE_SM_LIMIT", "50"),
        ],
    )
    .unwrap();
    assert_eq!(r.memory, None);
    assert_eq!(r.compute_limit, None);

    // HAMi's "0 = unlimited" alone asks for nothing.
    assert_eq!(ok(&[], &[("CUDA_DEVICE_SM_LIMIT", "0")]), None);
    assert_eq!(
        err(&[], &[("CUDA_DEVICE_MEMORY_LIMIT", "4Gi")]),
        "CUDA_DEVICE_MEMORY_LIMIT=\"4Gi\": unknown unit \"Gi\" (CUDA_DEVICE_MEMORY_LIMIT takes k, m or g, or plain bytes)"
    );
    assert!(
        err(&[], &[("CUDA_DEVICE_SM_LIMIT", "150")]).starts_with("CUDA_DEVICE_SM_LIMIT=\"150\"")
    );
}

#[test]
fn errors_name_key_value_reason() {
    assert_eq!(
        err(&[("gpuslice.io/memory", "12Q")], &[]),
        "gpuslice.io/memory=\"12Q\": unknown unit \"Q\" (use Ki, Mi, Gi, Ti, K, M, G, T or %)"
    );
    assert_eq!(
        err(&[], &[("GPUSLICE_MEMORY", "0")]),
        "GPUSLICE_MEMORY=\"0\": must be greater than zero"
    );
    assert_eq!(
        err(&[("gpuslice.io/compute", "101")], &[]),
        "gpuslice.io/compute=\"101\": must be a percentage from 1 to 100"
    );
    assert!(err(&[("gpuslice.io/compute", "0")], &[]).contains("must be at least 1"));
    assert!(err(&[("gpuslice.io/compute", "ten")], &[]).contains("not a whole number"));
    assert_eq!(
        err(
            &[("gpuslice.io/compute", "50")],
            &[("GPUSLICE_COMPUTE_LIMIT", "20")]
        ),
        "GPUSLICE_COMPUTE_LIMIT=\"20\": ceiling 20 is below the guaranteed share 50 (gpuslice.io/compute=\"50\")"
    );
    assert_eq!(
        err(&[("gpuslice.io/priority", "urgent")], &[]),
        "gpuslice.io/priority=\"urgent\": unknown priority (use high, normal or low)"
    );
    assert_eq!(
        err(&[("gpuslice.io/devices", "")], &[]),
        "gpuslice.io/devices=\"\": empty value"
    );
    assert_eq!(
        err(&[("gpuslice.io/devices", "0")], &[]),
        "gpuslice.io/devices=\"0\": device count must be at least 1"
    );
    assert_eq!(
        err(&[("gpuslice.io/devices", "0,,1")], &[]),
        "gpuslice.io/devices=\"0,,1\": empty entry in device list"
    );
    assert_eq!(
        err(&[("gpuslice.io/devices", "0,gpu0")], &[]),
        "gpuslice.io/devices=\"0,gpu0\": \"gpu0\" is neither a device index nor a UUID (GPU-…)"
    );
    assert_eq!(
        err(&[("gpuslice.io/devices", "1,1")], &[]),
        "gpuslice.io/devices=\"1,1\": device 1 is listed twice"
    );
    assert_eq!(
        err(&[("gpuslice.io/model", "  ")], &[]),
        "gpuslice.io/model=\"  \": empty value"
    );
    assert!(err(&[("gpuslice.io/memroy", "1Gi")], &[])
        .starts_with("gpuslice.io/memroy=\"1Gi\": unknown gpuslice annotation"));
}

#[test]
fn device_lists() {
    let r = ok(&[("gpuslice.io/devices", " 0, 2 ")], &[]).unwrap();
    assert_eq!(
        r.devices,
        DeviceSelector::List(vec![DeviceRef::Index(0), DeviceRef::Index(2)])
    );
    let r = ok(
        &[],
        &[(
            "GPUSLICE_DEVICES",
            "GPU-8f1e2a3b-0000-1111-2222-333344445555",
        )],
    )
    .unwrap();
    assert_eq!(
        r.devices,
        DeviceSelector::List(vec![DeviceRef::Uuid(
            "GPU-8f1e2a3b-0000-1111-2222-333344445555".into()
        )])
    );
    assert_eq!(
        r.devices.to_string(),
        "GPU-8f1e2a3b-0000-1111-2222-333344445555"
    );
}

#[test]
fn percent_memory_is_kept_for_later_resolution() {
    let r = ok(&[("gpuslice.io/memory", "25%")], &[]).unwrap();
    assert_eq!(r.memory, Some(MemoryRequest::Percent(25)));
    assert_eq!(r.memory.unwrap().resolve(80 * GI), 20 * GI);
}

#[test]
fn validate_structured_requests() {
    let mut r = SliceRequest {
        compute: Some(50),
        compute_limit: Some(40),
        ..Default::default()
    };
    assert!(r
        .validate()
        .unwrap_err()
        .to_string()
        .contains("below the guaranteed share"));
    r.compute_limit = Some(101);
    assert!(r.validate().unwrap_err().to_string().contains("1 to 100"));
    r.compute_limit = None;
    assert_eq!(r.validate(), Ok(()));
    r.devices = DeviceSelector::List(vec![]);
    assert!(r
        .validate()
        .unwrap_err()
        .to_string()
        .contains("empty device list"));
    r.devices = DeviceSelector::Count(0);
    assert!(r.validate().is_err());
    r.devices = DeviceSelector::List(vec![DeviceRef::Uuid("nope".into())]);
    assert!(r.validate().is_err());
    r.devices = DeviceSelector::Count(1);
    r.memory = Some(MemoryRequest::Percent(0));
    assert!(r.validate().is_err());
}

#[test]
fn provenance_names_the_keys_and_values_the_request_came_from() {
    use gpuslice_api::request::provenance;
    let a = ann(&[("gpuslice.io/memory", "100Gi")]);
    let e = env(&[("GPUSLICE_MEMORY", "1Gi"), ("GPUSLICE_DEVICES", "GPU-x")]);
    // The annotation wins for memory; the environment supplies devices.
    assert_eq!(
        provenance(&a, &e),
        "gpuslice.io/memory=\"100Gi\" GPUSLICE_DEVICES=\"GPU-x\""
    );
    let hami = env(&[("CUDA_DEVICE_MEMORY_LIMIT", "4g")]);
    assert_eq!(
        provenance(&BTreeMap::new(), &hami),
        "CUDA_DEVICE_MEMORY_LIMIT=\"4g\""
    );
    assert_eq!(provenance(&BTreeMap::new(), &[]), "");
}
