"""PackedFunc: a compiled kernel as a Python callable that checks every argument first.

    f = PackedFunc(cfunc, info)        # info: the kernel's FunctionInfo
    f(a, b, c)                         # NDArrays / numpy arrays for buffers, numbers for vars

The native call is `int32 f(void** buffers, int64* vars)` (tir/function.py). Before it, every
argument is checked against the FunctionInfo, and a mistake raises ValueError naming the
argument: count, dtype (exact: no silent conversion), rank and shape (symbolic dims bind from
the first buffer that has them, after the scalar params, and must agree), contiguity, and that
an array the kernel writes is writeable.

Note [alignment of arguments]
NDArrays are 64-byte aligned. A numpy array is accepted when its data is aligned to its element
size (numpy's own `aligned` flag), so code generators may assume only natural alignment for
buffer parameters; 64-byte alignment holds for NDArrays and internal buffers.

Everything that does not depend on the arguments (slots, dtypes, dims, converters) is computed
once per function, so a call costs a few microseconds.
"""

from __future__ import annotations

import ctypes
import struct

import numpy as np

from tessera.runtime.function_info import FunctionInfo
from tessera.runtime.ndarray import STORAGE, NDArray

KERNEL_TYPE = ctypes.CFUNCTYPE(
    ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int64)
)


class ArgumentTypeError(TypeError, ValueError):
    """An argument of the wrong kind (e.g. a list for a buffer); also a ValueError."""


def _int_converter(dtype: str):
    if dtype == "bool":
        lo, hi = 0, 1
    elif dtype.startswith("uint"):
        lo, hi = 0, (1 << int(dtype[4:])) - 1
    else:
        bits = int(dtype[3:]) if dtype.startswith("int") and dtype[3:].isdigit() else 64
        lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1

    def convert(value, where):
        if not isinstance(value, int | np.integer):
            raise ArgumentTypeError(
                f"{where}: expected an int ({dtype}), got {type(value).__name__}"
            )
        value = int(value)
        if not lo <= value <= hi:
            raise ValueError(f"{where}: {value} is out of range for {dtype}")
        return value

    return convert


def _float_converter(dtype: str):
    def convert(value, where):
        if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
            raise ArgumentTypeError(
                f"{where}: expected a number ({dtype}), got {type(value).__name__}"
            )
        # floats travel as the bits of a float64 (tir/function.py)
        return struct.unpack("<q", struct.pack("<d", float(value)))[0]

    return convert


def _converter(dtype: str):
    is_float = dtype.startswith("float") or dtype.startswith("bfloat")
    return _float_converter(dtype) if is_float else _int_converter(dtype)


class _BufferSpec:
    """What a buffer parameter must be; `dims` holds ints, var slots (as ("var", slot)) or text."""

    __slots__ = (
        "index",
        "slot",
        "name",
        "dtype",
        "np_dtypes",
        "dims",
        "static_shape",
        "rank",
        "const_dims",
        "var_dims",
        "written",
    )

    def __init__(self, index, slot, param, var_slots):
        self.index, self.slot, self.name, self.dtype = index, slot, param.name, param.dtype
        self.written = param.written
        if param.dtype not in STORAGE:
            raise ValueError(f"buffer parameter {param.name!r} has unsupported dtype {param.dtype}")
        # bfloat16 buffers also take numpy uint16 arrays (raw bits) and ml_dtypes' bfloat16;
        # float8/int4/... buffers take uint8 arrays (raw bytes) and ml_dtypes' arrays
        self.np_dtypes = (np.dtype(STORAGE[param.dtype]),)
        self.dims = tuple(_dim_spec(d, var_slots) for d in param.shape)
        # all dims constant: one tuple comparison checks the shape
        self.static_shape = self.dims if all(type(d) is int for d in self.dims) else None
        self.rank = len(self.dims)
        self.const_dims = tuple((k, d) for k, d in enumerate(self.dims) if type(d) is int)
        self.var_dims = tuple((k, d[1]) for k, d in enumerate(self.dims) if type(d) is tuple)


def _dim_spec(dim, var_slots):
    if isinstance(dim, int):
        return dim
    if isinstance(dim, str) and dim in var_slots:
        return ("var", var_slots[dim], dim)
    return str(dim)  # an expression such as "n + 1": not checked


class PackedFunc:
    """A compiled kernel with its FunctionInfo; calling it checks the arguments, then runs it."""

    def __init__(self, cfunc, info: FunctionInfo, keepalive=None):
        self.name = info.name
        self.info = info
        self._cfunc = cfunc
        self._keepalive = keepalive  # whatever owns the code (a JIT engine, a CDLL)
        var_slots = {v.name: j for j, v in enumerate(info.vars)}
        self._var_dtypes = [v.dtype for v in info.vars]
        self._param_names = tuple(p.name for p in info.params)
        self._buffers: list[_BufferSpec] = []
        self._scalars = []  # (argument index, var slot, name, converter)
        for k, p in enumerate(info.params):
            if p.kind == "buffer":
                self._buffers.append(_BufferSpec(k, len(self._buffers), p, var_slots))
            elif p.kind == "var":
                if p.name not in var_slots:
                    raise ValueError(f"FunctionInfo of {info.name}: var {p.name!r} not in vars")
                where = f"argument {p.name!r} of {info.name}"
                self._scalars.append((k, var_slots[p.name], where, _converter(p.dtype)))
            else:
                raise ValueError(f"FunctionInfo of {info.name}: unknown param kind {p.kind!r}")
        self._bound_by_dims = {}  # var slot -> converter, for range checks of shape vars
        for spec in self._buffers:
            for d in spec.dims:
                if isinstance(d, tuple):
                    self._bound_by_dims[d[1]] = _converter(info.vars[d[1]].dtype)
        bound = {s[1] for s in self._scalars} | set(self._bound_by_dims)
        self._unbound = [v.name for j, v in enumerate(info.vars) if j not in bound]
        self._buffer_array = ctypes.c_void_p * max(1, len(self._buffers))
        self._var_array = ctypes.c_int64 * max(1, len(info.vars))

    def __call__(self, *args) -> None:
        buffers, values = self.pack_arguments(args)
        rc = self._cfunc(buffers, values)
        if rc != 0:
            raise RuntimeError(f"{self.name} failed: the kernel returned error code {rc}")

    def __repr__(self) -> str:
        return f"<PackedFunc {self.name}({', '.join(self._param_names)})>"

    def pack_arguments(self, args):
        """Check `args` and return the (buffers, vars) ctypes arrays of the native call."""
        if len(args) != len(self._param_names):
            raise ValueError(
                f"{self.name} expects {len(self._param_names)} arguments "
                f"({', '.join(self._param_names)}), got {len(args)}"
            )
        values = [None] * len(self._var_dtypes)
        for k, slot, where, convert in self._scalars:
            values[slot] = convert(args[k], where)
        pointers = [0] * len(self._buffers)
        for spec in self._buffers:
            arg = args[spec.index]
            if type(arg) is NDArray and arg._dtype == spec.dtype:  # the fast, common case
                shape, pointer = arg._array.shape, arg._data_ptr
            else:
                shape, pointer = self._check_array(spec, arg)
            if shape != spec.static_shape:
                self._check_shape(spec, shape, values)
            pointers[spec.slot] = pointer
        if self._unbound:
            raise ValueError(
                f"{self.name}: the arguments do not determine the value of "
                f"{', '.join(repr(n) for n in self._unbound)}"
            )
        return self._buffer_array(*pointers), self._var_array(*values)

    def _check_array(self, spec: _BufferSpec, arg) -> tuple[tuple[int, ...], int]:
        """The shape and data pointer of a buffer argument, after its other checks."""
        if isinstance(arg, NDArray):
            if arg._dtype != spec.dtype:
                raise ValueError(self._where(spec) + f"expected {spec.dtype}, got {arg._dtype}")
            shape, pointer = arg._array.shape, arg._data_ptr
        elif isinstance(arg, np.ndarray):
            self._check_numpy(spec, arg)
            shape, pointer = arg.shape, arg.ctypes.data
        else:
            raise ArgumentTypeError(
                self._where(spec)
                + f"expected an NDArray or a numpy array, got {type(arg).__name__}"
            )
        return shape, pointer

    def _check_numpy(self, spec: _BufferSpec, arg: np.ndarray) -> None:
        dt = arg.dtype
        # ml_dtypes arrays (bfloat16, float8, int4, ...) are taken by their dtype's name
        if dt not in spec.np_dtypes and dt.name != spec.dtype:
            got = dt.name
            raise ValueError(self._where(spec) + f"expected {spec.dtype}, got {got}")
        flags = arg.flags
        if not flags.c_contiguous:
            raise ValueError(
                self._where(spec) + "the array is not C-contiguous (use np.ascontiguousarray)"
            )
        if not flags.aligned:
            raise ValueError(
                self._where(spec) + "the array data is not aligned to its element size"
            )
        if spec.written and not flags.writeable:
            raise ValueError(self._where(spec) + "the kernel writes it, but the array is read-only")

    def _check_shape(self, spec: _BufferSpec, shape, values) -> None:
        if len(shape) != spec.rank:
            self._shape_error(spec, shape, values)
        for pos, value in spec.const_dims:
            if shape[pos] != value:
                self._shape_error(spec, shape, values)
        for pos, slot in spec.var_dims:
            bound = values[slot]
            if bound is None:
                where = self._where(spec) + f"dimension {pos}"
                values[slot] = self._bound_by_dims[slot](shape[pos], where)  # range check
            elif bound != shape[pos]:
                self._shape_error(spec, shape, values)

    def _shape_error(self, spec: _BufferSpec, shape, values):
        parts = []
        for d in spec.dims:
            if isinstance(d, tuple):
                value = values[d[1]]
                parts.append(d[2] if value is None else f"{d[2]}={value}")
            else:
                parts.append(str(d))
        expected = "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"
        raise ValueError(self._where(spec) + f"expected shape {expected}, got {tuple(shape)}")

    def _where(self, spec: _BufferSpec) -> str:
        return f"argument {spec.name!r} of {self.name}: "
