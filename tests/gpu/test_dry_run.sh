#!/bin/sh
# Runs the kit end to end on the simulated GPU and fails unless every row passed.
#   tests/gpu/test_dry_run.sh DIST_DIR   (a `cargo xtask gpu-kit --sim` tree, target/gpu-kit/tree,
#                                          or a `cargo xtask dist` tree, target/dist)
# With GPUSLICE_FORCE_SYSCALL_FALLBACKS=1 it also checks the arbiter ran on the kernel fallbacks.
#
# Memory rows are exact and fail at once, as does any row not measured. Shares, overhead,
# latency and serving are timing figures of a simulated GPU on a shared 2-core host, where one stall of the
# host moves a 2-3 s figure: a timing section with a FAIL row is measured once more, alone, and
# fails the test only if it fails again. Both runs' rows are printed. The last line on stderr
# names what failed (`cargo xtask test` shows it in its summary).
set -eu
here=$(dirname "$0")
dist=${1:-$here/../../target/dist}
out=$(mktemp -d)
retry=$(mktemp -d)
errs=$(mktemp)
trap 'rm -rf "$out" "$retry" "$errs"' EXIT

fail() {
  echo "test_dry_run: $*" >&2
  exit 1
}

# check OUT_DIR: fails on a row not measured or a memory/arbiter FAIL; prints the kit's `--only`
# names of the timing sections that have a FAIL row (nothing when every row passed).
check() {
  python3 - "$1" <<'PY'
import json, os, sys
out = sys.argv[1]
d = json.load(open(os.path.join(out, "gpu-kit.json")))
if not d["rows"]:
    sys.exit("no rows")
bad = [f'{r["section"]}: {r["measurement"]} ({r["status"]})' for r in d["rows"]
       if r["status"] != "measured"]
if bad:
    sys.exit("rows not measured: " + "; ".join(bad))
timing = {"2 shares": "shares", "3 overhead": "overhead", "4 latency": "latency",
          "6 serving": "serving"}
failed = [r for r in d["rows"] if r["verdict"] in ("FAIL", "ERROR")]
hard = [r for r in failed if r["section"] not in timing]
if hard:
    sys.exit("failed: " + "; ".join(f'{r["section"]}: {r["measurement"]} = {r["value"]}'
                                    for r in hard))
for r in failed:
    print(f'test_dry_run: timing row failed: {r["section"]}: {r["measurement"]} = {r["value"]} '
          f'(expected {r["expected"]})', file=sys.stderr)
print(",".join(sorted({timing[r["section"]] for r in failed})))
PY
}

# checked OUT_DIR WHICH: check, failing the test with check's reason as the last line.
checked() {
  if ! check "$1" 2>"$errs"; then
    cat "$errs" >&2
    fail "$2: $(tail -n 1 "$errs")"
  fi
  cat "$errs" >&2
}

"$here/run.sh" --dry-run --dist "$dist" --out "$out" --budget 240 || true
test -s "$out/gpu-kit.md" || fail "no gpu-kit.md written"
python3 - "$out" <<'PY' || fail "the kit's OUT is over what a device run brings back"
import os, sys
out = sys.argv[1]
files = os.listdir(out)
assert len(files) <= 8, f"{len(files)} files in OUT (at most 8 come back): {files}"
big = [f for f in files if os.path.getsize(os.path.join(out, f)) > 16 << 20]
assert not big, f"over 16 MiB: {big}"
PY
again=$(checked "$out" "first run")
if [ "${GPUSLICE_FORCE_SYSCALL_FALLBACKS:-}" = 1 ]; then
  # The arbiter must have run on the fallbacks (docs/kernels.md), and said so.
  for call in futex_waitv pidfd_open; do
    grep -q "kernel fallback: $call" "$out/arbiter.log" ||
      fail "arbiter did not use the $call fallback"
  done
fi
for s in "1 memory" "2 shares" "3 overhead" "4 latency" "6 serving"; do
  grep -q "| $s |" "$out/gpu-kit.md" || fail "section $s missing"
done
[ -z "$again" ] && exit 0

echo "test_dry_run: measuring $again once more" >&2
"$here/run.sh" --dry-run --dist "$dist" --out "$retry" --budget 240 --only "$again" || true
test -s "$retry/gpu-kit.md" || fail "no gpu-kit.md written by the second run ($again)"
still=$(checked "$retry" "second run ($again)")
[ -z "$still" ] ||
  fail "failed twice: $(sed -n 's/^test_dry_run: timing row failed: //p' "$errs" | paste -sd ';')"
