"""ONNX frontend: an ONNX ModelProto -> a graph IRModule and its params.

    mod, params = from_onnx(onnx.load("resnet50.onnx"), {"data": (1, 3, 224, 224)})

Steps: check the model and list every node without a converter (one UnsupportedOpError for
all of them); bind the inputs' shapes (dynamic dims from `shape_dict`); convert the nodes in
topological order with the converters of the `onnx_*` modules imported below; every call
made for node N has the span (N.name or N.output[0],). A node whose inputs are all known is
evaluated at once (shape subgraphs fold away). Initializers, and any constant larger than
`PARAM_MIN_ELEMENTS`, become function parameters returned in `params`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

# Importing the converter modules registers their converters.
from tessera.frontend import (  # noqa: F401
    onnx_attention,
    onnx_bits,
    onnx_compose,
    onnx_contrib,
    onnx_control,
    onnx_dynamic,
    onnx_image,
    onnx_loss,
    onnx_math,
    onnx_nn,
    onnx_quant,
    onnx_random,
    onnx_rnn,
    onnx_scatter,
    onnx_sequence,
    onnx_shape,
    onnx_signal,
    onnx_training,
    onnx_trees,
)
from tessera.frontend.onnx_checks import check_int_attrs, check_nodes, check_opsets
from tessera.frontend.onnx_qdq import fuse_qdq
from tessera.frontend.onnx_registry import ConvertContext, NodeError, Stream, find_converter
from tessera.frontend.onnx_sequence import Seq, is_value_or_seq
from tessera.frontend.params import PARAM_MIN_ELEMENTS, constants_to_params  # noqa: F401
from tessera.graph.ir import Constant, ShapeConstant, Value
from tessera.ir.module import IRModule
from tessera.runtime.run_counter import STREAM_PARAM


class UnsupportedOpError(ValueError):
    """A model uses ONNX ops that tessera cannot convert; `nodes` lists (name, op_type)."""

    def __init__(self, nodes: list[tuple[str, str, str]]):
        self.nodes = nodes
        types = sorted({op for _, op, _ in nodes})
        lines = [f"  {name or '<unnamed>'}: {op}{detail}" for name, op, detail in nodes]
        super().__init__(
            f"the model uses {len(nodes)} node(s) of {len(types)} unsupported op type(s) "
            f"({', '.join(types)}):\n" + "\n".join(lines)
        )


def _opsets(model: onnx.ModelProto) -> dict[str, int]:
    out = {}
    for imp in model.opset_import:
        out["" if imp.domain == "ai.onnx" else imp.domain] = imp.version
    if "" not in out:
        out[""] = 1 if model.opset_import else onnx.defs.onnx_opset_version()
    return out


def _check_supported(graph: onnx.GraphProto, opsets: dict[str, int]) -> None:
    missing = []
    for node in graph.node:
        domain = "" if node.domain == "ai.onnx" else node.domain
        if domain not in opsets:
            missing.append((node.name, node.op_type, f" (domain {domain!r} is not imported)"))
            continue
        if find_converter(domain, node.op_type, opsets[domain]) is None:
            where = f" (domain {domain})" if domain else f" (opset {opsets[domain]})"
            missing.append((node.name, node.op_type, where))
    if missing:
        raise UnsupportedOpError(missing)


def _load(model) -> onnx.ModelProto:
    if isinstance(model, (str, Path)):
        try:
            return onnx.load(str(model))
        except Exception as e:  # onnx raises DecodeError, OSError, ...
            raise ValueError(f"cannot read ONNX model {str(model)!r}: {e}") from None
    if isinstance(model, bytes):
        try:
            return onnx.load_from_string(model)
        except Exception as e:
            raise ValueError(f"cannot parse ONNX model bytes: {e}") from None
    if not isinstance(model, onnx.ModelProto):
        raise TypeError(
            f"from_onnx expects an onnx.ModelProto or a path, got {type(model).__name__}"
        )
    return model


def _input_type(vi: onnx.ValueInfoProto, shape_dict: dict, dtype, dims: dict | None = None):
    """(shape, dtype) of an input. A dynamic dim (an ONNX dim_param, or a dim without a value)
    becomes a symbolic dim: one `dim_var` per distinct name in `dims` (Note [symbolic dims] in
    graph/dims.py), unless shape_dict gives it a size."""
    dims = {} if dims is None else dims
    t = vi.type.tensor_type
    if not vi.type.HasField("tensor_type"):
        raise ValueError(
            f"input {vi.name!r} is not a tensor (sequences and maps are not supported)"
        )
    if t.elem_type:
        elem = _elem_type(vi.name, t.elem_type)
    else:
        elem = np.dtype(dtype.get(vi.name, "float32") if isinstance(dtype, dict) else dtype)
    model_dims = list(t.shape.dim) if t.HasField("shape") else None
    if vi.name in shape_dict:
        return _given_shape(vi.name, shape_dict[vi.name], model_dims, dims), elem
    if model_dims is None:
        raise ValueError(f"input {vi.name!r} has no shape: give it in shape_dict")
    shape = []
    for i, d in enumerate(model_dims):
        if d.HasField("dim_value") and d.dim_value < 0:
            raise ValueError(
                f"input {vi.name!r} has dim {i} = {d.dim_value}: a dim is >= 0 (or a name for "
                "a dynamic dim)"
            )
        if d.HasField("dim_value"):
            shape.append(d.dim_value)
        else:
            shape.append(_symbolic_dim(vi.name, i, d.dim_param or None, dims))
    return tuple(shape), elem


def _dim_name(text: str) -> str:
    """An ONNX dim_param as a dim variable's name (an identifier)."""
    name = "".join(c if c.isalnum() or c == "_" else "_" for c in text)
    return name if name.isidentifier() else f"d_{name}"


def _symbolic_dim(input_name: str, i: int, name, dims: dict, lo=None, hi=None):
    """The dim variable `name` (made on first use, with its bounds; a later use may not give
    other bounds), or a fresh one for a dim without a name."""
    from tessera.graph.dims import dim_bounds, dim_var

    key = _dim_name(name) if name else _dim_name(f"{input_name}_{i}")
    if key not in dims:
        dims[key] = dim_var(key, 1 if lo is None else lo, hi)
    elif lo is not None or hi is not None:
        old = dim_bounds(dims[key])
        if old != (1 if lo is None else int(lo), None if hi is None else int(hi)):
            raise ValueError(
                f"shape_dict gives the dim {key!r} the bounds ({lo}, {hi}), "
                f"but another use gave it {old}"
            )
    return dims[key]


def _elem_type(name: str, elem_type: int) -> np.dtype:
    type_name = onnx.TensorProto.DataType.Name(elem_type) if elem_type in _ONNX_TYPES else None
    try:
        elem = helper.tensor_dtype_to_np_dtype(elem_type)
    except (KeyError, ValueError):
        elem = None
    if elem is None or elem.kind in "OUSc":
        what = type_name.lower() if type_name else f"elem_type {elem_type}"
        raise ValueError(
            f"input {name!r} is a tensor of {what}: tessera compiles tensors of numbers and "
            "booleans only"
        )
    return elem


_ONNX_TYPES = set(onnx.TensorProto.DataType.values())


def _given_shape(name: str, shape, model_dims=None, dims: dict | None = None) -> tuple:
    """A shape from shape_dict, or a clear error naming the input. Each dim is an int >= 0, a
    name (a symbolic dim), (name, min, max) (a symbolic dim with bounds; max None: unbounded),
    or None (the model's own dim: its size, or its dim_param as a symbolic dim)."""
    dims = {} if dims is None else dims
    try:
        given = tuple(shape)
    except TypeError:
        raise ValueError(f"shape_dict[{name!r}] is not a shape: {shape!r}") from None
    if model_dims is not None and len(model_dims) != len(given) and None in given:
        raise ValueError(
            f"shape_dict[{name!r}] = {shape!r} keeps model dims (None) but the model's input "
            f"has {len(model_dims)} dims"
        )
    out = []
    for i, d in enumerate(given):
        if d is None and model_dims is not None:
            m = model_dims[i]
            if m.HasField("dim_value"):
                out.append(int(m.dim_value))
            else:
                out.append(_symbolic_dim(name, i, m.dim_param or None, dims))
        elif isinstance(d, str):
            out.append(_symbolic_dim(name, i, d, dims))
        elif isinstance(d, tuple | list) and len(d) == 3 and isinstance(d[0], str | None):
            dim_name, lo, hi = d
            if dim_name is None and model_dims is not None:
                dim_name = model_dims[i].dim_param or None
            ok = _is_size(lo) and (hi is None or _is_size(hi)) and (hi is None or hi >= lo)
            if not ok:
                raise ValueError(
                    f"shape_dict[{name!r}] dim {i} = {d!r}: bounds are (name, min, max) with "
                    "0 <= min <= max (max None: unbounded)"
                )
            out.append(_symbolic_dim(name, i, dim_name, dims, int(lo), hi))
        elif _is_size(d):
            out.append(int(d))
        else:
            raise ValueError(
                f"shape_dict[{name!r}] = {shape!r}: every dim must be an int >= 0, a name, "
                "(name, min, max) or None"
            )
    return tuple(out)


def _is_size(d) -> bool:
    return not isinstance(d, bool) and isinstance(d, int | np.integer) and d >= 0


def _attributes(node: onnx.NodeProto) -> dict:
    attrs = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)  # a subgraph stays a GraphProto (Scan's body)
        if isinstance(v, bytes):
            v = v.decode()
        elif isinstance(v, onnx.TensorProto):
            v = numpy_helper.to_array(v)
        elif isinstance(v, list):
            v = tuple(x.decode() if isinstance(x, bytes) else x for x in v)
        attrs[a.name] = v
    return attrs


def _uses(node: onnx.NodeProto) -> set[str]:
    """The names a node reads: its inputs and what its subgraphs take from the outer scope."""
    names = set(node.input)
    for a in node.attribute:
        for g in [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs):
            inner = {vi.name for vi in g.input} | {t.name for t in g.initializer}
            inner |= {o for n in g.node for o in n.output}
            names |= {i for n in g.node for i in _uses(n)} - inner
    return names


def _toposort(graph: onnx.GraphProto, known: set[str]) -> list[onnx.NodeProto]:
    pending, order = list(graph.node), []
    available = set(known) | {""}
    uses = {id(n): _uses(n) for n in pending}
    while pending:
        ready = [n for n in pending if uses[id(n)] <= available]
        if not ready:
            n = pending[0]
            missing = sorted(uses[id(n)] - available)
            raise ValueError(
                f"node {n.name!r} ({n.op_type}) uses {missing[0]!r}, which no input, initializer "
                "or node output defines (or the graph has a cycle)"
            )
        ids = {id(n) for n in ready}
        pending = [n for n in pending if id(n) not in ids]
        order.extend(ready)
        available.update(o for n in ready for o in n.output)
    return order


def _convert_node(b: ConvertContext, node, env: dict, opset: int) -> None:
    domain = "" if node.domain == "ai.onnx" else node.domain
    fn = find_converter(domain, node.op_type, opset)
    label = f"node {node.name or node.output[0]!r} ({node.op_type}, opset {opset})"
    b.opset, b.num_outputs, b.node_name = opset, len(node.output), node.name
    b.env = env  # the names a subgraph of this node sees
    b.name_hint = next((o for o in node.output if o), node.name or node.op_type)
    b.span = (node.name or next((o for o in node.output if o), node.op_type),)
    inputs = []
    try:
        inputs = [env[i] if i else None for i in node.input]
        for v in inputs:
            if id(v) in b.partial_rows:
                why = b.partial_rows[id(v)]
                raise NodeError(f"reads {why}: tessera supports that only as a graph output")
        attrs = _attributes(node)
        check_int_attrs(attrs, node.op_type)
        out = fn(b, *inputs, **attrs)
    except TypeError as e:
        if str(e).startswith("cannot use the symbolic expression"):  # a rule's int-only test
            dims = _symbolic_dims_of(inputs)
            raise ValueError(
                f"{label}: its conversion or type rule cannot take the symbolic dim(s) {dims} "
                f"of its inputs ({e}); give them sizes in shape_dict"
            ) from None
        raise ValueError(f"{label}: {e}") from None
    except (NodeError, ValueError, NotImplementedError) as e:
        raise ValueError(f"{label}: {e}") from None
    except (LookupError, ArithmeticError, AttributeError, AssertionError) as e:
        # a converter that trips on inputs it did not foresee: still one clear error, with
        # the node; "internal error" asks for a report (the fuzzer counts these as bugs)
        raise ValueError(
            f"{label}: tessera cannot convert this node (internal error: "
            f"{type(e).__name__}: {e}); please report it with the model"
        ) from e
    outs = out if isinstance(out, tuple) and not isinstance(out, Seq) else (out,)
    for name, v in zip(node.output, outs, strict=False):
        if name:
            env[name] = v
    for name in node.output[len(outs) :]:
        if name:
            env[name] = _Unavailable(label, name)


def _symbolic_dims_of(inputs) -> str:
    from tessera.graph.dims import dim_vars

    shapes = [v.type.shape for v in inputs if isinstance(v, Value)]
    return ", ".join(v.name for v in dim_vars(shapes)) or "(none)"


def _convert_subgraph(b: ConvertContext, graph, bindings: dict, opsets, step=None) -> list:
    """Convert a subgraph (a Scan body) inline, its inputs bound to `bindings` and the names of
    the enclosing scope visible; returns the values of its outputs. `step` (an int): the
    subgraph is iteration `step` of an unrolled loop, whose random ops draw that iteration's
    values (Note [random streams] in topi/philox.py)."""
    _check_supported(graph, opsets)
    saved = (b.opset, b.num_outputs, b.node_name, b.name_hint, b.span, b.env, b.stream)
    if step is not None:
        b.stream = b.step_stream(step)
    env = {**b.env, **bindings}
    for t in graph.initializer:
        env[t.name] = b.const(numpy_helper.to_array(t), name=t.name)
    try:
        for node in _toposort(graph, set(env)):
            domain = "" if node.domain == "ai.onnx" else node.domain
            _convert_node(b, node, env, opsets[domain])
    finally:
        b.opset, b.num_outputs, b.node_name, b.name_hint, b.span, b.env, b.stream = saved
    outs = [env.get(vi.name) for vi in graph.output]
    for vi, v in zip(graph.output, outs, strict=True):
        empty_optional = v is None and vi.name in env  # Optional() without a value
        if not (is_value_or_seq(v) or empty_optional):
            raise NodeError(f"subgraph output {vi.name!r} is not computed")
    return outs


def free_names(graph) -> list[str]:
    """The outer-scope names a subgraph reads, in order of first use."""
    inner = {vi.name for vi in graph.input} | {t.name for t in graph.initializer}
    inner |= {o for n in graph.node for o in n.output}
    names = {}
    for n in graph.node:
        for i in sorted(_uses(n)):
            if i and i not in inner:
                names.setdefault(i, None)
    return list(names)


def _convert_function(b: ConvertContext, graph, inputs, outer: list[str], name: str, opsets,
                      step: bool = False):  # fmt: skip
    """A subgraph as a graph Function of its own (a branch or a loop body, run by a control
    op): its inputs typed by `inputs` [(shape, dtype)], then one parameter per outer name in
    `outer` (values computed at run time); outer constants are copied in, where they fold.
    When its random ops draw, a last parameter STREAM_PARAM takes the caller's stream (Note
    [random streams] in topi/philox.py), folded with the body's iteration number (its first
    input) when `step`."""
    sub = _context(opsets)
    sub.stream = Stream(lambda: sub.param(STREAM_PARAM, (), "int64"))  # made after the others
    env = {}
    for vi, (shape, dtype) in zip(graph.input, inputs, strict=True):
        env[vi.name] = sub.param(vi.name, shape, dtype)
    if step:
        sub.stream = sub.step_stream(sub.params[0])
    for k, n in enumerate(outer):
        v = b.env[n]
        env[n] = sub.param(f"{name}_outer{k}", v.type.shape, v.type.dtype)
    for n in free_names(graph):
        v = b.env.get(n)
        if n not in env and isinstance(v, Constant):
            env[n] = sub.const(v.array, name=n)
    sub.env = env
    outs = _convert_subgraph(sub, graph, {}, opsets)
    if not all(isinstance(v, Value) for v in outs):
        raise NodeError(
            "the subgraph returns a sequence or an optional, which exist only when converting: "
            "what decides which branch or how many steps run must be a constant"
        )
    return sub.finish(outs, name=name)


def _context(opsets) -> ConvertContext:
    """A ConvertContext whose subgraphs convert with `opsets`."""
    b = ConvertContext()
    b.convert_subgraph = lambda g, bindings, step=None: _convert_subgraph(
        b, g, bindings, opsets, step
    )
    b.convert_function = lambda g, i, o, n, step=False: _convert_function(
        b, g, i, o, n, opsets, step
    )
    return b


class _Unavailable:
    """An optional node output that tessera does not compute (e.g. BatchNorm's running mean)."""

    def __init__(self, label, name):
        self.label, self.name = label, name


def from_onnx(model, shape_dict: dict | None = None, dtype="float32", input_values=None):
    """Convert an ONNX model to (IRModule with function "main", params: dict[str, ndarray]).

    `input_values` ({name: array}) binds inputs to values at conversion: they become constants
    and are no longer inputs of the function. It is for models whose shapes depend on input
    values (a Reshape's shape, Expand's shape, a Range's limits fed as inputs). A sequence
    input is one input per element ("x.0", "x.1", ...): shape_dict gives it a list of shapes
    (onnx_sequence.py); an optional input given the shape None is absent."""
    mod, params, _ = convert_onnx(model, shape_dict, dtype, input_values)
    return mod, params


def _sequence_input(b, vi, shape_dict: dict, dtype):
    """The values of a sequence (or optional) input: None when absent, a Seq, or a value."""
    kind = vi.type.WhichOneof("value")
    inner = vi.type.optional_type.elem_type if kind == "optional_type" else vi.type
    if kind == "optional_type" and shape_dict.get(vi.name, ()) is None:
        return None
    if inner.WhichOneof("value") != "sequence_type":
        element = onnx.ValueInfoProto(name=vi.name, type=inner)
        shape, elem = _input_type(element, shape_dict, dtype)
        return b.param(vi.name, shape, elem)
    shapes = shape_dict.get(vi.name)
    if not isinstance(shapes, list | tuple) or any(isinstance(d, int) for d in shapes):
        raise ValueError(f"input {vi.name!r} is a sequence: give a list of shapes in shape_dict")
    element = onnx.ValueInfoProto(name=vi.name, type=inner.sequence_type.elem_type)
    items = []
    for k, shape in enumerate(shapes):
        dims, elem = _input_type(element, {vi.name: shape}, dtype)
        items.append(b.param(f"{vi.name}.{k}", dims, elem))
    return Seq(items)


def convert_onnx(model, shape_dict=None, dtype="float32", input_values=None):
    """from_onnx, plus the layout of the outputs: per graph output, None for a tensor, the
    number of elements for a sequence (its elements are consecutive outputs), or -1 for an
    empty optional (no output)."""
    model = _load(model)
    if not model.HasField("graph"):
        raise ValueError("the ONNX model has no graph")
    model = fuse_qdq(model)  # QDQ groups -> integer ops (onnx_qdq.py)
    graph, opsets, shape_dict = model.graph, _opsets(model), dict(shape_dict or {})
    check_opsets(opsets)
    _check_supported(graph, opsets)
    check_nodes(graph, opsets, model.ir_version)
    inits = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    values = {k: np.asarray(v) for k, v in (input_values or {}).items()}
    inputs = [vi for vi in graph.input if vi.name not in inits]
    names = ", ".join(vi.name for vi in inputs) or "none"
    for given, what in ((shape_dict, "shape_dict"), (values, "input_values")):
        unknown = sorted(set(given) - {vi.name for vi in inputs})
        if unknown:
            raise ValueError(
                f"{what} names {unknown[0]!r}, which is not an input (inputs: {names})"
            )
    b = _context(opsets)
    env: dict[str, object] = {}
    dim_vars: dict = {}  # a model's dynamic dims by name (Note [symbolic dims])
    for vi in inputs:
        if vi.name in values:
            env[vi.name] = b.const(values[vi.name], name=vi.name)
            continue
        if vi.type.WhichOneof("value") in ("sequence_type", "optional_type"):
            env[vi.name] = _sequence_input(b, vi, shape_dict, dtype)
            continue
        shape, elem = _input_type(vi, shape_dict, dtype, dim_vars)
        env[vi.name] = b.param(vi.name, shape, elem)
    for name, array in inits.items():
        env[name] = b.const(array, name=name)
    init_ids = {id(env[n]) for n in inits}
    for node in _toposort(graph, set(env)):
        for i in node.input:
            if isinstance(env.get(i), _Unavailable):
                raise ValueError(f"{env[i].label}: output {i!r} is used but not supported")
        domain = "" if node.domain == "ai.onnx" else node.domain
        _convert_node(b, node, env, opsets[domain])
    outputs, layout, names = [], [], {}
    for vi in graph.output:
        v = env.get(vi.name)
        if isinstance(v, ShapeConstant):
            raise ValueError(
                f"graph output {vi.name!r} is a shape with symbolic dims "
                f"({', '.join(str(d) for d in v.array.reshape(-1))}): tessera cannot output it "
                "yet; give the dims sizes in shape_dict"
            )
        if v is None and vi.type.WhichOneof("value") == "optional_type":
            layout.append(-1)
        elif isinstance(v, Seq) and all(isinstance(x, Value) for x in v):
            layout.append(len(v))
            outputs.extend(v)
            names.update({id(x): f"{vi.name}.{k}" for k, x in enumerate(v)})
        elif isinstance(v, Value):
            layout.append(None)
            outputs.append(v)
        else:
            raise ValueError(f"graph output {vi.name!r} is not computed by the model")
    for vi in reversed(graph.output):
        if isinstance(env.get(vi.name), Value):
            names[id(env[vi.name])] = vi.name
    func = b.finish(outputs, names=names)
    func, params = constants_to_params(func, init_ids)
    func.verify()
    return IRModule({"main": func}), params, layout


__all__ = ["UnsupportedOpError", "convert_onnx", "from_onnx"]
