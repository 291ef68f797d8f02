"""GPU arrays and modules: device memory, and the host plans that launch a function's kernels.

    f = tessera.build(s, [A, B], target="opencl")      # a GPUModule
    a = tessera.nd.array(x, device=tessera.opencl(0))  # a GPUArray (device memory)
    b = tessera.nd.empty((n,), "float32", tessera.opencl(0))
    f(a, b); b.numpy()                                  # numpy arguments work too (copied)
    f.export_library("add.tsgpu"); tessera.runtime.load_module("add.tsgpu")

An exported GPU module is a zip archive (meta.json, source.txt, code/<kind>; a compiled model
adds graph.json and params.bin) sealed with the same trailer as a CPU library (runtime/
artifact.py: format, tessera's version, the target, a sha256 of the archive, an optional
signature): load_module checks it before it reads a byte of the archive.

A backend (runtime/opencl_device.py, runtime/cuda_device.py) is imported only when a device
of its kind is used; it gives a `DeviceAPI`: alloc/free, upload/download, load(code) -> program,
launch(program, kernel, buffers, grid, block), sync. A host plan is plain data (made by
codegen/gpu.py): the params' shapes and dtypes, the temporaries to allocate, and the launches
in order, so this file imports nothing from the compiler.
"""

from __future__ import annotations

import importlib
import io
import json
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from tessera.runtime import artifact
from tessera.runtime.ndarray import (
    STORAGE,
    Device,
    _storage_values,
    bfloat16_bits_to_float,
    dtype_name,
)

# backends live in *_device modules: `tessera.runtime.opencl` and `.cuda` name the devices
GPU_KINDS = {"opencl": "tessera.runtime.opencl_device", "cuda": "tessera.runtime.cuda_device"}
_MAGIC = "tessera-gpu-module-1"


def device_api(dev: Device):
    """The DeviceAPI of `dev` (its backend imported on first use)."""
    if dev.device_type not in GPU_KINDS:
        raise ValueError(f"{dev} is not a GPU device (GPU kinds: {', '.join(GPU_KINDS)})")
    return importlib.import_module(GPU_KINDS[dev.device_type]).device_api(dev.index)


class GPUArray:
    """An n-dimensional array in a GPU device's memory."""

    def __init__(self, shape: tuple[int, ...], dtype: str, dev: Device, view_of=None):
        """A new allocation, or with `view_of=(handle, offset)` a view of the bytes of another
        allocation from `offset` on (an arena slot; the view does not free them)."""
        self._shape, self._dtype, self._device = tuple(shape), dtype, dev
        self._storage = np.dtype(STORAGE[dtype])
        self.api = device_api(dev)
        if view_of is None:
            self.handle, self._owned = self.api.alloc(max(self.nbytes, 1)), True
        else:
            self.handle = self.api.view(view_of[0], view_of[1], max(self.nbytes, 1))
            self._owned = False

    @staticmethod
    def storage_dtype(dtype: str) -> np.dtype:
        return np.dtype(STORAGE[dtype])

    shape = property(lambda self: self._shape)
    dtype = property(lambda self: self._dtype)
    device = property(lambda self: self._device)
    ndim = property(lambda self: len(self._shape))
    size = property(lambda self: int(np.prod(self._shape, dtype=np.int64)))
    nbytes = property(lambda self: self.size * self._storage.itemsize)

    def numpy(self) -> np.ndarray:
        out = np.empty(self._shape, self._storage)
        if out.size:
            self.api.download(self.handle, out)
        return bfloat16_bits_to_float(out) if self._dtype == "bfloat16" else out

    def __array__(self, dtype=None, copy=None):
        out = self.numpy()
        return out if dtype is None else out.astype(dtype)

    def copyfrom(self, source) -> GPUArray:
        values = _storage_values(np.asarray(source), self._dtype)
        values = np.ascontiguousarray(values).reshape(values.shape)  # it makes a scalar 1-d
        if values.shape != self._shape:
            raise ValueError(f"copyfrom: array shape is {self._shape}, source is {values.shape}")
        if values.size:
            self.api.upload(self.handle, values.astype(self._storage, copy=False))
        return self

    def __del__(self):
        handle, self.handle = getattr(self, "handle", None), None
        if handle is not None and getattr(self, "_owned", False):
            self.api.free(handle)

    def __repr__(self) -> str:
        return f"<GPUArray {self._dtype}{list(self._shape)} @ {self._device}>"


def empty(shape, dtype: str, dev: Device) -> GPUArray:
    return GPUArray(tuple(int(d) for d in shape), dtype_name(dtype), dev)


class GPUFunction:
    """One compiled function: call it with arrays (GPUArrays on its device, or numpy)."""

    def __init__(self, module: GPUModule, plan: dict):
        self.module, self.plan = module, plan

    def __call__(self, *args, device: Device | None = None) -> None:
        params = self.plan["params"]
        if len(args) != len(params):
            raise TypeError(f"{self.plan['name']} takes {len(params)} arrays, got {len(args)}")
        dev = device or next((a.device for a in args if isinstance(a, GPUArray)), None)
        dev = dev or Device(self.module.kind, 0)
        arrays, copies_back = [], []
        for a, p in zip(args, params, strict=True):
            arrays.append(self._on_device(a, p, dev, copies_back))
        api = device_api(dev)
        temps = [api.alloc(max(t["nbytes"], 1)) for t in self.plan["temps"]]
        program = self.module.program(dev)
        try:
            for launch in self.plan["launches"]:
                bufs = [
                    arrays[i].handle if kind == "param" else temps[i] for kind, i in launch["args"]
                ]
                api.launch(program, launch["kernel"], bufs, launch["grid"], launch["block"])
            api.sync()
        finally:
            for t in temps:
                api.free(t)
        for host, arr in copies_back:
            np.copyto(host, arr.numpy(), casting="unsafe")

    def _on_device(self, a, p: dict, dev: Device, copies_back: list) -> GPUArray:
        name = f"{self.plan['name']}: argument {p['name']}"
        if isinstance(a, GPUArray):
            if a.device != dev:
                raise ValueError(f"{name} is on {a.device}, the call runs on {dev}")
            arr = a
        elif isinstance(a, np.ndarray):
            arr = empty(a.shape, p["dtype"], dev).copyfrom(a)
            copies_back.append((a, arr))
        else:
            raise TypeError(f"{name}: expected a GPUArray or numpy array, got {type(a).__name__}")
        if tuple(arr.shape) != tuple(p["shape"]) or arr.dtype != p["dtype"]:
            raise ValueError(
                f"{name}: expected {p['dtype']}{p['shape']}, got {arr.dtype}{list(arr.shape)}"
            )
        return arr


class GPUModule:
    """Compiled GPU functions: device code (`code`: OpenCL C, or a cubin and PTX) + host plans."""

    def __init__(self, kind: str, code: dict, plans: list[dict], source: str = ""):
        self.kind, self.code, self.plans, self.source = kind, code, plans, source
        self._programs: dict = {}

    @property
    def function_names(self) -> list[str]:
        return [p["name"] for p in self.plans]

    def __getitem__(self, name: str) -> GPUFunction:
        for p in self.plans:
            if p["name"] == name:
                return GPUFunction(self, p)
        raise KeyError(f"no function {name!r} (has: {', '.join(self.function_names)})")

    def __call__(self, *args, **kwargs) -> None:
        GPUFunction(self, self.plans[0])(*args, **kwargs)

    def get_source(self, fmt: str = "") -> str:
        return self.source

    def program(self, dev: Device):
        """The device code loaded on `dev` (built once per device)."""
        if dev not in self._programs:
            self._programs[dev] = device_api(dev).load(self.code)
        return self._programs[dev]

    def export_library(self, path, *, key=None) -> Path:
        """One sealed file with the device code, the host plans and the source (`key`: sign it,
        as Module.export_library)."""
        return write_sealed(path, self.kind, self.write_entries, key)

    def write_entries(self, z: zipfile.ZipFile) -> None:
        meta = {"magic": _MAGIC, "kind": self.kind, "plans": self.plans}
        z.writestr("meta.json", json.dumps(meta))
        z.writestr("source.txt", self.source)
        for key, blob in self.code.items():
            z.writestr(f"code/{key}", blob)

    def __repr__(self) -> str:
        return f"<GPUModule {self.kind}: {', '.join(self.function_names)}>"


def write_sealed(path, kind: str, write_entries, key=None) -> Path:
    """A zip archive filled by `write_entries(zipfile)`, sealed at `path` (artifact.seal)."""
    with tempfile.TemporaryDirectory(prefix="tessera-export-") as tmp:
        archive = Path(tmp) / "module.zip"
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
            write_entries(z)
        return artifact.seal(archive, path, target={"target": kind, "device": kind}, key=key)


def is_gpu_archive(payload: bytes) -> bool:
    """Whether the library bytes of an artifact are a GPU module's archive (a zip)."""
    return payload[:4] == b"PK\x03\x04"


def open_archive(payload: bytes) -> zipfile.ZipFile:
    return zipfile.ZipFile(io.BytesIO(payload))


def load_gpu_module(z: zipfile.ZipFile, name: str) -> GPUModule:
    """A GPUModule from an exported archive. Loading needs no device; running says clearly when
    its device (or the driver library) is missing."""
    try:
        meta = json.loads(z.read("meta.json"))
    except (KeyError, ValueError):
        raise ValueError(f"{name!r} is not a tessera GPU module (no readable meta.json)") from None
    if meta.get("magic") != _MAGIC:
        raise ValueError(f"{name!r} is not a tessera GPU module")
    code = {}
    for n in z.namelist():
        if n.startswith("code/"):
            blob = z.read(n)
            key = n[len("code/") :]
            code[key] = blob.decode() if key in ("opencl", "ptx") else blob
    source = z.read("source.txt").decode()
    return GPUModule(meta["kind"], code, meta["plans"], source)
