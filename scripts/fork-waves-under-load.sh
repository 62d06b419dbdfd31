#!/bin/bash
# The fork-wave trial (tests/reliability/tests/fork_waves.rs, 60 s) RUNS times beside two busy
# loops, as a loaded CI host runs it (issue 32, item 6; docs/reliability.md, "Under CPU load").
#   scripts/fork-waves-under-load.sh [RUNS]     (default 10; prints each run's summary lines)
set -u
cd "$(dirname "$0")/.."
runs=${1:-10}
sh -c 'while :; do :; done' & b1=$!
sh -c 'while :; do :; done' & b2=$!
trap 'kill $b1 $b2' EXIT
echo "busy loops $b1 $b2; start $(date -u +%T)"
for i in $(seq 1 "$runs"); do
  echo "=== run $i $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  cargo test -q -p gpuslice-reliability --test fork_waves forking_slice -- --nocapture \
    --test-threads=1 2>&1 |
    grep -E "^fork waves|^ground truth|^honest|^backstop actions|test result|panicked|assertion"
done
echo "end $(date -u +%T)"
