"""CUDA code generation: device kernels -> CUDA C -> a cubin (and PTX) through NVRTC, in-process.

    source = emit_cuda(kernels)                   # CUDA C++ text (extern "C" __global__ ...)
    code = compile_cuda(source, "sm_90")          # {"cubin": bytes, "ptx": str, "arch": "sm_90"}

NVRTC is the CUDA runtime compiler; it ships as a wheel (`nvidia-cuda-nvrtc-cu12`) and needs no
GPU and no CUDA toolkit, so every kernel is compiled (and checked) on any machine. It is loaded
with ctypes from the wheel (or the system's libnvrtc). The cubin runs on the -arch it was made
for (and later minor revisions); the PTX, made for the same virtual architecture, is the
fallback the driver compiles for newer GPUs.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import os

from tessera.codegen.gpu_c import CUDA, emit_kernels


class NVRTCError(RuntimeError):
    """NVRTC is missing or rejected a source (the message has its log)."""


def emit_cuda(kernels) -> str:
    return emit_kernels(list(kernels), CUDA)


@functools.cache
def _nvrtc() -> ctypes.CDLL:
    candidates = []
    try:
        import nvidia.cuda_nvrtc as wheel

        for folder in wheel.__path__:
            candidates += sorted(glob.glob(os.path.join(folder, "lib", "libnvrtc.so*")))
    except ImportError:
        pass
    candidates += ["libnvrtc.so.12", "libnvrtc.so"]
    for path in candidates:
        if "alt" in os.path.basename(path) or "builtins" in os.path.basename(path):
            continue
        try:
            return ctypes.CDLL(path)
        except OSError:
            continue
    raise NVRTCError(
        "the CUDA target needs NVRTC: pip install nvidia-cuda-nvrtc-cu12 "
        "(scripts/setup.d/50-gpu.sh)"
    )


def nvrtc_version() -> tuple[int, int]:
    major, minor = ctypes.c_int(), ctypes.c_int()
    _check(_nvrtc().nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
    return major.value, minor.value


def _check(status: int, what: str, log: str = "") -> None:
    if status != 0:
        lib = _nvrtc()
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        message = lib.nvrtcGetErrorString(status).decode()
        raise NVRTCError(f"{what} failed: {message}" + (f"\n{log}" if log else ""))


def _compile(source: str, arch: str, want: str) -> bytes:
    """Run NVRTC on `source` for `arch` (sm_XX: a cubin; compute_XX: PTX); the output bytes."""
    lib = _nvrtc()
    prog = ctypes.c_void_p()
    _check(
        lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"tessera.cu", 0, None, None),
        "nvrtcCreateProgram",
    )
    try:
        opts = [f"--gpu-architecture={arch}".encode(), b"-default-device", b"--std=c++14"]
        array = (ctypes.c_char_p * len(opts))(*opts)
        status = lib.nvrtcCompileProgram(prog, len(opts), array)
        if status != 0:
            size = ctypes.c_size_t()
            lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value)
            lib.nvrtcGetProgramLog(prog, log)
            _check(status, f"NVRTC compiling for {arch}", log.value.decode(errors="replace"))
        size = ctypes.c_size_t()
        get_size, get = (
            (lib.nvrtcGetCUBINSize, lib.nvrtcGetCUBIN)
            if want == "cubin"
            else (lib.nvrtcGetPTXSize, lib.nvrtcGetPTX)
        )
        _check(get_size(prog, ctypes.byref(size)), f"nvrtcGet{want.upper()}Size")
        out = ctypes.create_string_buffer(size.value)
        _check(get(prog, out), f"nvrtcGet{want.upper()}")
        return out.raw
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def compile_cuda(source: str, arch: str = "sm_80") -> dict:
    """A cubin for `arch` and PTX for its virtual architecture: {"cubin", "ptx", "arch"}."""
    if not arch.startswith("sm_") or not arch[3:].isdigit():
        raise ValueError(f"CUDA -arch must look like sm_80, got {arch!r}")
    cubin = _compile(source, arch, "cubin")
    ptx = _compile(source, "compute_" + arch[3:], "ptx").rstrip(b"\0").decode()
    return {"cubin": cubin, "ptx": ptx, "arch": arch}
