"""tessera as an ONNX backend (`onnx.backend.base.Backend`), so that the official ONNX backend
test suite (`onnx.backend.test.BackendTest`) and any code written for that API run on tessera.

    from tessera.frontend import onnx_backend
    rep = onnx_backend.prepare(model, "CPU", target="c")     # a TesseraRep
    outputs = rep.run([x])                                   # numpy arrays, one per graph output

A model is compiled lazily, once per signature of its inputs (shapes and dtypes): dims that the
model leaves dynamic take the actual inputs' sizes. The target is a `prepare` keyword, else
`DEFAULT_TARGET`; the opt level likewise (`DEFAULT_OPT_LEVEL`).
"""

from __future__ import annotations

import re
from collections import namedtuple

import numpy as np
import onnx
from onnx import helper
from onnx.backend.base import Backend, BackendRep, Device, DeviceType

DEFAULT_TARGET = "llvm"
DEFAULT_OPT_LEVEL = 3


def _declared_shape(vi: onnx.ValueInfoProto):
    """The declared dims of a graph input (None where dynamic), or None if it has no shape."""
    t = vi.type.tensor_type
    if not vi.type.HasField("tensor_type") or not t.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim)


def _check_declared(vi, array: np.ndarray) -> None:
    declared = _declared_shape(vi)
    if declared is None:
        return
    fits = len(declared) == array.ndim and all(
        d is None or d == a for d, a in zip(declared, array.shape, strict=True)
    )
    if not fits:
        shown = tuple("?" if d is None else d for d in declared)
        raise ValueError(f"input {vi.name!r}: the model declares shape {shown}, got {array.shape}")


def _inputs_to_bind(message: str, free: dict[str, np.ndarray]) -> tuple[str, ...]:
    """The inputs a failed conversion needs as constants: the graph input its error names, or
    else (a value computed from inputs) every free integer input."""
    if "must be a constant" not in message:
        return ()
    named = re.search(r"graph input '([^']+)'", message)
    if named and named.group(1) in free:
        return (named.group(1),)
    integers = tuple(n for n, a in free.items() if a.dtype.kind in "iub")
    # else the scalars (a Range's float limits that a Loop's trip count is computed from)
    return integers or tuple(n for n, a in free.items() if a.size == 1)


class TesseraRep(BackendRep):
    """A prepared model: compiles per input signature, runs on numpy arrays."""

    def __init__(self, model: onnx.ModelProto, target: str, opt_level: int, config=None):
        self.model, self.target, self.opt_level = model, target, opt_level
        self.config = dict(config or {})  # PassContext config (e.g. {"codegen.jobs": 1})
        inits = {t.name for t in model.graph.initializer}
        self.inputs = [vi for vi in model.graph.input if vi.name not in inits]
        self.output_names = [vi.name for vi in model.graph.output]
        self._compiled: dict[tuple, object] = {}
        self._bound: dict[tuple, tuple[str, ...]] = {}  # input signature -> inputs bound
        self._layouts: dict[int, list] = {}  # id(compiled) -> its outputs' layout (convert_onnx)
        # id(compiled) -> its GraphModule, made once: a module's first run is watched from a
        # helper thread (Note [interrupting a run]) and allocates its executor's buffers, which
        # cost ~5 ms a call when every run made a fresh module (its runs are per thread, and
        # run() copies the outputs out)
        self._modules: dict[int, object] = {}

    def _feeds(self, inputs) -> dict[str, np.ndarray]:
        names = [vi.name for vi in self.inputs]
        if isinstance(inputs, dict):
            unknown = sorted(set(inputs) - set(names))
            if unknown:
                raise ValueError(f"the model has no input {unknown[0]!r} (inputs: {names})")
            feeds = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            inputs = list(inputs)
            if len(inputs) > len(names):
                raise ValueError(f"the model takes {len(names)} input(s), got {len(inputs)}")
            feeds = dict(zip(names, inputs, strict=False))
        missing = [n for n in names if n not in feeds]
        if missing:
            raise ValueError(f"input {missing[0]!r} is missing (inputs: {names})")
        return {n: _feed(v) for n, v in feeds.items()}

    def compiled(self, feeds: dict[str, np.ndarray]):
        """(compiled model, names of the inputs bound by value) for these inputs' shapes and
        dtypes, built on first use. Inputs that the model's shapes depend on (a Reshape's shape
        fed as an input) are bound to their values, which then join the cache key."""
        sig = tuple((n, _signature(a)) for n, a in feeds.items())
        bound = self._bound.get(sig, ())
        key = (sig, tuple(feeds[n].tobytes() for n in bound))
        if key not in self._compiled:
            lib, bound = self._build(feeds, bound)
            self._bound[sig] = bound
            key = (sig, tuple(feeds[n].tobytes() for n in bound))
            self._compiled[key] = lib
        return self._compiled[key], bound

    def _build(self, feeds, bound: tuple[str, ...]):
        """Convert and compile, binding more inputs by value while the conversion asks for it."""
        import tessera
        from tessera.frontend.onnx import convert_onnx
        from tessera.transform import PassContext

        for vi in self.inputs:
            if isinstance(feeds[vi.name], np.ndarray):
                _check_declared(vi, feeds[vi.name])
        while True:
            free = {n: a for n, a in feeds.items() if n not in bound}
            arrays = {n: a for n, a in free.items() if isinstance(a, np.ndarray)}
            try:
                mod, params, layout = convert_onnx(
                    self.model,
                    {n: _shape_of(a) for n, a in free.items()},
                    {n: a.dtype for n, a in arrays.items()},
                    input_values={n: feeds[n] for n in bound},
                )
                break
            except ValueError as e:
                more = _inputs_to_bind(str(e), arrays)
                if not more:
                    raise
                bound = (*bound, *more)
        with PassContext(opt_level=self.opt_level, config=self.config):
            lib = tessera.build(mod, target=self.target, params=params)
        self._layouts[id(lib)] = layout
        return lib, bound

    def run(self, inputs, **kwargs):
        """Run on `inputs` (a list in the order of the model's inputs, a dict by name, or one
        array); returns the outputs as numpy arrays, in the order of the graph's outputs."""
        from tessera.runtime import GraphModule, cpu

        feeds = self._feeds(inputs)
        lib, bound = self.compiled(feeds)
        m = self._modules.get(id(lib))
        if m is None:
            m = self._modules[id(lib)] = GraphModule(lib["default"](cpu(0)))
        for name, value in feeds.items():
            if name in bound or value is None:
                continue
            items = value if isinstance(value, list) else [value]
            for k, item in enumerate(items):
                key = f"{name}.{k}" if isinstance(value, list) else name
                m.set_input(key, np.require(item, requirements="C"))  # keeps rank 0
        m.run()
        flat = [_as_onnx(m.get_output(i)) for i in range(m.get_num_outputs())]
        outs = []
        for length in self._layouts[id(lib)]:  # a sequence: its elements are consecutive outputs
            if length is None:
                outs.append(flat.pop(0))
            elif length < 0:
                outs.append(None)
            else:
                outs.append([flat.pop(0) for _ in range(length)])
        names = [n if n.isidentifier() else f"output_{i}" for i, n in enumerate(self.output_names)]
        return namedtuple("Outputs", names, rename=True)(*outs)


class TesseraBackend(Backend):
    """The onnx.backend.base.Backend of tessera (CPU only)."""

    @classmethod
    def is_compatible(cls, model, device: str = "CPU", **kwargs) -> bool:
        return cls.supports_device(device)

    @classmethod
    def prepare(
        cls, model, device: str = "CPU", target=None, opt_level=None, config=None, **kwargs
    ):
        """Check `model` and return a TesseraRep; compiling waits for the first `run`.
        `target` and `opt_level` default to DEFAULT_TARGET and DEFAULT_OPT_LEVEL; `config` is
        the PassContext config of the build."""
        if not cls.supports_device(device):
            raise ValueError(f"tessera's ONNX backend runs on CPU, not {device!r}")
        if isinstance(model, bytes):
            model = onnx.load_from_string(model)
        if not isinstance(model, onnx.ModelProto):
            raise TypeError(f"prepare expects an onnx.ModelProto, got {type(model).__name__}")
        from tessera.frontend.onnx import _check_supported, _opsets

        _check_supported(model.graph, _opsets(model))  # unsupported ops fail at once
        target = DEFAULT_TARGET if target is None else target
        opt_level = DEFAULT_OPT_LEVEL if opt_level is None else opt_level
        return TesseraRep(model, target, opt_level, config)

    @classmethod
    def run_model(cls, model, inputs, device: str = "CPU", **kwargs):
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node, inputs, device: str = "CPU", outputs_info=None, **kwargs):
        """Run one NodeProto on `inputs` (list or dict by the node's input names)."""
        opset = kwargs.pop("opset_version", onnx.defs.onnx_opset_version())
        if isinstance(inputs, dict):
            arrays = [np.asarray(inputs[n]) for n in node.input if n]
        else:
            arrays = [np.asarray(a) for a in inputs]
        names = [n for n in node.input if n]
        if len(arrays) != len(names):
            raise ValueError(f"node {node.op_type} takes {len(names)} input(s), got {len(arrays)}")
        graph = helper.make_graph(
            [node],
            f"run_node_{node.op_type}",
            [_value_info(n, a) for n, a in zip(names, arrays, strict=True)],
            [helper.make_empty_tensor_value_info(o) for o in node.output if o],
        )
        domain = node.domain if node.domain not in ("", "ai.onnx") else ""
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid(domain, opset)])
        return cls.prepare(model, device, **kwargs).run(arrays)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        try:
            return Device(device).type == DeviceType.CPU
        except Exception:  # onnx raises on unknown device strings
            return False


def _as_onnx(out) -> np.ndarray:
    """An output as ONNX's numpy side holds it: bfloat16 as ml_dtypes' bfloat16 (the runtime
    gives its float32 values, which are exact)."""
    if out.dtype == "bfloat16":
        import ml_dtypes

        return out.numpy().astype(ml_dtypes.bfloat16)
    return out.numpy().copy()


def _feed(v):
    """An input as the backend holds it: an array, a list of arrays (a sequence) or None."""
    if v is None:
        return None
    if isinstance(v, list | tuple) and all(isinstance(x, np.ndarray) for x in v):
        return [np.asarray(x) for x in v]
    return np.asarray(v)


def _signature(v):
    if v is None:
        return None
    if isinstance(v, list):
        return tuple((x.shape, x.dtype.str) for x in v)
    return (v.shape, v.dtype.str)


def _shape_of(v):
    if v is None:
        return None
    return [x.shape for x in v] if isinstance(v, list) else v.shape


def _value_info(name: str, array: np.ndarray) -> onnx.ValueInfoProto:
    elem = helper.np_dtype_to_tensor_dtype(array.dtype)
    return helper.make_tensor_value_info(name, elem, array.shape)


prepare = TesseraBackend.prepare
run_model = TesseraBackend.run_model
run_node = TesseraBackend.run_node
supports_device = TesseraBackend.supports_device

__all__ = [
    "DEFAULT_OPT_LEVEL",
    "DEFAULT_TARGET",
    "TesseraBackend",
    "TesseraRep",
    "prepare",
    "run_model",
    "run_node",
    "supports_device",
]
