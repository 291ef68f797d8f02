"""Read a `.tflite` flatbuffer into plain Python: tensors (shape, dtype, constant data,
quantization, sparsity) and operators (op name, inputs, outputs, builtin options as a dict).

    model = read_model(open("model.tflite", "rb").read())
    for op in model.operators:
        print(op.name, op.inputs, op.outputs, op.options)    # "CONV_2D", [0, 1, 2], [3], {...}

It uses the `tflite` package (the generated flatbuffer classes of the TFLite schema), an
optional dependency installed by scripts/setup.d/22-tflite.sh (`pip install tessera[tflite]`).
Every subgraph is read; subgraph 0 is the main graph (the others are what CALL_ONCE, WHILE or
IF call).
"""

from __future__ import annotations

import inspect
import struct
from dataclasses import dataclass, field

import numpy as np


def _tflite():
    try:
        import tflite
    except ImportError:
        raise ImportError(
            "reading .tflite files needs the 'tflite' package: pip install 'tessera[tflite]'"
        ) from None
    return tflite


# TensorType enum value -> numpy dtype (the schema's numbering)
_DTYPES = {0: "float32", 1: "float16", 2: "int32", 3: "uint8", 4: "int64", 6: "bool", 7: "int16",
           9: "int8", 10: "float64", 12: "uint64", 13: "resource", 15: "uint32",
           16: "uint16"}  # fmt: skip


@dataclass
class Quantization:
    """real = scale * (q - zero_point); per channel along `axis` when scale has several values."""

    scale: np.ndarray
    zero_point: np.ndarray
    axis: int

    @property
    def per_channel(self) -> bool:
        return self.scale.size > 1


@dataclass
class Tensor:
    index: int
    name: str
    shape: tuple[int, ...]
    dtype: str
    data: np.ndarray | None = None  # constant contents (None for activations)
    quant: Quantization | None = None
    sparsity: object = None  # tflite.SparsityParameters of a sparse constant


@dataclass
class Operator:
    index: int
    name: str  # the builtin op name ("CONV_2D") or "CUSTOM:<code>"
    inputs: list[int]  # -1 marks a missing optional input
    outputs: list[int]
    options: dict = field(default_factory=dict)
    custom_options: bytes = b""  # a custom op's raw options (their format is the op's own)


@dataclass
class Subgraph:
    tensors: list[Tensor]
    operators: list[Operator]
    inputs: list[int]
    outputs: list[int]


@dataclass
class Model(Subgraph):
    """Subgraph 0 (the main graph), with every subgraph in `subgraphs` (0 included)."""

    version: int = 3
    description: str = ""
    subgraphs: list[Subgraph] = field(default_factory=list)


def _op_names(tflite) -> dict[int, str]:
    ops = tflite.BuiltinOperator
    return {v: k for k, v in vars(ops).items() if not k.startswith("_") and isinstance(v, int)}


def _options_classes(tflite) -> dict[int, type]:
    kinds = tflite.BuiltinOptions
    out = {}
    for name, value in vars(kinds).items():
        if isinstance(value, int) and value and hasattr(tflite, name):
            out[value] = getattr(tflite, name)
    return out


_SKIP = {"Init", "GetRootAs"}


def _options_dict(cls, table) -> dict:
    """Every field of an options table: scalars, and vectors as numpy arrays."""
    obj = cls()
    obj.Init(table.Bytes, table.Pos)
    out = {}
    for name, fn in inspect.getmembers(cls, inspect.isfunction):
        if name.startswith(("_", "GetRootAs")) or name in _SKIP:
            continue
        if name.endswith(("AsNumpy", "Length", "IsNone", "BufferHasIdentifier")):
            continue
        if hasattr(cls, name + "AsNumpy"):
            v = getattr(obj, name + "AsNumpy")()
            out[name] = np.asarray(v) if not isinstance(v, int) else np.zeros(0, np.int32)
        elif len(inspect.signature(fn).parameters) == 1:
            out[name] = getattr(obj, name)()
    return out


def _quantization(t) -> Quantization | None:
    q = t.Quantization()
    if q is None or q.ScaleLength() == 0:
        return None
    scale = np.asarray(q.ScaleAsNumpy(), np.float32)
    zp = np.asarray(q.ZeroPointAsNumpy(), np.int64) if q.ZeroPointLength() else None
    if zp is None or zp.size == 0:
        zp = np.zeros(scale.shape, np.int64)
    return Quantization(scale, zp, q.QuantizedDimension())


def _buffer_data(model, buf: bytes, index: int) -> np.ndarray | None:
    b = model.Buffers(index)
    if b is None:
        return None
    if b.Offset() > 1:  # large models keep buffers after the flatbuffer (offset, size)
        return np.frombuffer(buf, np.uint8, count=b.Size(), offset=b.Offset())
    if b.DataLength() == 0:
        return None
    return b.DataAsNumpy()


def _tensor(model, buf: bytes, i: int, t) -> Tensor:
    code = t.Type()
    if code not in _DTYPES:
        raise ValueError(f"tensor {i} ({t.Name().decode()!r}) has an unsupported type {code}")
    dtype = _DTYPES[code]
    shape = tuple(int(d) for d in t.ShapeAsNumpy()) if t.ShapeLength() else ()
    if dtype == "resource":  # a handle of a variable (VAR_HANDLE), no data
        return Tensor(i, t.Name().decode(errors="replace"), shape, dtype)
    raw = _buffer_data(model, buf, t.Buffer())
    data = None
    sparsity = t.Sparsity()
    if raw is not None:
        data = np.frombuffer(raw.tobytes(), np.dtype(dtype).newbyteorder("<"))
        data = data.astype(dtype)
        if sparsity is None:
            if data.size != int(np.prod(shape)):
                raise ValueError(
                    f"tensor {i} ({t.Name().decode()!r}): its buffer holds {data.size} values, "
                    f"its shape {list(shape)} needs {int(np.prod(shape))}"
                )
            data = data.reshape(shape)
    return Tensor(i, t.Name().decode(errors="replace"), shape, dtype, data, _quantization(t),
                  sparsity)  # fmt: skip


def read_model(buffer) -> Model:
    """Parse a .tflite flatbuffer (bytes); malformed input raises ValueError."""
    tflite = _tflite()
    buf = bytes(buffer)
    if len(buf) < 8 or buf[4:8] != b"TFL3":
        raise ValueError(
            "not a TFLite model: the file identifier at bytes 4..8 is "
            f"{buf[4:8]!r}, expected b'TFL3'"
        )
    try:
        return _read(tflite, buf)
    except (
        IndexError,
        ValueError,
        TypeError,
        AttributeError,
        UnicodeDecodeError,
        struct.error,
    ) as e:
        if isinstance(e, ValueError) and str(e).startswith(("tensor", "operator")):
            raise
        raise ValueError(f"malformed TFLite flatbuffer: {type(e).__name__}: {e}") from None


def _read(tflite, buf: bytes) -> Model:
    m = tflite.Model.GetRootAsModel(buf, 0)
    if m.SubgraphsLength() < 1:
        raise ValueError("malformed TFLite flatbuffer: the model has no subgraph")
    names, option_classes = _op_names(tflite), _options_classes(tflite)
    subgraphs = [
        _subgraph(m, buf, m.Subgraphs(k), names, option_classes) for k in range(m.SubgraphsLength())
    ]
    main = subgraphs[0]
    description = (m.Description() or b"").decode(errors="replace")
    return Model(main.tensors, main.operators, main.inputs, main.outputs, m.Version(),
                 description, subgraphs)  # fmt: skip


def _subgraph(m, buf: bytes, g, names, option_classes) -> Subgraph:
    tensors = [_tensor(m, buf, i, g.Tensors(i)) for i in range(g.TensorsLength())]
    operators = []
    for k in range(g.OperatorsLength()):
        op = g.Operators(k)
        if op.OpcodeIndex() >= m.OperatorCodesLength():
            raise ValueError(f"operator {k} has opcode index {op.OpcodeIndex()} out of range")
        code = m.OperatorCodes(op.OpcodeIndex())
        builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
        name = names.get(builtin, f"BUILTIN_{builtin}")
        if name == "CUSTOM":
            name = "CUSTOM:" + (code.CustomCode() or b"?").decode(errors="replace")
        options = {}
        table = op.BuiltinOptions()
        if table is not None and op.BuiltinOptionsType() in option_classes:
            options = _options_dict(option_classes[op.BuiltinOptionsType()], table)
        ins = [int(i) for i in op.InputsAsNumpy()] if op.InputsLength() else []
        outs = [int(i) for i in op.OutputsAsNumpy()] if op.OutputsLength() else []
        for i in ins + outs:
            if i >= len(tensors):
                raise ValueError(f"operator {k} ({name}) uses tensor {i}, which does not exist")
        custom = op.CustomOptionsAsNumpy().tobytes() if op.CustomOptionsLength() else b""
        operators.append(Operator(k, name, ins, outs, options, custom))
    inputs = [int(i) for i in g.InputsAsNumpy()] if g.InputsLength() else []
    outputs = [int(i) for i in g.OutputsAsNumpy()] if g.OutputsLength() else []
    return Subgraph(tensors, operators, inputs, outputs)


__all__ = ["Model", "Operator", "Quantization", "Subgraph", "Tensor", "read_model"]
