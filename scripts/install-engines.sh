#!/usr/bin/env bash
# Provision the container engines the end-to-end suites (tests/e2e) run against.
#
# Run as root on a Debian 12 machine. Idempotent and cached: a second run only checks.
#   1. The distribution's engines: runc, containerd (1.6), docker.io (20.10), podman, plus
#      busybox-static (the test image's /bin/sh). Installed with apt-get, with a policy-rc.d that
#      forbids starting services, so no daemon is left running afterwards.
#   2. Newer engines from newer Debian suites, unpacked (dpkg -x) into private prefixes under
#      $GPUSLICE_E2E_PREFIX (default /opt/gpuslice-e2e):
#        containerd-<v>   from trixie (1.7) and sid (2.x)
#        docker.io-<v>    from trixie (26)
#      The suites are reached through a private apt configuration that reuses the host and path of
#      this machine's own apt sources with another suite name; no host name is written here.
#
# Environment: GPUSLICE_E2E_PREFIX (install root), GPUSLICE_E2E_SKIP_NEWER=1 (distribution only),
# GPUSLICE_E2E_ONLY="kubectl" (only the named private-prefix packages of step 2, no distribution
# packages: the deploy suite needs sid's kubectl, unpacked into $PREFIX/kubectl-<version>).
set -euo pipefail

PREFIX=${GPUSLICE_E2E_PREFIX:-/opt/gpuslice-e2e}
export DEBIAN_FRONTEND=noninteractive

log() { printf 'install-engines: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root"
command -v apt-get >/dev/null || die "apt-get not found (Debian 12 expected)"

start=$(date +%s)

# ---------------------------------------------------------------- distribution packages
DIST_PKGS=(runc containerd docker.io podman busybox-static)
ONLY=${GPUSLICE_E2E_ONLY:-}
[ -z "$ONLY" ] || DIST_PKGS=()

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

# PIDs of engine daemons, to stop only those that the installation itself started.
daemon_pids() {
    local p
    for p in /proc/[0-9]*; do
        case "$(cat "$p/comm" 2>/dev/null)" in
            containerd|dockerd|docker-proxy|podman) echo "${p#/proc/}" ;;
        esac
    done | sort
}

missing=()
for p in "${DIST_PKGS[@]}"; do installed "$p" || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
    log "installing distribution packages: ${missing[*]}"
    before=$(daemon_pids)
    policy=/usr/sbin/policy-rc.d
    own_policy=0
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\n# installed by gpuslice scripts/install-engines.sh for the duration of apt-get\nexit 101\n' >"$policy"
        chmod 755 "$policy"
        own_policy=1
    fi
    cleanup_policy() { if [ "$own_policy" = 1 ]; then rm -f "$policy"; fi; }
    trap cleanup_policy EXIT
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    cleanup_policy
    trap - EXIT
    # Stop any daemon that appeared during the installation (we started it, indirectly).
    after=$(daemon_pids)
    for pid in $(comm -13 <(echo "$before") <(echo "$after")); do
        log "stopping daemon pid $pid ($(cat /proc/$pid/comm 2>/dev/null)) started by the installation"
        kill "$pid" 2>/dev/null || true
    done
else
    log "distribution packages present: ${DIST_PKGS[*]}"
fi

# ---------------------------------------------------------------- newer engines
if [ "${GPUSLICE_E2E_SKIP_NEWER:-0}" = 1 ]; then
    log "GPUSLICE_E2E_SKIP_NEWER=1: not installing newer engines"
    exit 0
fi

# want: "<package> <suite> <min-version-prefix> <directory-name>"
WANT=(
    "containerd trixie 1.7 containerd"
    "docker.io trixie 26 docker.io"
    "containerd sid 2. containerd"
    "kubectl sid 1. kubectl"
)
if [ -n "$ONLY" ]; then
    keep=()
    for w in "${WANT[@]}"; do
        read -r _ _ _ name <<<"$w"
        case " $ONLY " in *" $name "*) keep+=("$w") ;; esac
    done
    [ ${#keep[@]} -gt 0 ] || die "GPUSLICE_E2E_ONLY=$ONLY names none of the private-prefix packages"
    WANT=("${keep[@]}")
fi

# An engine is cached when a directory $PREFIX/<name>-<version prefix>* carries a .complete marker.
cached() {
    local name=$1 vprefix=$2 d
    for d in "$PREFIX/$name-$vprefix"*; do
        [ -e "$d/.complete" ] && return 0
    done
    return 1
}

need=0
for w in "${WANT[@]}"; do
    read -r pkg suite vprefix name <<<"$w"
    cached "$name" "$vprefix" || need=1
done

if [ "$need" = 0 ]; then
    log "newer engines cached under $PREFIX"
else
    APT="$PREFIX/apt"
    mkdir -p "$APT/state/lists/partial" "$APT/cache/archives/partial" "$APT/debs" "$APT/parts"

    # The main archive source of this machine: its URI and keyring, taken from the apt
    # configuration (deb822 .sources first, then one-line sources.list).
    uri="" keyring=""
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -e "$f" ] || continue
        # paragraphs: pick the first whose Suites contain the release codename without a suffix
        read -r uri keyring < <(awk '
            BEGIN { RS=""; FS="\n" }
            {
                u=""; s=""; k=""; t=""
                for (i=1; i<=NF; i++) {
                    if ($i ~ /^URIs:/)      { u=$i; sub(/^URIs:[ \t]*/, "", u); sub(/[ \t].*/, "", u) }
                    if ($i ~ /^Suites:/)    { s=$i }
                    if ($i ~ /^Signed-By:/) { k=$i; sub(/^Signed-By:[ \t]*/, "", k) }
                    if ($i ~ /^Types:/)     { t=$i }
                }
                if (t ~ /deb( |$)/ && s ~ /[ \t](bookworm|stable)([ \t]|$)/ && u != "") { print u, k; exit }
            }' "$f") || true
        [ -n "$uri" ] && break
    done
    if [ -z "$uri" ] && [ -e /etc/apt/sources.list ]; then
        read -r uri < <(awk '$1=="deb" && $0 !~ /security/ {
                for (i=2; i<=NF; i++) if ($i !~ /^\[/ && $i !~ /\]$/) { print $i; exit } }' /etc/apt/sources.list) || true
    fi
    [ -n "$uri" ] || die "no Debian archive source found in /etc/apt"
    [ -n "$keyring" ] || keyring=/usr/share/keyrings/debian-archive-keyring.gpg
    [ -e "$keyring" ] || die "keyring $keyring not found"
    log "newer suites from this machine's archive source (keyring $keyring)"

    {
        echo "deb [signed-by=$keyring] $uri trixie main"
        echo "deb [signed-by=$keyring] $uri sid main"
    } >"$APT/sources.list"
    : >"$APT/status"
    apt_opts=(
        -o "Dir::State=$APT/state"
        -o "Dir::State::status=$APT/status"
        -o "Dir::Cache=$APT/cache"
        -o "Dir::Etc::SourceList=$APT/sources.list"
        -o "Dir::Etc::SourceParts=$APT/parts"
        -o "APT::Get::List-Cleanup=0"
        -o "Debug::NoLocking=1"
        -o "APT::Sandbox::User=root"
        -o "Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false"
        -o "Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false"
    )
    apt-get "${apt_opts[@]}" update -qq

    for w in "${WANT[@]}"; do
        read -r pkg suite vprefix name <<<"$w"
        cached "$name" "$vprefix" && continue
        ver=$(apt-cache "${apt_opts[@]}" show "$pkg/$suite" 2>/dev/null | awk '/^Version:/ && v == "" { v = $2 } END { print v }')
        [ -n "$ver" ] || die "$pkg not found in $suite"
        upstream=${ver#*:}; upstream=${upstream%%[~+-]*}
        case "$upstream" in "$vprefix"*) ;; *) die "$pkg/$suite is $ver, expected $vprefix*" ;; esac
        dir="$PREFIX/$name-$upstream"
        log "fetching $pkg $ver ($suite) into $dir"
        (cd "$APT/debs" && apt-get "${apt_opts[@]}" download -qq "$pkg=$ver" >/dev/null)
        deb=$(find "$APT/debs" -name "${pkg}_*.deb" | grep -F "_${ver#*:}_" | head -n1 || true)
        [ -n "$deb" ] || die "downloaded $pkg $ver not found in $APT/debs"
        rm -rf "$dir.partial"
        mkdir -p "$dir.partial"
        dpkg -x "$deb" "$dir.partial"
        # docker.io splits the client into docker-cli in newer suites: fetch it too when present.
        if [ "$pkg" = docker.io ] && [ ! -e "$dir.partial/usr/bin/docker" ]; then
            if cver=$(apt-cache "${apt_opts[@]}" show "docker-cli/$suite" 2>/dev/null | awk '/^Version:/ && v == "" { v = $2 } END { print v }') && [ -n "$cver" ]; then
                (cd "$APT/debs" && apt-get "${apt_opts[@]}" download -qq "docker-cli=$cver" >/dev/null)
                dpkg -x "$(find "$APT/debs" -name 'docker-cli_*.deb' | grep -F "_${cver#*:}_" | head -n1)" "$dir.partial"
            fi
        fi
        echo "$pkg $ver $suite" >"$dir.partial/.complete"
        rm -rf "$dir"
        mv "$dir.partial" "$dir"
    done
fi

# ---------------------------------------------------------------- summary
log "engines:"
log "  runc       $(runc --version 2>/dev/null | head -n1)"
log "  containerd $(containerd --version 2>/dev/null | awk '{print $3}') (distribution)"
log "  dockerd    $(/usr/sbin/dockerd --version 2>/dev/null)"
log "  podman     $(podman --version 2>/dev/null)"
for d in "$PREFIX"/*/.complete; do
    [ -e "$d" ] && log "  $(basename "$(dirname "$d")"): $(cat "$d")"
done
log "done in $(( $(date +%s) - start ))s"
