#!/bin/sh
# gpuslice real-GPU validation kit (issue #8): see tests/gpu/README.md.
#   tests/gpu/run.sh [--dry-run] [--dist DIR] [--out DIR] [--budget SECONDS]
# Needs python3 (standard library); the real-GPU mode also needs PyTorch with CUDA and nvidia-smi.
exec python3 "$(dirname "$0")/kit.py" "$@"
