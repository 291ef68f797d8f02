"""TFLite frontend: a `.tflite` flatbuffer -> a graph IRModule and its params.

    mod, params = from_tflite(open("model.tflite", "rb").read())

TFLite graphs are NHWC; tessera's convolutions and pools are NCHW. Each tensor is kept in the
layouts it has been asked for (Note [lazy layouts]): a convolution asks for its input in NCHW
and leaves its output in NCHW, elementwise ops and activations work in whichever layout their
input has, and an op that needs TFLite's own layout (a reshape, a slice) gets a transpose back.
So a chain of convolutions, adds and activations runs without transposes between them, and the
layout passes then decide what runs blocked (NCHW[x]c).

Quantized tensors (int8/uint8/int16 with scales and zero points, per tensor or per channel)
keep their integer dtypes. Convolutions, fully connected, ADD/SUB/MUL, average pooling and
requantization follow TFLite's integer kernels bit for bit (tflite_quant.py); other ops run as
dequantize -> float op -> quantize (Note [quantized as float]). Graph inputs and outputs
keep TFLite's names (characters other than letters, digits, `_` and `.` become `_`), shapes
(NHWC) and dtypes. Every call's span is the TFLite operator, "<index>:<OP_NAME>".
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import numpy as np

from tessera.frontend.params import PARAM_MIN_ELEMENTS, with_params
from tessera.frontend.tflite_reader import Model, Operator, Quantization, read_model
from tessera.graph.builder import GraphBuilder, rename_values
from tessera.graph.ir import Constant, Function, Value
from tessera.ir.module import IRModule

# Note [lazy layouts]: env[tensor] maps (layout, real) to a graph value, layout "nhwc" (the
# tensor as TFLite stores it, any rank) or "nchw" (rank 4, channels second), real=True for the
# float view of a quantized tensor. `get` makes a missing entry from one that exists with one
# transpose or one dequantize; a converter states in `set` which layout its result is in.
#
# Note [quantized as float]: a converter always computes in float on the real values of its
# inputs (the dequantized views). When the output tensor is quantized, `set` quantizes the
# result (round half away from zero, as TFLite's Quantize; clamp to the type's range), and the
# float view of that tensor is dequantize(quantize(result)), as the next TFLite kernel sees it.
# Integer kernels requantize with a fixed-point multiplier instead, so results may differ by
# one quantization step where a value lies within float rounding of a half step.


class UnsupportedOpError(ValueError):
    """The model uses TFLite ops that tessera cannot convert; `ops` lists (index, name, why)."""

    def __init__(self, ops: list[tuple[int, str, str]]):
        self.ops = ops
        kinds = sorted({name for _, name, _ in ops})
        lines = [f"  operator {i}: {name}{why}" for i, name, why in ops]
        super().__init__(
            f"the model uses {len(ops)} operator(s) of {len(kinds)} unsupported type(s) "
            f"({', '.join(kinds)}):\n" + "\n".join(lines)
        )


def _clean(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.]", "_", name) or "t"


class Context(GraphBuilder):
    """A GraphBuilder plus the TFLite model, its tensors' values and their layouts."""

    def __init__(self, model: Model):
        super().__init__(fold=True)
        self.model = model
        self.env: dict[int, dict[tuple[str, bool], Value]] = {}
        self.op: Operator | None = None

    # -- tensors ------------------------------------------------------------------------------

    def tensor(self, i: int):
        return self.model.tensors[i]

    def quant(self, i: int) -> Quantization | None:
        t = self.tensor(i)
        return t.quant if t.quant is not None and t.dtype in _INT_TYPES else None

    def shape(self, i: int) -> tuple[int, ...]:
        return self.tensor(i).shape

    def is_const(self, i: int) -> bool:
        return any(isinstance(v, Constant) for v in self.env.get(i, {}).values())

    def const_value(self, i: int, what: str) -> np.ndarray:
        v = self.get(i, real=False)
        if not isinstance(v, Constant):
            raise ValueError(f"input {what!r} must be a constant")
        return v.array

    def has(self, i: int, layout: str) -> bool:
        return any(key[0] == layout for key in self.env.get(i, {}))

    def get(self, i: int, layout: str = "nhwc", real: bool = True) -> Value:
        """Tensor i in `layout`; real=True: its float view when it is quantized."""
        if i < 0:
            raise ValueError("a required input is missing")
        entries = self.env.get(i)
        if entries is None:
            raise ValueError(f"tensor {i} ({self.tensor(i).name!r}) is used before it is computed")
        key = (layout, bool(real and self.quant(i) is not None))
        if key in entries:
            return entries[key]
        other = ("nchw" if layout == "nhwc" else "nhwc", key[1])
        with self.named_after(i):
            v = self._make(i, layout, key, other, entries)
        entries[key] = v
        return v

    def _make(self, i, layout, key, other, entries) -> Value:
        if other in entries:
            axes = (0, 3, 1, 2) if layout == "nchw" else (0, 2, 3, 1)
            return self.call("transpose", entries[other], axes=axes)
        if key[1]:
            return self.dequantize(self.get(i, layout, real=False), self.quant(i), layout)
        raise ValueError(f"tensor {i} has no value in layout {layout}")

    @contextlib.contextmanager
    def named_after(self, i: int):
        """Values made inside are named after tensor i (a weight's reshapes and transposes)."""
        hint, self.name_hint = self.name_hint, _clean(self.tensor(i).name)
        try:
            yield
        finally:
            self.name_hint = hint

    def weight(self, i: int, axes) -> Value:
        """Input i (a weight) transposed by `axes`, named after the tensor."""
        with self.named_after(i):
            return self.call("transpose", self.get(i), axes=axes)

    def layout_of(self, *ins: int) -> str:
        """nchw when every rank-4 input among `ins` that is not a constant has an NCHW value."""
        ranked = [i for i in ins if i >= 0 and len(self.shape(i)) == 4 and not self.is_const(i)]
        return "nchw" if ranked and all(self.has(i, "nchw") for i in ranked) else "nhwc"

    def set(self, i: int, value: Value, layout: str = "nhwc") -> None:
        """The result of the op for output tensor i, computed in float (or the raw value for an
        unquantized tensor); quantized here when the tensor is (Note [quantized as float])."""
        q = self.quant(i)
        dtype = self.tensor(i).dtype
        if q is not None and value.type.dtype.is_float:
            value = self.quantize(value, q, dtype, layout)
        elif str(value.type.dtype) != dtype and not (dtype == "float16"):
            value = self.call("cast", value, dtype=dtype)
        self.env[i] = {(layout, False): value}

    # -- quantization -------------------------------------------------------------------------

    def per_axis(self, values: np.ndarray, q: Quantization, ndim: int, layout: str):
        """Scales or zero points shaped to broadcast along the quantized axis (a scalar when
        there is one value); the axis moves with the layout (NHWC axis k is NCHW's (0,2,3,1)[k])."""
        if values.size == 1:
            return values.reshape(())
        axis = q.axis if layout == "nhwc" or ndim != 4 else (0, 2, 3, 1)[q.axis]
        shape = [1] * ndim
        shape[axis] = values.size
        return values.reshape(shape)

    def dequantize(self, x: Value, q: Quantization, layout: str = "nhwc") -> Value:
        nd = x.type.ndim
        zp = self.per_axis(q.zero_point.astype(np.float32), q, nd, layout)
        scale = self.per_axis(q.scale.astype(np.float32), q, nd, layout)
        y = self.call("cast", x, dtype="float32")
        if np.any(zp != 0):
            y = self.call("subtract", y, self.const(zp))
        return self.call("multiply", y, self.const(scale))

    def quantize(self, x: Value, q: Quantization, dtype: str, layout: str = "nhwc") -> Value:
        nd = x.type.ndim
        scale = self.per_axis(q.scale.astype(np.float32), q, nd, layout)
        zp = self.per_axis(q.zero_point.astype(np.float32), q, nd, layout)
        y = self.call("divide", x, self.const(scale))
        # std::round: half away from zero
        half = self.call(
            "floor", self.call("add", self.call("abs", y), self.const(np.float32(0.5)))
        )
        y = self.call("multiply", self.call("sign", y), half)
        if np.any(zp != 0):
            y = self.call("add", y, self.const(zp))
        info = np.iinfo(dtype)
        y = self.call("clip", y, a_min=float(info.min), a_max=float(info.max))
        return self.call("cast", y, dtype=dtype)


_INT_TYPES = ("int8", "uint8", "int16", "int32", "int64")

# op name -> converter(ctx, op); filled by tessera.frontend.tflite_ops
CONVERTERS: dict[str, object] = {}


def tflite_op(*names: str):
    """Register a converter for TFLite builtin ops `names`."""

    def register(fn):
        for n in names:
            CONVERTERS[n] = fn
        return fn

    return register


def _check_supported(model: Model) -> None:
    from tessera.frontend import tflite_ops, tflite_state  # noqa: F401  (register converters)

    missing = []
    for op in model.operators:
        if op.name not in CONVERTERS:
            why = " (a custom op)" if op.name.startswith("CUSTOM:") else ""
            missing.append((op.index, op.name, why))
    if missing:
        raise UnsupportedOpError(missing)


def _load(buffer) -> bytes:
    if isinstance(buffer, (str, Path)):
        try:
            return Path(buffer).read_bytes()
        except OSError as e:
            raise ValueError(
                f"cannot read TFLite model {str(buffer)!r}: {e.strerror or e}"
            ) from None
    if isinstance(buffer, (bytes, bytearray, memoryview)):
        return bytes(buffer)
    raise TypeError(f"from_tflite expects the model's bytes or a path, got {type(buffer).__name__}")


def from_tflite(buffer, shape_dict: dict | None = None, outputs=None):
    """Convert a TFLite model (its bytes, or a path) to (IRModule with function "main",
    params: dict[str, ndarray]). `shape_dict` ({input name: shape}) fixes inputs whose stored
    shape has unknown (-1) dims. `outputs` (tensor names) returns those tensors instead of the
    model's outputs (to look inside a model). A model with variables gets an input per variable
    and an output `<name>_next` after the others; `initial_state` gives their first values."""
    func, params, _ = _convert_model(buffer, shape_dict, outputs)
    return IRModule({"main": func}), params


def initial_state(buffer) -> dict[str, np.ndarray]:
    """The first values of a streaming model's variables, by the name of their input in the
    function from_tflite makes (an empty dict for a model without variables)."""
    return _convert_model(buffer, None, None)[2]


def _convert_model(buffer, shape_dict, outputs):
    model = read_model(_load(buffer))
    _check_supported(model)
    wanted = _output_indices(model, outputs)
    ctx = Context(model)
    shape_dict = dict(shape_dict or {})
    names: dict[int, str] = {}
    for i in model.inputs:
        t = model.tensors[i]
        shape = tuple(shape_dict.pop(t.name, t.shape))
        if any(d < 0 for d in shape):
            raise ValueError(f"input {t.name!r} has an unknown dim {list(shape)}: give shape_dict")
        ctx.env[i] = {("nhwc", False): ctx.param(_clean(t.name), shape, t.dtype)}
    if shape_dict:
        known = ", ".join(model.tensors[i].name for i in model.inputs)
        raise ValueError(f"shape_dict names {sorted(shape_dict)[0]!r}, not an input ({known})")
    for t in model.tensors:
        if t.data is not None and t.sparsity is None and t.index not in ctx.env:
            ctx.env[t.index] = {("nhwc", False): ctx.const(t.data, name=_clean(t.name))}
    for op in model.operators:
        _convert(ctx, op)
    outputs = []
    for i in wanted:
        v = ctx.get(i, "nhwc", real=False)
        outputs.append(v)
        names.setdefault(id(v), _clean(model.tensors[i].name))
    from tessera.frontend.tflite_state import state_outputs

    state, state_names, initial = state_outputs(ctx)
    outputs += state
    for v, name in zip(state, state_names, strict=True):
        names.setdefault(id(v), name)
    func = ctx.finish(outputs, names=names)
    func, params = _constants_to_params(func)
    func.verify()
    return func, params, initial


def _output_indices(model: Model, names) -> list[int]:
    if names is None:
        return list(model.outputs)
    index = {t.name: t.index for t in model.tensors}
    unknown = [n for n in names if n not in index]
    if unknown:
        raise ValueError(f"the model has no tensor named {unknown[0]!r}")
    return [index[n] for n in names]


def _convert(ctx: Context, op: Operator) -> None:
    ctx.op = op
    ctx.span = (f"{op.index}:{op.name}",)
    out = op.outputs[0] if op.outputs else None
    ctx.name_hint = _clean(ctx.tensor(out).name) if out is not None else op.name.lower()
    try:
        CONVERTERS[op.name](ctx, op)
    except (ValueError, TypeError, NotImplementedError) as e:
        raise ValueError(f"operator {op.index} ({op.name}): {e}") from None
    for i in op.outputs:
        if i not in ctx.env:
            raise ValueError(f"operator {op.index} ({op.name}): output tensor {i} not computed")


def _constants_to_params(func: Function):
    """Constants larger than PARAM_MIN_ELEMENTS become parameters (after the inputs). A weight
    whose transposed copy took the name `w_1` (the original `w` is no longer used) gets `w`."""
    big = [c for c in func.constants if c.array.size > PARAM_MIN_ELEMENTS]
    keep = [c for c in func.constants if c.array.size <= PARAM_MIN_ELEMENTS]
    used = {p.name for p in func.params} | {c.name for c in keep}
    used |= {v.name for call in func.body for v in call.outputs}
    params, mapping = {}, {}
    for c in big:
        base = re.sub(r"_\d+$", "", c.name)
        name = base if base not in used else c.name
        used.add(name)
        mapping[id(c)] = Value(name, c.type)
        params[name] = np.array(c.array)
    new = with_params(func, mapping, keep)
    return rename_values(new, {id(c): re.sub(r"_\d+$", "", c.name) for c in keep}), params


__all__ = ["Context", "UnsupportedOpError", "from_tflite", "initial_state", "tflite_op"]
