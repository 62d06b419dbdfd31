//! Configuration file: defaults, full file, unknown keys and bad values named, missing files.

use std::path::Path;
use std::time::Duration;

use gpuslice_api::config::{parse_duration, DEFAULT_CONTEXT_RESERVE};
use gpuslice_api::{ByteSize, Config, ConfigError, FailMode, Placement};

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::from_toml_str(text, Path::new("test.toml"))
}

#[test]
fn empty_file_is_defaults() {
    let c = parse("").unwrap();
    assert_eq!(c, Config::default());
    assert_eq!(c.state_dir, Path::new("/run/gpuslice"));
    assert_eq!(c.admission.placement, Placement::Binpack);
    assert!(!c.admission.overcommit_memory);
    assert!(!c.admission.dra_only);
    assert_eq!(
        c.admission.context_reserve,
        ByteSize(DEFAULT_CONTEXT_RESERVE)
    );
    assert_eq!(c.scheduler.quantum, Duration::from_millis(5));
    assert_eq!(c.metrics.listen.to_string(), "127.0.0.1:9447");
    assert_eq!(c.fail, FailMode::Closed);
}

#[test]
fn full_file() {
    let c = parse(
        r#"
state_dir = "/tmp/gs"
interposer = "/opt/gpuslice/libgpuslice.so"
nvml_library = "/opt/sim/libnvidia-ml.so.1"
fail = "open"
[admission]
placement = "spread"
overcommit_memory = true
context_reserve = "300Mi"
processes_per_slice = 2
dra_only = true
[scheduler]
quantum = "2500us"
[metrics]
listen = "127.0.0.1:9555"
"#,
    )
    .unwrap();
    assert_eq!(c.state_dir, Path::new("/tmp/gs"));
    assert_eq!(c.fail, FailMode::Open);
    assert_eq!(c.admission.placement, Placement::Spread);
    assert!(c.admission.overcommit_memory);
    assert_eq!(c.admission.context_reserve, ByteSize(300 << 20));
    assert_eq!(c.admission.processes_per_slice, 2);
    assert!(c.admission.dra_only);
    assert_eq!(c.scheduler.quantum, Duration::from_micros(2500));
    assert_eq!(c.metrics.listen.port(), 9555);
    // Render and re-read: the same configuration.
    assert_eq!(parse(&c.to_toml()).unwrap(), c);
}

#[test]
fn unknown_keys_are_named() {
    let e = parse("statedir = \"/x\"").unwrap_err().to_string();
    assert!(e.contains("statedir"), "{e}");
    let e = parse("[admission]\nplacment = \"spread\"")
        .unwrap_err()
        .to_string();
    assert!(e.contains("placment"), "{e}");
    let e = parse("[admission]\nplacement = \"random\"")
        .unwrap_err()
        .to_string();
    assert!(e.contains("random"), "{e}");
}

#[test]
fn bad_values_are_named() {
    let e = parse("[scheduler]\nquantum = \"5 fortnights\"")
        .unwrap_err()
        .to_string();
    assert!(e.contains("fortnights"), "{e}");
    let e = parse("[scheduler]\nquantum = \"10us\"")
        .unwrap_err()
        .to_string();
    assert!(e.contains("scheduler.quantum"), "{e}");
    let e = parse("[metrics]\nlisten = \"0.0.0.0:9447\"")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("metrics.listen") && e.contains("loopback"),
        "{e}"
    );
    assert!(parse("[metrics]\nlisten = \"0.0.0.0:9447\"\nallow_remote = true").is_ok());
    let e = parse("[admission]\ncontext_reserve = \"10%\"")
        .unwrap_err()
        .to_string();
    assert!(e.contains("percentage"), "{e}");
    let e = parse("state_dir = \"relative\"").unwrap_err().to_string();
    assert!(e.contains("state_dir") && e.contains("absolute"), "{e}");
}

#[test]
fn missing_files() {
    let missing = Path::new("/nonexistent/gpuslice/config.toml");
    assert_eq!(Config::load(missing, false).unwrap(), Config::default());
    let e = Config::load(missing, true).unwrap_err();
    assert!(matches!(e, ConfigError::Read { .. }));
    assert!(e.to_string().contains("/nonexistent/gpuslice/config.toml"));
}

#[test]
fn durations() {
    assert_eq!(parse_duration("5ms"), Ok(Duration::from_millis(5)));
    assert_eq!(parse_duration("0.5ms"), Ok(Duration::from_micros(500)));
    assert_eq!(parse_duration("1s"), Ok(Duration::from_secs(1)));
    assert!(parse_duration("5").is_err());
    assert!(parse_duration("ms").is_err());
}

#[test]
fn backstop_defaults_and_bad_values() {
    use gpuslice_api::BackstopAction;
    let c = parse("").unwrap();
    assert!(c.backstop.enabled);
    assert_eq!(c.backstop.period, std::time::Duration::from_millis(250));
    assert_eq!(c.backstop.memory_action, BackstopAction::Kill);
    assert_eq!(c.backstop.lease_action, BackstopAction::Log);
    let c = parse(
        "[backstop]\nmemory_action = \"freeze\"\nlease_action = \"kill\"\nperiod = \"100ms\"\n",
    )
    .unwrap();
    assert_eq!(c.backstop.memory_action, BackstopAction::Freeze);
    assert_eq!(c.backstop.lease_action, BackstopAction::Kill);
    let e = parse("[backstop]\nperiod = \"1s\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("backstop.period") && e.contains("250ms"), "{e}");
    let e = parse("[backstop]\nmemory_action = \"nuke\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("nuke"), "{e}");
    let e = parse("[backstop]\nlease_tolerance = \"2s\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("backstop.lease_tolerance"), "{e}");
}

#[test]
fn high_linger_defaults_off_and_is_range_checked() {
    assert_eq!(parse("").unwrap().scheduler.high_linger, Duration::ZERO);
    for (ok, d) in [("0us", 0), ("500us", 500), ("5ms", 5000)] {
        let c = parse(&format!("[scheduler]\nhigh_linger = \"{ok}\"")).unwrap();
        assert_eq!(c.scheduler.high_linger, Duration::from_micros(d));
        assert_eq!(parse(&c.to_toml()).unwrap(), c);
    }
    let e = parse("[scheduler]\nhigh_linger = \"6ms\"")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("scheduler.high_linger") && e.contains("5ms"),
        "{e}"
    );
    let e = parse("[scheduler]\nhigh_linger = \"soon\"")
        .unwrap_err()
        .to_string();
    assert!(e.contains("high_linger"), "{e}");
}

#[test]
fn realtime_priority_defaults_off_and_is_range_checked() {
    assert_eq!(parse("").unwrap().scheduler.realtime_priority, 0);
    for ok in [0, 1, 10, 99] {
        let c = parse(&format!("[scheduler]\nrealtime_priority = {ok}")).unwrap();
        assert_eq!(c.scheduler.realtime_priority, ok);
        assert_eq!(parse(&c.to_toml()).unwrap(), c);
    }
    let e = parse("[scheduler]\nrealtime_priority = 100")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("scheduler.realtime_priority = 100") && e.contains("1 to 99"),
        "{e}"
    );
    // Negative or not a number: toml's own error names the key.
    for bad in ["-1", "\"high\""] {
        let e = parse(&format!("[scheduler]\nrealtime_priority = {bad}"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("realtime_priority"), "{bad}: {e}");
    }
}

#[test]
fn kubernetes_device_plugin_unit_defaults_to_1gi_and_takes_whole_mib() {
    assert_eq!(
        parse("").unwrap().kubernetes.device_plugin_unit,
        ByteSize(1 << 30)
    );
    let c = parse("[kubernetes]\ndevice_plugin_unit = \"256Mi\"").unwrap();
    assert_eq!(c.kubernetes.device_plugin_unit, ByteSize(256 << 20));
    assert_eq!(parse(&c.to_toml()).unwrap(), c);
    for (bad, words) in [
        ("\"1000\"", "1000 bytes"),
        ("\"0\"", "0 bytes"),
        ("\"1.5Mi\"", "bytes"),
    ] {
        let e = parse(&format!("[kubernetes]\ndevice_plugin_unit = {bad}"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("kubernetes.device_plugin_unit")
                && e.contains(words)
                && e.contains("whole number of MiB"),
            "{bad}: {e}"
        );
    }
    let e = parse("[kubernetes]\ndevice_plugin_unit = \"lots\"")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("device_plugin_unit") && e.contains("lots"),
        "{e}"
    );
    let e = parse("[kubernetes]\nunit = \"1Gi\"")
        .unwrap_err()
        .to_string();
    assert!(e.contains("unit"), "{e}");
}

#[test]
fn high_repay_turns_defaults_off_and_takes_only_a_boolean() {
    assert!(!parse("").unwrap().scheduler.high_repay_turns);
    let c = parse("[scheduler]\nhigh_repay_turns = true").unwrap();
    assert!(c.scheduler.high_repay_turns);
    assert_eq!(parse(&c.to_toml()).unwrap(), c);
    let e = parse("[scheduler]\nhigh_repay_turns = \"yes\"")
        .unwrap_err()
        .to_string();
    assert!(e.contains("high_repay_turns"), "{e}");
}
