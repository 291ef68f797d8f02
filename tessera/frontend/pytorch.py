"""PyTorch frontend: an `nn.Module` or a `torch.export.ExportedProgram` -> graph IRModule + params.

    mod, params = from_pytorch(model.eval(), (torch.randn(1, 3, 224, 224),))

Steps: export the module with `torch.export` (an ExportedProgram is taken as it is) and run the
Core ATen decompositions, so converters see one small, stable op set; list every node without a
converter (one UnsupportedOpError for all of them, each with its source line); bind the user
inputs to graph parameters and the module's parameters, buffers and tensor constants to
constants named by their qualified names ("layer1.0.conv1.weight"); convert the nodes in graph
order with the converters of the `pytorch_*` modules imported below. What the converters fold
away (a transposed weight) leaves the params; what remains becomes a param again at the end.

Symbolic dims (an export with `dynamic_shapes`) are fixed to the sizes of `example_inputs`, with
a warning that names them: tessera compiles static shapes. torch itself is imported only when
`from_pytorch` is called, so tessera imports without it (`pip install tessera[torch]`).
"""

from __future__ import annotations

import operator
import os
import warnings

import numpy as np

# Importing the converter modules registers their converters.
from tessera.frontend import pytorch_nn, pytorch_ops, pytorch_shape  # noqa: F401
from tessera.frontend.onnx import UnsupportedOpError
from tessera.frontend.params import constants_to_params
from tessera.frontend.pytorch_registry import NodeError, TorchContext, find_converter
from tessera.graph.ir import Value
from tessera.ir.module import IRModule

# Nodes that check or constrain and compute nothing tessera needs.
_IGNORED = {
    "aten._assert_tensor_metadata.default",
    "aten._assert_scalar.default",
    "aten.sym_constrain_range_for_size.default",
    "aten._assert_async.msg",
}


def _torch():
    try:
        import torch
    except ImportError:
        raise ImportError(
            "from_pytorch needs PyTorch: pip install 'tessera[torch]' (or torch==2.13.0)"
        ) from None
    return torch


def _numpy_dtype(dtype) -> str:
    name = str(dtype).removeprefix("torch.")
    if name not in ("float32", "float64", "float16", "int64", "int32", "int16", "int8", "uint8",
                    "bool"):  # fmt: skip
        raise NodeError(f"tensors of dtype {dtype} are not supported")
    return name


def _export(model, example_inputs):
    """An ExportedProgram with static shapes (dynamic dims fixed to `example_inputs`)."""
    torch = _torch()
    if example_inputs is not None:
        example_inputs = (
            (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
        )
    if isinstance(model, torch.export.ExportedProgram):
        ep = model
        if example_inputs is None:
            args = (ep.example_inputs or ((), {}))[0]
            example_inputs = tuple(args)
    elif isinstance(model, torch.nn.Module):
        if example_inputs is None:
            raise ValueError("from_pytorch needs example_inputs to export an nn.Module")
        model = model.eval()
        try:
            ep = torch.export.export(model, example_inputs)
        except Exception as e:  # torch.export raises many types (UserError, Unsupported, ...)
            raise ValueError(f"torch.export could not export the module: {e}") from None
    else:
        raise TypeError(
            "from_pytorch expects a torch.nn.Module or a torch.export.ExportedProgram, got "
            f"{type(model).__name__}"
        )
    symbolic = _symbolic_dims(ep)
    if symbolic:
        if not example_inputs:
            dims = ", ".join(f"{name}[{i}] ({sym})" for name, i, sym, _ in symbolic)
            raise ValueError(
                f"the exported program has dynamic dims {dims}: give example_inputs to fix them"
            )
        tensors = [x for x in example_inputs if isinstance(x, torch.Tensor)]
        dims = ", ".join(
            f"{name}[{i}] ({sym}) to {tensors[k].shape[i]}" for name, i, sym, k in symbolic
        )
        warnings.warn(
            f"tessera compiles static shapes (dynamic shapes are a later issue): the dynamic dims "
            f"of the exported program are fixed to the sizes of example_inputs: {dims}",
            stacklevel=3,
        )
        try:
            ep = torch.export.export(ep.module(), example_inputs)
        except Exception as e:
            raise ValueError(f"cannot fix the dynamic dims to example_inputs: {e}") from None
    return ep


def _symbolic_dims(ep) -> list[tuple[str, int, str, int]]:
    """(input name, dim, symbol, index among the tensor inputs) of every symbolic input dim."""
    user = list(ep.graph_signature.user_inputs)
    out, k = [], -1
    for node in ep.graph.nodes:
        val = node.meta.get("val")
        if node.op != "placeholder" or node.name not in user or not hasattr(val, "shape"):
            continue
        k += 1
        for i, d in enumerate(val.shape):
            if not isinstance(d, int):
                out.append((node.name, i, str(d), k))
    return out


def _source(node) -> str:
    """Where a node comes from: the innermost module and the last line of user code."""
    where = []
    stack = node.meta.get("nn_module_stack") or {}
    if stack:
        path, cls = list(stack.values())[-1]
        if path:
            where.append(f"in {path} ({cls.rsplit('.', 1)[-1]})")
    frames = _frames(node.meta.get("stack_trace") or "")
    torch_dir = os.path.dirname(_torch().__file__)
    user = [f for f in frames if not f[0].startswith(torch_dir)] or frames
    if user:
        file, line, code = user[-1]
        where.append(f"at {os.path.basename(file)}:{line}" + (f": {code}" if code else ""))
    return " ".join(where)


def _frames(trace: str) -> list[tuple[str, str, str]]:
    frames, lines = [], trace.splitlines()
    for i, line in enumerate(lines):
        line = line.strip()
        if line.startswith('File "'):
            file, _, rest = line[6:].partition('", line ')
            number = rest.split(",")[0]
            code = lines[i + 1].strip() if i + 1 < len(lines) else ""
            frames.append((file, number, "" if code.startswith("File ") else code))
    return frames


def _check_supported(graph) -> None:
    missing = []
    for node in graph.nodes:
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        name = str(node.target)
        if name not in _IGNORED and find_converter(name) is None:
            missing.append((node.name, name, f" {_source(node)}".rstrip()))
    if missing:
        raise UnsupportedOpError(missing)


def _bind(node, args, kwargs) -> dict:
    """The node's arguments by the names of its ATen schema, defaults filled in."""
    schema = node.target._schema
    bound = {}
    for i, arg in enumerate(schema.arguments):
        if i < len(args):
            bound[arg.name] = args[i]
        elif arg.name in kwargs:
            bound[arg.name] = kwargs[arg.name]
        elif arg.has_default_value():
            bound[arg.name] = arg.default_value
        elif not arg.kwarg_only or arg.type.kind() == "OptionalType":
            bound[arg.name] = None
    return bound


def _value(env, a):
    """A node argument with fx Nodes replaced by what they converted to."""
    torch = _torch()
    if isinstance(a, torch.fx.Node):
        return env[a.name]
    if isinstance(a, (list, tuple)):
        return tuple(_value(env, x) for x in a)
    return a  # a Python scalar, a dtype, a device, None


def _check_result(node, out) -> None:
    val = node.meta.get("val")
    if not isinstance(out, Value) or not hasattr(val, "shape"):
        return
    shape, dtype = tuple(int(d) for d in val.shape), _numpy_dtype(val.dtype)
    if out.type.shape != shape or out.type.dtype.numpy_name != dtype:
        raise NodeError(
            f"converted to {out.type}, but torch computes {dtype}{list(shape)} (a converter bug)"
        )


def _convert_node(b: TorchContext, node, env) -> None:
    name = str(node.target)
    label = f"node {node.name!r} ({name}) {_source(node)}".rstrip()
    b.span = (node.name,)
    b.name_hint = node.name
    val = node.meta.get("val")
    if hasattr(val, "shape"):
        b.out_shape, b.out_dtype = tuple(int(d) for d in val.shape), _numpy_dtype(val.dtype)
    try:
        if node.target is operator.getitem:
            source, index = env[node.args[0].name], node.args[1]
            out = source[index]
            if out is None:  # fails only where it is used: a buffer update is dropped
                out = _Unavailable(f"output {index} of {node.args[0].name!r} is not supported")
        else:
            for a in node.all_input_nodes:
                if isinstance(env.get(a.name), _Unavailable):
                    raise NodeError(env[a.name].reason)
            args = _value(env, node.args)
            kwargs = {k: _value(env, v) for k, v in node.kwargs.items()}
            out = find_converter(name)(b, **_bind(node, args, kwargs))
        _check_result(node, out)
    except (NodeError, TypeError, ValueError, NotImplementedError) as e:
        raise ValueError(f"{label}: {e}") from None
    env[node.name] = out


class _Unavailable:
    """An op output tessera does not compute (batch norm's saved statistics)."""

    def __init__(self, reason: str):
        self.reason = reason


def _tensor_constants(ep) -> dict[str, tuple[str, np.ndarray]]:
    """Parameters, buffers and lifted tensor constants: placeholder name -> (name, array)."""
    sig = ep.graph_signature
    state = {**ep.state_dict, **ep.constants}
    out = {}
    for spec in sig.input_specs:
        if spec.target is None:
            continue
        tensor = state[spec.target]
        if not hasattr(tensor, "detach"):
            raise ValueError(f"{spec.target!r} is not a tensor ({type(tensor).__name__})")
        array = tensor.detach().cpu().numpy()
        out[spec.arg.name] = (spec.target, array)
    return out


def from_pytorch(model, example_inputs=None):
    """Convert a PyTorch model to (IRModule with function "main", params: dict[str, ndarray]).

    `model` is an `nn.Module` (switched to eval mode and exported with `torch.export`) or an
    ExportedProgram; `example_inputs` is a tuple of tensors giving the input shapes and dtypes.
    The function's parameters are the model's tensor inputs, named as in `forward`, then the
    params; its outputs are the model's tensor outputs, flattened in order (tuples, lists and
    dict values)."""
    ep = _export(model, example_inputs)
    try:
        ep = ep.run_decompositions()
    except Exception as e:
        raise ValueError(f"torch could not decompose the program to Core ATen: {e}") from None
    graph = ep.graph
    _check_supported(graph)
    constants = _tensor_constants(ep)
    user_inputs = set(ep.graph_signature.user_inputs)
    b = TorchContext()
    env: dict[str, object] = {}
    const_ids = set()
    for node in graph.nodes:
        if node.op == "placeholder":
            env[node.name] = _placeholder(b, node, constants, user_inputs, const_ids)
        elif node.op == "get_attr":
            raise ValueError(f"node {node.name!r}: get_attr nodes are not supported")
        elif node.op == "call_function":
            if str(node.target) in _IGNORED:
                continue
            _convert_node(b, node, env)
        elif node.op == "output":
            outputs = _outputs(ep, node, env)
    func = b.finish(outputs)
    func, params = constants_to_params(func, const_ids)
    func.verify()
    return IRModule({"main": func}), params


def _placeholder(b, node, constants, user_inputs, const_ids):
    if node.name in constants:
        target, array = constants[node.name]
        c = b.const(array, name=target)
        const_ids.add(id(c))
        return c
    val = node.meta.get("val")
    if node.name in user_inputs and hasattr(val, "shape"):
        shape = tuple(int(d) for d in val.shape)
        return b.param(node.name, shape, _numpy_dtype(val.dtype))
    return val  # a non-tensor input that torch.export specialized (an int, a bool)


def _outputs(ep, node, env) -> list[Value]:
    user = set(ep.graph_signature.user_outputs)
    outs = []
    for i, a in enumerate(node.args[0]):
        if getattr(a, "name", None) not in user:
            continue  # buffer and input mutations: inference needs only the user outputs
        v = env.get(a.name)
        if isinstance(v, _Unavailable):
            raise ValueError(f"output {i} ({a.name!r}): {v.reason}")
        if not isinstance(v, Value):
            raise ValueError(f"output {i} ({a.name!r}) is not a tensor computed by the model")
        outs.append(v)
    if not outs:
        raise ValueError("the model returns no tensor")
    return outs


__all__ = ["from_pytorch"]
