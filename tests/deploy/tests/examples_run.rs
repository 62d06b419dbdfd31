//! The example Pods run something that exists: every absolute path a container's command names
//! under one of its volume mounts is a key of the ConfigMap that volume shows (an emptyDir or a
//! missing key is an error: nothing puts the file there), and each Python script is valid
//! Python (`python3`'s own parser) importing only the standard library and what its image has.

use std::collections::BTreeSet;
use std::process::Command;

use gpuslice_deploy_tests::{kubectl_or_skip, named, objects, render_strict, s, strs};
use serde_json::Value;

const EXAMPLES: &[&str] = &["examples", "examples/dra", "examples/device-plugin"];

/// Modules the scripts may import: the standard library's they use, and PyTorch (the trainers'
/// image is pytorch/pytorch).
const IMPORTS_OK: &[&str] = &["os", "time", "torch"];

/// The files the command of `c` (in Pod `pod`) names under its mounts: (path, content), or the
/// problem.
fn command_files(pod: &Value, c: &Value, all: &[Value]) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let spec = &pod["spec"];
    let args: Vec<&str> = strs(&c["command"])
        .into_iter()
        .chain(strs(&c["args"]))
        .collect();
    for arg in args.iter().filter(|a| a.starts_with('/')) {
        for m in c["volumeMounts"].as_array().into_iter().flatten() {
            let Some(rel) = arg.strip_prefix(&format!("{}/", s(&m["mountPath"]))) else {
                continue;
            };
            let vol = named(&spec["volumes"], s(&m["name"]));
            let Some(cm) = vol["configMap"]["name"].as_str() else {
                return Err(format!(
                    "{arg}: volume {} is not a ConfigMap: {vol}",
                    m["name"]
                ));
            };
            let data = objects(all, "ConfigMap")
                .into_iter()
                .find(|o| o["metadata"]["name"] == cm)
                .map(|o| &o["data"])
                .ok_or_else(|| format!("{arg}: ConfigMap {cm} not rendered"))?;
            let text = data[rel]
                .as_str()
                .ok_or_else(|| format!("{arg}: ConfigMap {cm} has no key {rel}"))?;
            out.push((arg.to_string(), text.to_string()));
        }
    }
    Ok(out)
}

/// The top-level modules `script` imports, by python3's own parser (which fails on bad syntax).
fn python_imports(script: &str) -> Result<BTreeSet<String>, String> {
    let prog = "import ast, sys\n\
                t = ast.parse(sys.stdin.read())\n\
                for n in ast.walk(t):\n\
                \x20   if isinstance(n, ast.Import):\n\
                \x20       [print(a.name.split('.')[0]) for a in n.names]\n\
                \x20   elif isinstance(n, ast.ImportFrom):\n\
                \x20       print(n.module.split('.')[0])\n";
    let mut child = Command::new("python3")
        .args(["-c", prog])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("python3: {e}"))?;
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), script.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(String::from)
        .collect())
}

#[test]
fn the_python_check_reads_imports_and_refuses_bad_syntax() {
    assert_eq!(
        python_imports("import os, torch.nn\nfrom time import sleep\n").unwrap(),
        BTreeSet::from(["os".into(), "time".into(), "torch".into()])
    );
    assert!(python_imports("def f(:\n")
        .unwrap_err()
        .contains("SyntaxError"));
}

#[test]
fn a_command_naming_an_empty_volume_is_refused() {
    // The examples once ran /workspace/train.py from an emptyDir.
    let pod = serde_json::json!({"spec": {
        "containers": [{"name": "t", "command": ["python", "/workspace/train.py"],
                        "volumeMounts": [{"name": "w", "mountPath": "/workspace"}]}],
        "volumes": [{"name": "w", "emptyDir": {}}]}});
    let c = &pod["spec"]["containers"][0];
    assert!(command_files(&pod, c, &[])
        .unwrap_err()
        .contains("is not a ConfigMap"));
}

#[test]
fn every_example_command_file_exists_and_is_valid() {
    let Some(kubectl) = kubectl_or_skip("examples run") else {
        return;
    };
    let mut scripts = 0;
    for dir in EXAMPLES {
        let objs = render_strict(&kubectl, dir);
        for pod in objects(&objs, "Pod") {
            for c in pod["spec"]["containers"].as_array().unwrap() {
                let at = format!("{dir}: {}/{}", s(&pod["metadata"]["name"]), s(&c["name"]));
                let files = command_files(pod, c, &objs).unwrap_or_else(|e| panic!("{at}: {e}"));
                for (path, text) in files {
                    if path.ends_with(".py") {
                        scripts += 1;
                        let imports = python_imports(&text).unwrap_or_else(|e| panic!("{at}: {e}"));
                        for m in &imports {
                            assert!(IMPORTS_OK.contains(&m.as_str()), "{at}: imports {m}");
                        }
                        assert!(
                            s(&c["image"]).starts_with("pytorch/pytorch:")
                                || !imports.contains("torch"),
                            "{at}: torch without a PyTorch image"
                        );
                    }
                }
            }
        }
    }
    // One trainer per example set.
    assert_eq!(scripts, 3);
}
