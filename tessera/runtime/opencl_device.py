"""The OpenCL device API, through pyopencl (imported only when an OpenCL device is used).

    api = device_api(0)                 # the first device of the first platform that has one
    buf = api.alloc(4096); api.upload(buf, x); api.download(buf, y)
    prog = api.load({"opencl": source}); api.launch(prog, "f_kernel0", [buf], grid, block)

Device `k` is the k-th device over all platforms, in platform order (on a machine with only
Debian's pocl, device 0 is the CPU running OpenCL). A launch's global size is grid * block per
dimension, as OpenCL counts work-items (CUDA counts blocks).
"""

from __future__ import annotations

import functools

import numpy as np


class OpenCLUnavailable(NotImplementedError):  # a RuntimeError: what this machine lacks
    """No OpenCL here (pyopencl or an OpenCL driver missing); the message says what to install."""


def _cl():
    try:
        import pyopencl
    except ImportError:
        raise OpenCLUnavailable(
            "running on an OpenCL device needs pyopencl and an OpenCL driver "
            "(scripts/setup.d/50-gpu.sh installs pyopencl and Debian's pocl-opencl-icd)"
        ) from None
    return pyopencl


@functools.cache
def device_api(index: int) -> OpenCLDeviceAPI:
    cl = _cl()
    try:
        devices = [d for p in cl.get_platforms() for d in p.get_devices()]
    except cl.Error as err:  # no ICD installed: "PLATFORM_NOT_FOUND_KHR"
        raise OpenCLUnavailable(f"no OpenCL platform on this machine ({err})") from None
    if index >= len(devices):
        raise OpenCLUnavailable(
            f"opencl({index}): this machine has {len(devices)} OpenCL device(s)"
        )
    return OpenCLDeviceAPI(cl, devices[index])


class OpenCLDeviceAPI:
    """Memory, programs and launches on one OpenCL device (one context, one in-order queue)."""

    def __init__(self, cl, dev):
        self.cl, self.dev = cl, dev
        self.context = cl.Context([dev])
        self.queue = cl.CommandQueue(self.context)
        self.name = dev.name

    def alloc(self, nbytes: int):
        return self.cl.Buffer(self.context, self.cl.mem_flags.READ_WRITE, size=int(nbytes))

    def free(self, buf) -> None:
        buf.release()

    def view(self, buf, offset: int, nbytes: int):
        """Bytes [offset, offset + nbytes) of `buf` as a buffer of their own (a sub-buffer)."""
        align = self.dev.mem_base_addr_align // 8
        if offset % align:
            raise ValueError(
                f"OpenCL device {self.name} needs sub-buffers at multiples of {align} bytes; "
                f"an arena slot is at {offset}"
            )
        return buf.get_sub_region(int(offset), int(nbytes))

    def upload(self, buf, host: np.ndarray) -> None:
        self.cl.enqueue_copy(self.queue, buf, np.ascontiguousarray(host), is_blocking=True)

    def download(self, buf, host: np.ndarray) -> None:
        self.cl.enqueue_copy(self.queue, host, buf, is_blocking=True)

    def copy(self, dst, dst_offset: int, src, src_offset: int, nbytes: int) -> None:
        """Queue a copy of `nbytes` device bytes (the regions must not overlap)."""
        self.cl.enqueue_copy(
            self.queue, dst, src, byte_count=int(nbytes), src_offset=int(src_offset),
            dst_offset=int(dst_offset),
        )  # fmt: skip

    def write(self, buf, offset: int, host: np.ndarray) -> None:
        """Host bytes into `buf` at `offset`, after what is queued."""
        self.cl.enqueue_copy(
            self.queue, buf, np.ascontiguousarray(host), dst_offset=int(offset), is_blocking=True
        )

    def read(self, buf, offset: int, host: np.ndarray) -> None:
        """`host.nbytes` bytes of `buf` from `offset`, once what is queued has run."""
        self.cl.enqueue_copy(self.queue, host, buf, src_offset=int(offset), is_blocking=True)

    def load(self, code: dict):
        if "opencl" not in code:
            raise ValueError(f"this module holds {', '.join(code)} code, not OpenCL C")
        try:
            program = self.cl.Program(self.context, code["opencl"]).build()
        except self.cl.RuntimeError as err:
            raise RuntimeError(f"the OpenCL driver rejected the generated source:\n{err}") from None
        return (program, {})  # kernels are made once each: each cl.Kernel costs a lookup

    def launch(self, program, kernel: str, buffers, grid, block) -> None:
        program, kernels = program
        k = kernels.get(kernel)
        if k is None:
            k = kernels[kernel] = self.cl.Kernel(program, kernel)
        k.set_args(*buffers)
        global_size = tuple(int(g) * int(b) for g, b in zip(grid, block, strict=True))
        self.cl.enqueue_nd_range_kernel(self.queue, k, global_size, tuple(int(b) for b in block))

    def sync(self) -> None:
        self.queue.finish()
