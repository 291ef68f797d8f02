"""Why a device or toolchain cannot be used here (None when it can), for tests and benchmarks to
skip with the reason: the GPU tests (tests/gpu) and the CLI's GPU tests share these."""

from __future__ import annotations

import functools


@functools.cache
def opencl_missing() -> str | None:
    """Why OpenCL cannot run here (None when it can)."""
    try:
        from tessera.runtime.opencl_device import device_api

        device_api(0)
    except Exception as err:  # OpenCLUnavailable, or a driver error
        return f"no OpenCL device ({err}); scripts/setup.d/50-gpu.sh installs pocl"
    return None


@functools.cache
def cuda_missing() -> str | None:
    """Why a CUDA device cannot be used here (None when it can)."""
    try:
        from tessera.runtime.cuda_device import device_api

        device_api(0)
    except Exception as err:
        return f"no CUDA device: {err}"
    return None


def nvrtc_missing() -> str | None:
    """Why NVRTC cannot compile CUDA here (None when it can)."""
    try:
        from tessera.codegen.cuda import nvrtc_version

        nvrtc_version()
    except Exception as err:
        return f"NVRTC is not installed ({err}); scripts/setup.d/50-gpu.sh installs it"
    return None
