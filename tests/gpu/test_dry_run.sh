#!/bin/sh
# Runs the kit end to end on the simulated GPU and fails unless every row passed.
#   tests/gpu/test_dry_run.sh DIST_DIR      (DIST_DIR: a `cargo xtask dist` tree, e.g. target/dist)
set -eu
dist=${1:-$(dirname "$0")/../../target/dist}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
status=0
"$(dirname "$0")/run.sh" --dry-run --dist "$dist" --out "$out" --budget 240 || status=$?
test -s "$out/gpu-kit.md" || { echo "test_dry_run: no gpu-kit.md written" >&2; exit 1; }
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["rows"], "no rows"' "$out/gpu-kit.json"
for s in "1 memory" "2 shares" "3 overhead" "4 latency"; do
  grep -q "| $s |" "$out/gpu-kit.md" || { echo "test_dry_run: section $s missing" >&2; exit 1; }
done
if grep -Eq '\| (FAIL|ERROR|SKIP) \|$' "$out/gpu-kit.md"; then
  echo "test_dry_run: some rows did not pass" >&2; exit 1
fi
exit $status
