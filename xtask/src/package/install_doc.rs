//! `docs/install.md` promises that every command in it is exercised by a test. This module (test
//! only) holds the one mapping from each command line of the page's ```` ```sh ```` blocks to the
//! test that runs it, and checks, both ways, that the page and the mapping agree:
//! - every command line on the page is in [`TESTED`] (a new, untested command fails),
//! - every entry of [`TESTED`] is on the page (no stale entries),
//! - each entry's test file exists and contains its evidence string (the test really runs that
//!   command), and every `packaging/…` path a command names exists.

use crate::shell::root;
use std::fs;

/// One command of `docs/install.md` and the test that exercises it.
struct Tested {
    /// The command line exactly as the page has it (a trailing `# comment` removed).
    command: &'static str,
    /// The test file (workspace-relative) that runs it.
    test: &'static str,
    /// A string in that file that shows it runs this command.
    evidence: &'static str,
}

const TESTED: &[Tested] = &[
    Tested {
        command: "cargo xtask package",
        test: "xtask/src/suites.rs",
        evidence: "crate::package::build(&dist",
    },
    Tested {
        command: "apt-get install ./gpuslice_*.deb",
        test: "tests/e2e/tests/package_install.rs",
        evidence: "&[\"apt-get\", \"install\", \"-y\", &format!(\"/tmp/{deb_name}\")]",
    },
    Tested {
        // No systemd in the clean root: the unit's ExecStart line is run, and enabling is
        // checked through deb-systemd-helper's symlink (docs/install.md says so).
        command: "systemctl enable --now gpuslice-arbiter",
        test: "tests/e2e/tests/package_install.rs",
        evidence: "package::unit_exec_start(&unit)",
    },
    Tested {
        command: "gpuslice status",
        test: "tests/e2e/tests/package_install.rs",
        evidence: "&[\"/usr/bin/gpuslice\", \"status\"]",
    },
    Tested {
        command: "gpuslice doctor",
        test: "cli/tests/doctor.rs",
        evidence: "c.arg(\"doctor\")",
    },
    Tested {
        command: "gpuslice configure docker --dry-run",
        test: "cli/tests/configure.rs",
        evidence: "\"--dry-run\"",
    },
    Tested {
        command: "gpuslice configure docker",
        test: "cli/tests/configure.rs",
        evidence: "\"docker\"",
    },
    Tested {
        command: "docker run --rm --runtime gpuslice -e GPUSLICE_MEMORY=1Gi my-cuda-image nvidia-smi",
        test: "tests/e2e/tests/docker.rs",
        evidence: "vec![\"--runtime\", \"gpuslice\", \"-e\", \"GPUSLICE_MEMORY=1Gi\"]",
    },
    Tested {
        command: "docker run --rm --runtime gpuslice --annotation gpuslice.io/memory=1Gi my-cuda-image nvidia-smi",
        test: "tests/e2e/tests/docker.rs",
        evidence: "\"--annotation\",\n                \"gpuslice.io/memory=1Gi\"",
    },
    Tested {
        command: "gpuslice configure containerd --dry-run",
        test: "cli/tests/configure.rs",
        evidence: "\"--dry-run\"",
    },
    Tested {
        command: "gpuslice configure containerd",
        test: "tests/e2e/tests/configured_containerd.rs",
        evidence: "c.args([\"configure\", \"containerd\", \"--file\"])",
    },
    Tested {
        command: "containerd config dump",
        test: "tests/e2e/tests/configured_containerd.rs",
        evidence: ".args([\"config\", \"dump\"])",
    },
    Tested {
        command: "ctr run --rm --runtime io.containerd.runc.v2 --runc-binary /usr/bin/gpuslice-runtime --annotation gpuslice.io/memory=1Gi docker.io/library/my-cuda-image:latest demo nvidia-smi",
        test: "tests/e2e/src/containerd.rs",
        evidence: ".args([\"--runtime\", \"io.containerd.runc.v2\", \"--runc-binary\"])",
    },
    Tested {
        command: "ctr run --rm --runtime io.containerd.gpuslice.v2 --annotation gpuslice.io/memory=1Gi docker.io/library/my-cuda-image:latest demo nvidia-smi",
        test: "tests/e2e/tests/shimv2.rs",
        evidence: "ctr run --runtime {RUNTIME}",
    },
    Tested {
        command: "gpuslice cdi generate",
        test: "tests/e2e/tests/podman_cdi.rs",
        evidence: ".args([\"cdi\", \"generate\", \"--output\"])",
    },
    Tested {
        command: "podman run --rm --device gpuslice.io/gpu=0 -e GPUSLICE_MEMORY=1Gi my-cuda-image nvidia-smi",
        test: "tests/e2e/tests/podman_cdi.rs",
        evidence: "\"--device\".into(),",
    },
    Tested {
        // Rendered offline, not applied (no cluster here): docs/install.md says so.
        // The site overlay of docs/kubernetes.md ("The node image"), over every mode.
        command: "kubectl kustomize my-gpuslice",
        test: "tests/deploy/tests/image.rs",
        evidence: "fn the_documented_site_overlay_sets_every_container_of_every_mode()",
    },
    Tested {
        command: "kubectl apply -k my-gpuslice",
        test: "tests/deploy/tests/image.rs",
        evidence: "fn the_documented_site_overlay_sets_every_container_of_every_mode()",
    },
    Tested {
        command: "kubectl apply -k packaging/kubernetes/examples/dra",
        test: "tests/deploy/tests/dra.rs",
        evidence: "render_strict(&kubectl, \"examples/dra\")",
    },
    Tested {
        command: "kubectl apply -k packaging/kubernetes/examples/device-plugin",
        test: "tests/deploy/tests/device_plugin.rs",
        evidence: "render_strict(&kubectl, \"examples/device-plugin\")",
    },
    Tested {
        command: "kubectl apply -k packaging/kubernetes/examples",
        test: "tests/deploy/src/lib.rs",
        evidence: ".arg(\"kustomize\")",
    },
    Tested {
        command: "apt-get remove gpuslice",
        test: "tests/e2e/tests/package_install.rs",
        evidence: "&[\"apt-get\", \"remove\", \"-y\", \"gpuslice\"]",
    },
    Tested {
        command: "apt-get purge gpuslice",
        test: "tests/e2e/tests/package_install.rs",
        evidence: "&[\"apt-get\", \"purge\", \"-y\", \"gpuslice\"]",
    },
];

/// The command lines of every ```` ```sh ```` block (blank lines and whole-line comments
/// skipped, trailing `# comments` removed, continuation lines joined).
pub fn sh_commands(markdown: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_sh = false;
    let mut pending = String::new();
    for line in markdown.lines() {
        let t = line.trim();
        if t.starts_with("```") {
            in_sh = !in_sh && (t == "```sh" || t == "```bash" || t == "```shell");
            continue;
        }
        if !in_sh {
            continue;
        }
        let code = match t.find(" #") {
            Some(i) => t[..i].trim_end(),
            None if t.starts_with('#') => "",
            None => t,
        };
        if let Some(c) = code.strip_suffix('\\') {
            pending.push_str(c.trim_end());
            pending.push(' ');
            continue;
        }
        pending.push_str(code);
        let cmd = pending.trim().to_string();
        pending.clear();
        if !cmd.is_empty() {
            out.push(cmd);
        }
    }
    out
}

#[test]
fn sh_blocks_are_read_with_comments_and_continuations() {
    let md = "text\n```sh\n# a comment\nfoo --x  # why\n\nbar \\\n  --y\n```\n```yaml\nnot: a command\n```\n```\nplain block\n```\n";
    assert_eq!(sh_commands(md), ["foo --x", "bar --y"]);
}

/// Everything wrong between `page` (the text of docs/install.md) and [`TESTED`].
fn problems(page: &str) -> Vec<String> {
    let mut out = Vec::new();
    let commands = sh_commands(page);
    for c in &commands {
        if !TESTED.iter().any(|t| t.command == c.as_str()) {
            out.push(format!(
                "untested command on the page (add a test and an entry in \
                 xtask/src/package/install_doc.rs): {c}"
            ));
        }
    }
    for t in TESTED {
        if !commands.iter().any(|c| c == t.command) {
            out.push(format!("entry no longer on the page: {}", t.command));
        }
        match fs::read_to_string(root().join(t.test)) {
            Ok(text) if text.contains(t.evidence) => {}
            Ok(_) => out.push(format!(
                "{}: {} no longer contains {:?}",
                t.command, t.test, t.evidence
            )),
            Err(e) => out.push(format!("{}: test file {}: {e}", t.command, t.test)),
        }
        for word in t.command.split_whitespace() {
            if word.starts_with("packaging/") && !root().join(word).exists() {
                out.push(format!("{}: {word} does not exist", t.command));
            }
        }
    }
    out
}

#[test]
fn every_install_md_command_is_exercised_by_a_test() {
    let page = fs::read_to_string(root().join("docs/install.md")).unwrap();
    assert!(sh_commands(&page).len() >= 15, "too few commands found");
    let p = problems(&page);
    assert!(
        p.is_empty(),
        "docs/install.md vs its tests:\n{}",
        p.join("\n")
    );
}

#[test]
fn a_new_untested_command_or_a_dropped_one_is_caught() {
    let page = fs::read_to_string(root().join("docs/install.md")).unwrap();
    let added = page.replacen("```sh\n", "```sh\ngpuslice frobnicate --all\n", 1);
    let p = problems(&added);
    assert!(
        p.len() == 1 && p[0].contains("untested command") && p[0].contains("frobnicate"),
        "{p:?}"
    );
    let dropped = page.replace("apt-get purge gpuslice\n", "");
    let p = problems(&dropped);
    assert!(
        p.len() == 1 && p[0].contains("no longer on the page: apt-get purge gpuslice"),
        "{p:?}"
    );
}
