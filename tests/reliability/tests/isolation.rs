//! Trial 2: what a tenant can reach from inside its container (needs root, runc and
//! the dist tree: the `gpuslice-e2e` harness). A container started through `gpuslice-runtime`
//! with a 1 GiB slice, root inside but without `CAP_SYS_ADMIN` (runc's default capabilities),
//! while a neighbour slice exists on the same arbiter, runs a script that
//! * writes to its `limits` and `lease` files and to a new file in the slice directory: each is
//!   refused with "Read-only file system" (EROFS), and the files are unchanged on the host;
//! * remounts the slice read-write: refused (no `CAP_SYS_ADMIN`);
//! * finds `usage` writable (its own bookkeeping);
//! * searches the whole filesystem (except /proc and /sys) for `arbiter.sock`, the neighbour's
//!   slice id and the host state directory: nothing;
//! * lists its slice directory: its own files only.

use gpuslice_e2e::gate::{require, Need};
use gpuslice_e2e::paths;
use gpuslice_e2e::runc::{make_bundle, run_bundle, Spec};
use gpuslice_e2e::suite::Node;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

const NEIGHBOUR: &str = "neighbour-slice-7f3a";

fn script(state_dir: &str) -> String {
    format!(
        r#"
bb=/bin/busybox
for f in limits lease; do
  if ( echo hostile > /run/gpuslice/$f ) 2>/tmp/err; then echo "write_$f=accepted"; else echo "write_$f=refused $(cat /tmp/err)"; fi
  if $bb dd if=/dev/zero of=/run/gpuslice/$f bs=64 count=1 conv=notrunc 2>/tmp/err; then echo "dd_$f=accepted"; else echo "dd_$f=refused $(cat /tmp/err)"; fi
done
if ( echo x > /run/gpuslice/new-file ) 2>/tmp/err; then echo "create=accepted"; else echo "create=refused $(cat /tmp/err)"; fi
if $bb mount -o remount,rw,bind /run/gpuslice 2>/tmp/err; then echo "remount=accepted"; else echo "remount=refused $(cat /tmp/err)"; fi
if [ -w /run/gpuslice/usage ]; then echo "usage=writable"; else echo "usage=not-writable"; fi
echo "listing=$(ls -a /run/gpuslice | $bb tr '\n' ' ')"
found=$($bb find / \( -path /proc -o -path /sys \) -prune -o \( -name arbiter.sock -o -name {NEIGHBOUR} \) -print 2>/dev/null | $bb tr '\n' ' ')
echo "found=[$found]"
if ls {state_dir} >/dev/null 2>&1; then echo "state_dir=visible"; else echo "state_dir=absent"; fi
echo done
"#
    )
}

#[test]
fn tenant_cannot_write_its_limits_or_reach_the_arbiter() -> anyhow::Result<()> {
    if !require(
        "reliability/isolation",
        &[
            Need::Root,
            Need::Binary(paths::runc()),
            Need::Dist,
            Need::Product,
        ],
    ) {
        return Ok(());
    }
    let node = Node::new("iso")?;
    let arbiter = node.start_arbiter()?;
    // A neighbour slice on the same node.
    let mut s = UnixStream::connect(arbiter.state_dir.join("arbiter.sock"))?;
    writeln!(
        s,
        "{{\"version\":1,\"op\":\"admit\",\"slice_id\":\"{NEIGHBOUR}\",\"request\":{{\"memory\":\"1Gi\"}}}}"
    )?;
    let mut line = String::new();
    BufReader::new(&s).read_line(&mut line)?;
    assert!(line.contains("admitted"), "{line}");
    let neighbour_limits = std::fs::read(arbiter.state_dir.join(NEIGHBOUR).join("limits"))?;
    let state = arbiter.state_dir.display().to_string();
    let spec = Spec {
        args: vec!["/bin/sh".into(), "-c".into(), script(&state)],
        env: node.sim.container_env(),
        binds: node.sim.container_binds(),
        annotations: vec![("gpuslice.io/memory".into(), "1Gi".into())],
    };
    let bundle = make_bundle(&node.scratch.join("bundle"), &node.image.rootfs, &spec)?;
    let root = node.scratch.dir("runc-root")?;
    let out = run_bundle(
        &paths::product("gpuslice-runtime"),
        &root,
        &bundle,
        "rel-iso",
        &arbiter.client_env(),
        Duration::from_secs(120),
    )?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("{text}");
    assert!(
        out.status.success() && text.contains("done"),
        "container failed: {}\n{}\narbiter log:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        arbiter.log()
    );
    let get = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{k}=")))
            .unwrap_or_else(|| panic!("no {k}= in {text}"))
            .to_string()
    };
    for k in [
        "write_limits",
        "write_lease",
        "dd_limits",
        "dd_lease",
        "create",
    ] {
        let v = get(k);
        assert!(
            v.starts_with("refused") && v.contains("Read-only file system"),
            "{k}: {v}"
        );
    }
    let v = get("remount");
    assert!(v.starts_with("refused"), "remount: {v}");
    assert_eq!(get("usage"), "writable");
    assert_eq!(
        get("found"),
        "[]",
        "the tenant found the socket or a neighbour"
    );
    assert_eq!(get("state_dir"), "absent");
    let listing = get("listing");
    assert!(
        !listing.contains(NEIGHBOUR) && !listing.contains("arbiter.sock"),
        "{listing}"
    );
    // The neighbour's files are untouched.
    assert_eq!(
        std::fs::read(arbiter.state_dir.join(NEIGHBOUR).join("limits"))?,
        neighbour_limits
    );
    Ok(())
}
