"""The CUDA device API, through cuda-python's driver bindings (imported only when a CUDA device
is used): memory, module load from a cubin (PTX when the cubin does not fit the GPU), launches.

    api = device_api(0)
    ptr = api.alloc(4096); api.upload(ptr, x); api.download(ptr, y)
    mod = api.load({"cubin": b"...", "ptx": "...", "arch": "sm_80"})
    api.launch(mod, "f_kernel0", [ptr], grid=(16, 1, 1), block=(64, 1, 1)); api.sync()

A cubin made for sm_XY runs on a GPU of compute capability X.Z with Z >= Y; otherwise the PTX
is given to the driver, which compiles it for the GPU at hand. Work goes to the primary context's
default stream, in order; `sync` waits for it.
"""

from __future__ import annotations

import ctypes
import functools

import numpy as np


class CUDAUnavailable(NotImplementedError):  # a RuntimeError: what this machine lacks
    """No usable CUDA here; the message says what is missing (bindings, driver or GPU)."""


def _driver():
    try:
        from cuda.bindings import driver
    except ImportError:
        try:
            from cuda import cuda as driver  # cuda-python < 12.6
        except ImportError:
            raise CUDAUnavailable(
                "running on a CUDA device needs cuda-python (pip install 'cuda-python>=12,<13'; "
                "scripts/setup.d/50-gpu.sh) and an NVIDIA driver"
            ) from None
    return driver


def _ok(result, what: str):
    """cuda-python returns (status, values...): raise on a bad status, return the values."""
    status, *values = result if isinstance(result, tuple) else (result,)
    if int(status) != 0:
        raise CUDAUnavailable(f"{what} failed: {status!r}")
    return values[0] if len(values) == 1 else tuple(values)


@functools.cache
def device_api(index: int) -> CUDADeviceAPI:
    cu = _driver()
    try:
        _ok(cu.cuInit(0), "cuInit")
    except (CUDAUnavailable, RuntimeError) as err:
        raise CUDAUnavailable(
            f"cuda({index}): no CUDA driver or GPU on this machine ({err}); the module's device "
            "code can only run on a machine with an NVIDIA GPU"
        ) from None
    count = _ok(cu.cuDeviceGetCount(), "cuDeviceGetCount")
    if index >= count:
        raise CUDAUnavailable(f"cuda({index}): this machine has {count} CUDA device(s)")
    return CUDADeviceAPI(cu, index)


class CUDADeviceAPI:
    """One GPU through its primary context."""

    def __init__(self, cu, index: int):
        self.cu = cu
        self.dev = _ok(cu.cuDeviceGet(index), "cuDeviceGet")
        self.ctx = _ok(cu.cuDevicePrimaryCtxRetain(self.dev), "cuDevicePrimaryCtxRetain")
        _ok(cu.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")
        attr = cu.CUdevice_attribute
        major = _ok(
            cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.dev),
            "cuDeviceGetAttribute",
        )
        minor = _ok(
            cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.dev),
            "cuDeviceGetAttribute",
        )
        self.compute_capability = (int(major), int(minor))

    def _current(self) -> None:
        _ok(self.cu.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")

    def alloc(self, nbytes: int):
        self._current()
        return _ok(self.cu.cuMemAlloc(int(nbytes)), "cuMemAlloc")

    def free(self, ptr) -> None:
        try:
            self.cu.cuMemFree(ptr)
        except Exception:  # at interpreter exit the driver may be gone already
            pass

    def view(self, ptr, offset: int, nbytes: int):
        return self.cu.CUdeviceptr(int(ptr) + int(offset))

    def upload(self, ptr, host: np.ndarray) -> None:
        host = np.ascontiguousarray(host)
        _ok(self.cu.cuMemcpyHtoD(ptr, host.ctypes.data, host.nbytes), "cuMemcpyHtoD")

    def download(self, ptr, host: np.ndarray) -> None:
        _ok(self.cu.cuMemcpyDtoH(host.ctypes.data, ptr, host.nbytes), "cuMemcpyDtoH")

    def copy(self, dst, dst_offset: int, src, src_offset: int, nbytes: int) -> None:
        """Queue a copy of `nbytes` device bytes on the default stream (no overlap)."""
        _ok(
            self.cu.cuMemcpyDtoDAsync(
                self.view(dst, dst_offset, nbytes), self.view(src, src_offset, nbytes), nbytes, 0
            ),
            "cuMemcpyDtoDAsync",
        )

    def write(self, ptr, offset: int, host: np.ndarray) -> None:
        """Host bytes into device memory at `offset`, after what is queued."""
        self.upload(self.view(ptr, offset, host.nbytes), host)

    def read(self, ptr, offset: int, host: np.ndarray) -> None:
        """`host.nbytes` device bytes from `offset`, once what is queued has run."""
        self.download(self.view(ptr, offset, host.nbytes), host)

    def cubin_fits(self, arch: str) -> bool:
        major, minor = int(arch[3:-1]), int(arch[-1])
        return self.compute_capability[0] == major and self.compute_capability[1] >= minor

    def load(self, code: dict):
        self._current()
        if "cubin" in code and self.cubin_fits(code.get("arch", "sm_80")):
            image = code["cubin"]
        elif "ptx" in code:
            image = code["ptx"].encode() + b"\0"
        else:
            raise CUDAUnavailable(f"this module holds no CUDA code ({', '.join(code)})")
        module = _ok(self.cu.cuModuleLoadData(image), "cuModuleLoadData")
        return (module, {})

    def launch(self, program, kernel: str, buffers, grid, block) -> None:
        module, functions = program
        fn = functions.get(kernel)
        if fn is None:
            fn = functions[kernel] = _ok(
                self.cu.cuModuleGetFunction(module, kernel.encode()), "cuModuleGetFunction"
            )
        # kernelParams: the address of an array of pointers, one to each argument's value
        values = [ctypes.c_void_p(int(b)) for b in buffers]
        pointers = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
        _ok(
            self.cu.cuLaunchKernel(
                fn, *map(int, grid), *map(int, block), 0, 0, ctypes.addressof(pointers), 0
            ),
            f"launching {kernel}",
        )

    def sync(self) -> None:
        _ok(self.cu.cuCtxSynchronize(), "cuCtxSynchronize")
