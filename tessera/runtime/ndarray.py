"""Devices and NDArray: the arrays kernels read and write.

    a = nd.array(np.ones((2, 3), "float32"))    # a copy, on cpu(0)
    b = nd.empty((2, 3), "float32");  b.copyfrom(a);  b.numpy()

An NDArray owns a numpy array whose data pointer is 64-byte aligned (a uint8 buffer with slack,
viewed from its first aligned byte), C-contiguous and of the exact element type. Code generators
may assume that alignment for NDArrays and internal buffers only (see module.py about numpy
arguments).

bfloat16 is stored as uint16 (the top half of a float32). `nd.array(x, dtype="bfloat16")`
rounds float values to the nearest bfloat16 (ties to even; NaN stays NaN), and `.numpy()` of a
bfloat16 array returns float32 values (exact: every bfloat16 is a float32). A uint16 numpy array
given for a bfloat16 array is taken as raw bits; an ml_dtypes bfloat16 array as its values.

The small ONNX types (float8_e4m3fn, ..., int4, uint2: see `tessera.ir.dtype`) are stored one
byte per element, as ml_dtypes stores them. `.numpy()` returns an ml_dtypes array when ml_dtypes
is installed (else the uint8 bytes); a uint8 array given for them is taken as raw bytes, an
ml_dtypes array of the type as it is, other values are converted by ml_dtypes (`astype`).
ml_dtypes is imported only when such an array is made.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ALIGNMENT = 64

# dtype name -> the numpy dtype that stores it
STORAGE = {
    "float16": "float16",
    "float32": "float32",
    "float64": "float64",
    "bfloat16": "uint16",
    "int8": "int8",
    "int16": "int16",
    "int32": "int32",
    "int64": "int64",
    "uint8": "uint8",
    "uint16": "uint16",
    "uint32": "uint32",
    "uint64": "uint64",
    "bool": "bool",
    # the small storage types: their bytes (tessera.ir.dtype.STORAGE_ONLY)
    **{
        name: "uint8"
        for name in (
            "float8_e4m3fn float8_e4m3fnuz float8_e5m2 float8_e5m2fnuz float4_e2m1fn "
            "float8_e8m0fnu int4 uint4 int2 uint2"
        ).split()
    },
}
SMALL = frozenset(n for n, storage in STORAGE.items() if storage == "uint8" and n != "uint8")

_DEVICE_TYPES = {
    "cpu": "cpu",
    "llvm": "cpu",
    "c": "cpu",
    "cuda": "cuda",
    "gpu": "cuda",
    "opencl": "opencl",  # GPU (issue 17): runtime/opencl_device.py
}


@dataclass(frozen=True)
class Device:
    """Where memory lives and kernels run: `cpu(0)`, `cuda(0)`."""

    device_type: str
    index: int = 0

    def __str__(self) -> str:
        return f"{self.device_type}({self.index})"

    def __repr__(self) -> str:
        return str(self)

    def sync(self) -> None:
        """Wait for the device's queued work; CPU kernels finish before they return."""


def device(kind: str, index: int = 0) -> Device:
    """A Device from a name: "cpu", "llvm" and "c" are the CPU; "cuda" and "gpu" the GPU."""
    if isinstance(kind, Device):
        return kind
    key = str(kind).split()[0].lower() if str(kind).strip() else ""
    if key not in _DEVICE_TYPES:
        raise ValueError(f"unknown device {kind!r} (known: {', '.join(_DEVICE_TYPES)})")
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise ValueError(f"device index must be a non-negative int, got {index!r}")
    return Device(_DEVICE_TYPES[key], index)


def cpu(index: int = 0) -> Device:
    return device("cpu", index)


def cuda(index: int = 0) -> Device:
    return device("cuda", index)


def opencl(index: int = 0) -> Device:
    return device("opencl", index)


def dtype_name(dtype) -> str:
    """The tessera name of a dtype given as a str, a numpy dtype/type or a tessera DType."""
    if isinstance(dtype, str):
        name = dtype
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            name = str(dtype)  # e.g. tessera.ir.DType, whose str is its name
    if name not in STORAGE:
        raise ValueError(f"unsupported dtype {dtype!r} (supported: {', '.join(STORAGE)})")
    return name


def _check_cpu(dev) -> Device:
    dev = device(dev) if not isinstance(dev, Device) else dev
    if dev.device_type != "cpu":
        raise NotImplementedError(
            f"arrays on {dev} are not supported yet: this runtime has CPU only"
        )
    return dev


def _aligned_empty(shape: tuple[int, ...], storage: str) -> np.ndarray:
    np_dtype = np.dtype(storage)
    nbytes = int(np.prod(shape, dtype=np.int64)) * np_dtype.itemsize
    raw = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
    offset = (-raw.ctypes.data) % ALIGNMENT
    # (a slice of zero bytes would point at the buffer's start; the constructor keeps the offset)
    return np.ndarray(shape, np_dtype, buffer=raw, offset=offset)


def float_to_bfloat16_bits(values) -> np.ndarray:
    """Round float values to bfloat16 (nearest, ties to even); returns the uint16 bits."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    is_nan = np.isnan(np.asarray(values, dtype=np.float32))
    rounded = np.where(is_nan, (bits >> 16) | 0x40, rounded)  # keep NaN quiet, and a NaN
    return rounded.astype(np.uint16)


def bfloat16_bits_to_float(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _ml_dtype(name: str) -> np.dtype | None:
    """ml_dtypes' numpy dtype for `name`, or None when ml_dtypes is not installed."""
    try:
        import ml_dtypes
    except ImportError:
        return None
    return np.dtype(getattr(ml_dtypes, name))


def _small_values(array: np.ndarray, name: str) -> np.ndarray:
    """The bytes of a small-type array: uint8 and ml_dtypes arrays of the type as they are."""
    if array.dtype == np.uint8 or array.dtype.name == name:
        return array.view(np.uint8)
    ml = _ml_dtype(name)
    if ml is None:
        raise TypeError(f"converting {array.dtype} values to {name} needs the ml_dtypes package")
    if array.dtype.kind == "V":  # another ml_dtypes type: through float32
        array = array.astype(np.float32)
    return array.astype(ml).view(np.uint8)


def _storage_values(source, name: str) -> np.ndarray:
    """`source` converted to the storage type of dtype `name` (bfloat16 values are rounded)."""
    if isinstance(source, NDArray):
        if source.dtype == name or (name == "bfloat16" and source.dtype == "uint16"):
            return source._array
        source = source.numpy()
    array = np.asarray(source)
    if name in SMALL:
        return _small_values(array, name)
    if array.dtype.name == "bfloat16" and array.dtype.kind == "V":  # ml_dtypes' bfloat16
        array = array.view(np.uint16) if name == "bfloat16" else array.astype(np.float32)
    if array.dtype.kind not in "biuf":
        raise TypeError(f"cannot make a {name} array from numpy dtype {array.dtype}")
    if name == "bfloat16":
        return array if array.dtype == np.uint16 else float_to_bfloat16_bits(array)
    return array.astype(STORAGE[name], copy=False)


class NDArray:
    """An n-dimensional array on a device, 64-byte aligned, C-contiguous."""

    def __init__(self, array: np.ndarray, dtype: str, dev: Device):
        # Internal: use nd.array / nd.empty. `array` must already be aligned storage.
        self._array = array
        self._dtype = dtype
        self._device = dev
        self._data_ptr = array.ctypes.data

    @property
    def shape(self) -> tuple[int, ...]:
        return self._array.shape

    @property
    def dtype(self) -> str:
        return self._dtype

    @property
    def device(self) -> Device:
        return self._device

    @property
    def ndim(self) -> int:
        return self._array.ndim

    @property
    def size(self) -> int:
        return self._array.size

    @property
    def nbytes(self) -> int:
        return self._array.nbytes

    @property
    def data_ptr(self) -> int:
        """The address of the first element (64-byte aligned)."""
        return self._data_ptr

    def numpy(self) -> np.ndarray:
        """A numpy copy of the contents (bfloat16 comes back as float32 values)."""
        if self._dtype == "bfloat16":
            return bfloat16_bits_to_float(self._array)
        if self._dtype in SMALL:
            ml = _ml_dtype(self._dtype)
            return self._array.copy() if ml is None else self._array.view(ml).copy()
        return self._array.copy()

    def __array__(self, dtype=None, copy=None):
        out = self.numpy()
        return out if dtype is None else out.astype(dtype)

    def copyfrom(self, source) -> NDArray:
        """Copy `source` (a numpy array, a list or an NDArray of the same shape) into this array.

        Values are converted to this array's dtype, as numpy's astype does.
        """
        values = _storage_values(source, self._dtype)
        if values.shape != self.shape:
            raise ValueError(
                f"copyfrom: array shape is {self.shape}, source shape is {values.shape}"
            )
        np.copyto(self._array, values, casting="unsafe")
        return self

    def copyto(self, target) -> NDArray:
        """Copy into `target` (an NDArray) or onto a Device (a new NDArray); returns the copy."""
        if isinstance(target, NDArray):
            return target.copyfrom(self)
        if isinstance(target, Device):
            return empty(self.shape, self._dtype, target).copyfrom(self)
        raise TypeError(f"copyto expects an NDArray or a Device, got {type(target).__name__}")

    def __repr__(self) -> str:
        return f"<NDArray {self._dtype}{list(self.shape)} @ {self._device}>\n{self.numpy()!r}"


def empty(shape, dtype="float32", device=None) -> NDArray:
    """An uninitialised array. `shape` is an int or a sequence of non-negative ints."""
    if isinstance(device, Device) and device.device_type in ("cuda", "opencl"):  # GPU (issue 17)
        from tessera.runtime.gpu_module import empty as gpu_empty

        return gpu_empty((shape,) if isinstance(shape, int) else shape, dtype, device)
    dev = _check_cpu(device if device is not None else cpu(0))
    name = dtype_name(dtype)
    shape = (shape,) if isinstance(shape, int | np.integer) else tuple(shape)
    if not all(isinstance(d, int | np.integer) and not isinstance(d, bool) for d in shape):
        raise TypeError(f"empty: shape must hold ints, got {shape!r}")
    if any(d < 0 for d in shape):
        raise ValueError(f"empty: shape must be non-negative, got {shape!r}")
    return NDArray(_aligned_empty(tuple(int(d) for d in shape), STORAGE[name]), name, dev)


def array(source, device=None, dtype=None) -> NDArray:
    """A new array holding a copy of `source` (a numpy array, a list, a scalar or an NDArray).

    dtype: by default the source's (a list becomes what np.asarray makes of it).
    """
    if dtype is None:
        if isinstance(source, NDArray):
            dtype = source.dtype
        else:
            source = np.asarray(source)
            dtype = source.dtype
    name = dtype_name(dtype)
    values = _storage_values(source, name)
    return empty(values.shape, name, device).copyfrom(values)
