#!/bin/sh
# gpuslice node installer: the DaemonSet's first init container ("install") runs it from the
# gpuslice-install ConfigMap. Idempotent; every run after the first only checks.
#
#  1. copies the image's binaries and interposer to the node under $GPUSLICE_HOST_PREFIX
#     (hostPath, default /opt/gpuslice: bin/ and lib/gpuslice/libgpuslice.so, so every binary
#     finds the interposer at ../lib/gpuslice/libgpuslice.so beside itself);
#  2. copies the node configuration (ConfigMap) to the node's /etc/gpuslice/config.toml;
#  3. optionally links containerd-shim-gpuslice-v2 into a directory on containerd's PATH
#     ($GPUSLICE_SHIM_LINK_DIR, the containerd-shim overlay);
#  4. runs `gpuslice configure containerd` on the node's containerd config (hostPath
#     /etc/containerd at the same path), with --runtime-path naming the installed runtime and,
#     when $GPUSLICE_CONTAINERD_MAJOR is set (1 or 2), --containerd-major (which decides whether
#     the drop-in carries the whole CRI table, as containerd 1.x needs, or only the class; unset,
#     a version 2 file gets 1.x's form, which 2.x loads too; docs/configure.md);
#  5. k3s / RKE2 ($GPUSLICE_CONTAINERD_TEMPLATE, e.g. /var/lib/rancher/k3s/agent/etc/containerd/
#     config.toml.tmpl): they regenerate config.toml from a template at every start, which would
#     drop step 4's `imports` line; a template that is k3s's own base plus that line is written
#     (an existing template that lacks it is refused, never rewritten);
#  6. restarts containerd only when its configuration changed ($GPUSLICE_RESTART=systemd:
#     `systemctl restart` in the host's mount namespace through nsenter; none: print the step).
# Running containers are not disturbed by a containerd restart (their shims keep running).
set -eu

PREFIX=${GPUSLICE_HOST_PREFIX:-/opt/gpuslice}
IMAGE_ROOT=${GPUSLICE_IMAGE_ROOT:-}
STYLE=${GPUSLICE_CONTAINERD_STYLE:-binary-name}
CONF=${GPUSLICE_CONTAINERD_CONFIG:-/etc/containerd/config.toml}
EXTRA=${GPUSLICE_CONFIGURE_ARGS:-}
RESTART=${GPUSLICE_RESTART:-systemd}
UNIT=${GPUSLICE_CONTAINERD_UNIT:-containerd}
SHIM_LINK_DIR=${GPUSLICE_SHIM_LINK_DIR:-}
CONFIG_SRC=${GPUSLICE_CONFIG_SOURCE:-/etc/gpuslice-config/config.toml}
CONFIG_DST=${GPUSLICE_CONFIG_TARGET:-/etc/gpuslice/config.toml}
TEMPLATE=${GPUSLICE_CONTAINERD_TEMPLATE:-}
MAJOR=${GPUSLICE_CONTAINERD_MAJOR:-}
# The drop-in `gpuslice configure containerd` writes and lists in `imports` (its default).
DROP_IN="$(dirname "$CONF")/conf.d/gpuslice.toml"

log() { echo "gpuslice-install: $*" >&2; }
die() { log "error: $*"; exit 1; }

# put SRC DST MODE: replace DST atomically (a binary containerd is running is never written in
# place; the old inode stays valid for whoever has it open).
put() {
    [ -f "$1" ] || die "$1 missing from the image"
    if [ -f "$2" ] && cmp -s "$1" "$2"; then return 0; fi
    cp "$1" "$2.gpuslice-new"
    chmod "$3" "$2.gpuslice-new"
    mv -f "$2.gpuslice-new" "$2"
    log "installed $2"
}

case "$STYLE" in binary-name|shim) ;; *) die "GPUSLICE_CONTAINERD_STYLE=$STYLE (binary-name or shim)" ;; esac
case "$RESTART" in systemd|none) ;; *) die "GPUSLICE_RESTART=$RESTART (systemd or none)" ;; esac
case "$MAJOR" in ''|1|2) ;; *) die "GPUSLICE_CONTAINERD_MAJOR=$MAJOR (1, 2 or unset)" ;; esac
if [ -n "$SHIM_LINK_DIR" ] && [ ! -d "$SHIM_LINK_DIR" ]; then
    die "GPUSLICE_SHIM_LINK_DIR=$SHIM_LINK_DIR is not a directory"
fi
if [ -n "$TEMPLATE" ]; then
    [ -d "$(dirname "$TEMPLATE")" ] || die "GPUSLICE_CONTAINERD_TEMPLATE=$TEMPLATE: its directory does not exist"
    if [ -f "$TEMPLATE" ] && ! grep -qF "\"$DROP_IN\"" "$TEMPLATE"; then
        die "$TEMPLATE exists and does not import $DROP_IN: add the line imports = [\"$DROP_IN\"] before its first table (gpuslice does not rewrite a template it did not write)"
    fi
fi
BINARIES="gpuslice gpuslice-arbiter gpuslice-hook gpuslice-runtime containerd-shim-gpuslice-v2"
# Everything is checked before anything is written.
for f in $BINARIES; do
    [ -f "$IMAGE_ROOT/usr/bin/$f" ] || die "$IMAGE_ROOT/usr/bin/$f missing from the image"
done
for f in "$IMAGE_ROOT/usr/lib/gpuslice/libgpuslice.so" "$CONFIG_SRC"; do
    [ -f "$f" ] || die "$f missing from the image"
done

# 1. binaries and interposer
mkdir -p "$PREFIX/bin" "$PREFIX/lib/gpuslice"
for b in $BINARIES; do
    put "$IMAGE_ROOT/usr/bin/$b" "$PREFIX/bin/$b" 0755
done
put "$IMAGE_ROOT/usr/lib/gpuslice/libgpuslice.so" "$PREFIX/lib/gpuslice/libgpuslice.so" 0644

# 2. node configuration
mkdir -p "$(dirname "$CONFIG_DST")"
put "$CONFIG_SRC" "$CONFIG_DST" 0644

# 3. the shim on containerd's PATH (shim style)
if [ -n "$SHIM_LINK_DIR" ]; then
    ln -sfn "$PREFIX/bin/containerd-shim-gpuslice-v2" "$SHIM_LINK_DIR/containerd-shim-gpuslice-v2"
    log "linked $SHIM_LINK_DIR/containerd-shim-gpuslice-v2 -> $PREFIX/bin/containerd-shim-gpuslice-v2"
fi

# 4. containerd
snapshot() { cat "$CONF" "$DROP_IN" 2>/dev/null | cksum; }
before=$(snapshot)
# shellcheck disable=SC2086 # EXTRA is a list of options
"$PREFIX/bin/gpuslice" configure containerd --file "$CONF" --style "$STYLE" \
    --runtime-path "$PREFIX/bin/gpuslice-runtime" ${MAJOR:+--containerd-major "$MAJOR"} $EXTRA
after=$(snapshot)

# 5. k3s / RKE2: keep the import across their regeneration of config.toml. The base template
# starts with `version = …`: a top-level key before it stays top-level.
if [ -n "$TEMPLATE" ] && [ ! -f "$TEMPLATE" ]; then
    {
        echo "# Written by gpuslice-install: $(basename "$CONF") is generated from this template at"
        echo "# every start; it is the built-in base plus the import of gpuslice's drop-in."
        echo "imports = [\"$DROP_IN\"]"
        echo '{{ template "base" . }}'
    } > "$TEMPLATE.gpuslice-new"
    mv -f "$TEMPLATE.gpuslice-new" "$TEMPLATE"
    log "wrote $TEMPLATE"
fi

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
