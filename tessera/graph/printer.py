"""Text form of graph functions, read back by `tessera.graph.parser`.

    def main(%x: f32[2, 3], %w: f32[4, 3]) {
      %shape = constant([8]) : i64[1];
      %1 = nn.dense(%x, %w) : f32[2, 4];
      %2, %3 = split(%1, axis=1, sections=[2, 2]) : (f32[2, 2], f32[2, 2]);
      return %2, %3
    }

A call's source node names (its span) follow its type: `%2 = nn.relu(%1) : f32[2, 4]  @"relu1";`.
Names that are not plain identifiers are quoted (`%"conv1/7x7:0"`); values that share a name
get a suffix, so the text is always valid SSA. Constants with more than `max_elements`
elements print as `constant(...)`: the parser then takes their data from a `constants` dict.
"""

from __future__ import annotations

import json
import re

import numpy as np

from tessera.graph.ir import Call, Constant, Function, TensorType, Value, short_dtype
from tessera.ir.dtype import DType
from tessera.ir.printer import register_printer

_PLAIN = re.compile(r"[A-Za-z0-9_.]+\Z")


def format_name(name: str) -> str:
    return "%" + (name if _PLAIN.match(name) else json.dumps(name))


def format_attr(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "none"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, DType):
        return str(v)
    if isinstance(v, tuple):
        return "[" + ", ".join(format_attr(x) for x in v) + "]"
    if isinstance(v, Function):  # a fused group's body, Relay-style: fn name(%p: t) { ... }
        lines = function_to_text(v).split("\n")
        return "\n".join(["fn" + lines[0][len("def") :], *("  " + line for line in lines[1:])])
    return str(v)


def format_data(array: np.ndarray) -> str:
    if array.ndim == 0:
        return format_attr(array.item())
    return "[" + ", ".join(format_data(a) for a in array) + "]"


class _Namer:
    """Unique printed names: the first value named `x` prints as %x, the next as %x_1."""

    def __init__(self):
        self.names: dict[int, str] = {}
        self.used: set[str] = set()

    def define(self, v: Value) -> str:
        name, k = v.name, 0
        while name in self.used:
            k += 1
            name = f"{v.name}_{k}"
        self.used.add(name)
        self.names[id(v)] = name
        return format_name(name)

    def use(self, v: Value) -> str:
        if id(v) not in self.names:  # a free value (not defined in the function)
            return format_name(v.name)
        return format_name(self.names[id(v)])


def _types(values) -> str:
    if len(values) == 1:
        return str(values[0].type)
    return "(" + ", ".join(str(v.type) for v in values) + ")"


def call_to_text(call: Call, namer: _Namer) -> str:
    args = [namer.use(v) for v in call.inputs]
    args += [f"{k}={format_attr(v)}" for k, v in call.attrs.items()]
    outs = ", ".join(namer.define(v) for v in call.outputs)
    text = f"{outs} = {call.op.name}({', '.join(args)}) : {_types(call.outputs)}"
    return text + format_span(call.span)


def format_span(span: tuple[str, ...]) -> str:
    """The source node names of a call, after its type: `  @"conv1", "relu1"` (or nothing)."""
    return "  @" + ", ".join(json.dumps(name) for name in span) if span else ""


def function_to_text(func: Function, max_elements: int = 64) -> str:
    namer = _Namer()
    params = ", ".join(f"{namer.define(p)}: {p.type}" for p in func.params)
    lines = [f"def {func.name}({params}) {{"]
    for c in func.constants:
        data = format_data(c.array) if c.array.size <= max_elements else "..."
        lines.append(f"  {namer.define(c)} = constant({data}) : {c.type};")
    for call in func.body:
        lines.append(f"  {call_to_text(call, namer)};")
    lines.append(f"  return {', '.join(namer.use(v) for v in func.outputs)}")
    lines.append("}")
    return "\n".join(lines)


def _node_text(node) -> str:
    if isinstance(node, Function):
        return function_to_text(node)
    if isinstance(node, Call):
        return call_to_text(node, _Namer())
    if isinstance(node, Constant):
        return f"{format_name(node.name)}: {node.type} = {format_data(node.array)}"
    return str(node)


register_printer(Function, _node_text)
register_printer(Call, _node_text)
register_printer(TensorType, lambda t: f"{short_dtype(t.dtype)}[{', '.join(map(str, t.shape))}]")
