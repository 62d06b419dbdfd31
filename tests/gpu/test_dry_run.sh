#!/bin/sh
# Runs the kit end to end on the simulated GPU and fails unless every row passed.
#   tests/gpu/test_dry_run.sh DIST_DIR   (a `cargo xtask gpu-kit --sim` tree, target/gpu-kit/tree,
#                                          or a `cargo xtask dist` tree, target/dist)
# With GPUSLICE_FORCE_SYSCALL_FALLBACKS=1 it also checks the arbiter ran on the kernel fallbacks.
set -eu
dist=${1:-$(dirname "$0")/../../target/dist}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
status=0
"$(dirname "$0")/run.sh" --dry-run --dist "$dist" --out "$out" --budget 240 || status=$?
test -s "$out/gpu-kit.md" || { echo "test_dry_run: no gpu-kit.md written" >&2; exit 1; }
python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
d = json.load(open(os.path.join(out, "gpu-kit.json")))
assert d["rows"], "no rows"
bad = [r for r in d["rows"] if r["status"] != "measured"]
assert not bad, f"rows not measured: {bad}"
files = os.listdir(out)
assert len(files) <= 8, f"{len(files)} files in OUT (at most 8 come back): {files}"
big = [f for f in files if os.path.getsize(os.path.join(out, f)) > 16 << 20]
assert not big, f"over 16 MiB: {big}"
PY
if [ "${GPUSLICE_FORCE_SYSCALL_FALLBACKS:-}" = 1 ]; then
  # The arbiter must have run on the fallbacks (docs/kernels.md), and said so.
  for call in futex_waitv pidfd_open; do
    grep -q "kernel fallback: $call" "$out/arbiter.log" || {
      echo "test_dry_run: arbiter did not use the $call fallback" >&2; exit 1; }
  done
fi
for s in "1 memory" "2 shares" "3 overhead" "4 latency"; do
  grep -q "| $s |" "$out/gpu-kit.md" || { echo "test_dry_run: section $s missing" >&2; exit 1; }
done
if grep -Eq '\| (FAIL|ERROR|SKIP) \|$' "$out/gpu-kit.md"; then
  echo "test_dry_run: some rows did not pass" >&2; exit 1
fi
exit $status
