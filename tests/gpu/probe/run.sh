#!/bin/sh
# Real-driver fact probe (issues #32, #33): capture rules and call costs (capture_rules.c), context
# footprints and NVML's raw process-utilisation samples (nvml_probe.py). Writes to $OUT.
#   tests/gpu/probe/run.sh            (on the GPU machine; needs gcc, cuda.h, PyTorch, nvidia-ml-py)
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/probe-out}
mkdir -p "$OUT"
INC=$(dirname "$(find /usr/local/cuda/include /usr/local/cuda*/targets/*/include /usr/include -name cuda.h 2>/dev/null | head -1)")
STUBS=$(dirname "$(find /usr/local/cuda*/ -name libcuda.so -path '*stubs*' 2>/dev/null | head -1)")
echo "cuda.h in $INC, stubs in $STUBS" | tee "$OUT/env.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_mode --format=csv >> "$OUT/env.txt" 2>&1
gcc -O2 -I"$INC" "$HERE/capture_rules.c" -L"$STUBS" -lcuda -lpthread -o /tmp/capture_rules \
  >> "$OUT/env.txt" 2>&1 && timeout 150 /tmp/capture_rules > "$OUT/capture_rules.txt" 2>&1
echo "capture_rules rc=$?" >> "$OUT/env.txt"
timeout 300 python3 "$HERE/nvml_probe.py" "$OUT/nvml_probe.json" > "$OUT/nvml_probe.log" 2>&1
echo "nvml_probe rc=$?" >> "$OUT/env.txt"
