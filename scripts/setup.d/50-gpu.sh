#!/usr/bin/env bash
# GPU backends (docs/gpu.md): OpenCL on the CPU through Debian's pocl (so GPU schedules run and
# are tested without a GPU), pyopencl to drive it, NVRTC (the CUDA runtime compiler, a wheel: no
# CUDA toolkit) to compile CUDA C to cubins, and cuda-python's driver bindings for running them
# where a GPU is present. Idempotent; quick when everything is there.
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/apt_install.sh pocl-opencl-icd ocl-icd-libopencl1
if ! .venv/bin/python -c "import pyopencl, nvidia.cuda_nvrtc, cuda.bindings" >/dev/null 2>&1; then
    .venv/bin/python -m pip install -q pyopencl nvidia-cuda-nvrtc-cu12 "cuda-python>=12,<13"
fi
