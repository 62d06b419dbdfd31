#!/bin/sh
# gpuslice node uninstaller: the `uninstall` overlay's DaemonSet runs it from the
# gpuslice-uninstall ConfigMap (docs/kubernetes.md, "Uninstall"); it can also be run on a node
# by hand. It removes what install.sh and the gpuslice DaemonSets put on the node, and nothing
# else (NVIDIA's drop-in, CDI specs and runtimes are left as they are):
#
#  1. `gpuslice configure containerd --remove`: the drop-in conf.d/gpuslice.toml and its
#     `imports` entry (the main file is left as it was before install), and the backups
#     `gpuslice configure` wrote beside both (*.gpuslice-backup-*);
#  2. k3s / RKE2: the containerd template, when install.sh wrote it (its first line says so);
#  3. the shim link in $GPUSLICE_SHIM_LINK_DIR, when it points into $GPUSLICE_HOST_PREFIX;
#  4. the binaries and the interposer under $GPUSLICE_HOST_PREFIX, and the node configuration
#     $GPUSLICE_CONFIG_TARGET (directories removed when left empty);
#  5. CDI specs gpuslice wrote ($GPUSLICE_CDI_DIR/gpuslice.yaml, gpuslice.io-claim_*.yaml), the
#     state directory ($GPUSLICE_STATE_DIR: slices, the arbiter's socket), the kubelet
#     plugin's directory and sockets ($GPUSLICE_KUBELET_DIR: plugins/gpuslice.io,
#     plugins_registry/gpuslice.io*, device-plugins/gpuslice*);
#  6. restarts containerd when its configuration changed (as install.sh: $GPUSLICE_RESTART).
# Host paths are named as on the node; every one but containerd's config directory (which,
# as for install.sh, must be mounted at its own path: `imports` names host paths) is reached
# below $GPUSLICE_HOST_ROOT (the DaemonSet mounts the node's / there; empty on the node itself),
# so that directories are removed rather than mount points.
# Run it after the gpuslice DaemonSet is gone (no arbiter running): Pods of class gpuslice
# still running keep their mounts, but no new one can start.
set -eu

PREFIX=${GPUSLICE_HOST_PREFIX:-/opt/gpuslice}
IMAGE_ROOT=${GPUSLICE_IMAGE_ROOT:-}
CONF=${GPUSLICE_CONTAINERD_CONFIG:-/etc/containerd/config.toml}
RESTART=${GPUSLICE_RESTART:-systemd}
UNIT=${GPUSLICE_CONTAINERD_UNIT:-containerd}
SHIM_LINK_DIR=${GPUSLICE_SHIM_LINK_DIR:-}
CONFIG_DST=${GPUSLICE_CONFIG_TARGET:-/etc/gpuslice/config.toml}
TEMPLATE=${GPUSLICE_CONTAINERD_TEMPLATE:-}
CDI_DIR=${GPUSLICE_CDI_DIR:-/var/run/cdi}
STATE_DIR=${GPUSLICE_STATE_DIR:-/run/gpuslice}
KUBELET_DIR=${GPUSLICE_KUBELET_DIR:-/var/lib/kubelet}
R=${GPUSLICE_HOST_ROOT:-}
DROP_IN="$(dirname "$CONF")/conf.d/gpuslice.toml"
BINARIES="gpuslice gpuslice-arbiter gpuslice-hook gpuslice-runtime containerd-shim-gpuslice-v2"

log() { echo "gpuslice-uninstall: $*" >&2; }
die() { log "error: $*"; exit 1; }
gone() { log "removed $1"; }

case "$RESTART" in systemd|none) ;; *) die "GPUSLICE_RESTART=$RESTART (systemd or none)" ;; esac
CLI="$IMAGE_ROOT/usr/bin/gpuslice"
[ -x "$CLI" ] || CLI="$R$PREFIX/bin/gpuslice"
[ -x "$CLI" ] || die "no gpuslice binary ($IMAGE_ROOT/usr/bin/gpuslice or $R$PREFIX/bin/gpuslice) to edit $CONF with"

# 1. containerd
snapshot() { cat "$CONF" "$DROP_IN" 2>/dev/null | cksum; }
before=$(snapshot)
if [ -f "$CONF" ] || [ -f "$DROP_IN" ]; then
    "$CLI" configure containerd --remove --file "$CONF" >&2
fi
after=$(snapshot)
for b in "$CONF".gpuslice-backup-* "$DROP_IN".gpuslice-backup-*; do
    if [ -f "$b" ]; then rm -f "$b"; gone "$b"; fi
done
rmdir "$(dirname "$DROP_IN")" 2>/dev/null && gone "$(dirname "$DROP_IN")" || true

# 2. k3s / RKE2 template written by install.sh
if [ -n "$TEMPLATE" ] && [ -f "$R$TEMPLATE" ]; then
    if head -n 1 "$R$TEMPLATE" | grep -q '^# Written by gpuslice-install'; then
        rm -f "$R$TEMPLATE"; gone "$TEMPLATE"
    else
        log "$TEMPLATE was not written by gpuslice-install: left as it is (remove its gpuslice import by hand)"
    fi
fi

# 3. shim link (install.sh points it at $PREFIX, a host path)
LINK="$R$SHIM_LINK_DIR/containerd-shim-gpuslice-v2"
if [ -n "$SHIM_LINK_DIR" ] && [ -L "$LINK" ]; then
    case "$(readlink "$LINK")" in
        "$PREFIX"/*) rm -f "$LINK"; gone "$SHIM_LINK_DIR/containerd-shim-gpuslice-v2" ;;
        *) log "$SHIM_LINK_DIR/containerd-shim-gpuslice-v2 points elsewhere: left as it is" ;;
    esac
fi

# 4. binaries, interposer, node configuration
for f in $BINARIES; do
    f="$PREFIX/bin/$f"
    if [ -e "$R$f" ]; then rm -f "$R$f"; gone "$f"; fi
done
f="$PREFIX/lib/gpuslice/libgpuslice.so"
if [ -e "$R$f" ]; then rm -f "$R$f"; gone "$f"; fi
for d in "$PREFIX/lib/gpuslice" "$PREFIX/lib" "$PREFIX/bin" "$PREFIX"; do
    rmdir "$R$d" 2>/dev/null && gone "$d" || true
done
if [ -e "$R$CONFIG_DST" ]; then rm -f "$R$CONFIG_DST"; gone "$CONFIG_DST"; fi
d=$(dirname "$CONFIG_DST")
rmdir "$R$d" 2>/dev/null && gone "$d" || true

# 5. CDI specs, state, kubelet plugin files
for f in "$R$CDI_DIR"/gpuslice.yaml "$R$CDI_DIR"/gpuslice.io-claim_*.yaml \
    "$R$KUBELET_DIR"/plugins_registry/gpuslice.io* "$R$KUBELET_DIR"/device-plugins/gpuslice*; do
    if [ -e "$f" ] || [ -L "$f" ]; then rm -f "$f"; gone "${f#"$R"}"; fi
done
for d in "$STATE_DIR" "$KUBELET_DIR/plugins/gpuslice.io"; do
    if [ -d "$R$d" ]; then rm -rf "$R$d"; gone "$d"; fi
done

# 6. restart when changed
if [ "$before" = "$after" ]; then
    log "containerd configuration unchanged: no restart"
elif [ "$RESTART" = systemd ]; then
    log "containerd configuration changed: systemctl restart $UNIT (host mount namespace)"
    nsenter --target 1 --mount -- systemctl restart "$UNIT"
else
    log "containerd configuration changed; GPUSLICE_RESTART=none: restart $UNIT on the node yourself"
fi
log "done"
