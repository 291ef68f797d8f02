"""Validation of an ONNX model before (and while) it is converted: what ONNX Runtime refuses,
tessera refuses too, with the node, the attribute or the input named.

    check_opsets(opsets)              # opset 99 of the default domain: a clear error
    check_nodes(graph, opsets, ir)    # every node against its ONNX schema (onnx.checker), and
                                      # Relu at opset 1 (Relu-1, gone since opset 6): refused
    check_int_attrs(attrs)            # keepdims=5, strides=[0, 3]: named, with the rule

The schema check is onnx's own `checker.check_node` (attribute types, arity, required inputs),
run node by node so that models whose value_info are incomplete, as many exporters write them,
still load. What the schema cannot say (a stride must be positive, a boolean is 0 or 1) is
checked here by attribute name, for every op.
"""

from __future__ import annotations

import onnx
from onnx import checker

from tessera.frontend.onnx_registry import NodeError

# The oldest default-domain opset accepted: ONNX Runtime's own floor (it refuses older models'
# ops, e.g. Relu-1 with its `consumed_inputs`), and the oldest our converters are tested at.
MIN_OPSET = 7

# Attributes that are booleans in every op that has them: 0 or 1 (ONNX Runtime reads 5 as 0
# for some ops and as 1 for others).
_BOOLEANS = {
    "keepdims", "transA", "transB", "ceil_mode", "count_include_pad", "select_last_index",
    "exclusive", "reverse", "sorted", "largest", "noop_with_empty_axes", "center_point_box",
    "align_corners", "exclude_outside", "training_mode", "input_forget", "layout",
    "detect_negative", "detect_positive", "upper", "allowzero", "onesided",
}  # fmt: skip
# Attributes whose every value must be >= 1 (a zero stride divides by zero; a zero kernel or
# dilation makes an empty window) or >= 0 (padding).
_POSITIVE = {"strides", "kernel_shape", "dilations", "group", "blocksize"}
_NON_NEGATIVE = {"pads", "output_padding"}


def check_opsets(opsets: dict[str, int]) -> None:
    """Refuse a default-domain opset this onnx does not know (newer than it, or below 1)."""
    newest = onnx.defs.onnx_opset_version()
    version = opsets.get("", newest)
    if not isinstance(version, int) or not 1 <= version <= newest:
        raise ValueError(
            f"the model imports opset {version} of the ONNX domain; this installation knows "
            f"opsets 1 to {newest} (onnx {onnx.__version__}): it was written by a newer "
            "exporter, or the opset is wrong"
        )


def _legacy(node: onnx.NodeProto, opset: int) -> str | None:
    """Why a node of an opset older than MIN_OPSET cannot be read, or None when its op has not
    changed since (ONNX Runtime runs those too: Not-1 is Not at opset 7)."""
    if node.domain not in ("", "ai.onnx") or opset >= MIN_OPSET:
        return None
    try:
        old = onnx.defs.get_schema(node.op_type, opset, "").since_version
        new = onnx.defs.get_schema(node.op_type, MIN_OPSET, "").since_version
    except onnx.defs.SchemaError:
        return None  # an op unknown at one of them: the schema check reports it
    if old == new:
        return None
    return (
        f"opset {opset} gives {node.op_type}-{old}, an old form that tessera (like ONNX "
        f"Runtime) does not read: upgrade the model with "
        "onnx.version_converter.convert_version(model, 17)"
    )


def _context(opsets: dict[str, int], ir_version: int):
    ctx = checker.C.CheckerContext()
    ctx.ir_version = ir_version or onnx.IR_VERSION
    ctx.opset_imports = dict(opsets)
    return ctx


def _with_outer_scope(node: onnx.NodeProto) -> onnx.NodeProto:
    """`node` checked alone: the outer names its subgraphs read become placeholder
    initializers of them (the checker knows no scope outside the node)."""
    graphs = [a for a in node.attribute if a.type == onnx.AttributeProto.GRAPH]
    if not graphs:
        return node
    from tessera.frontend.onnx import free_names

    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    for a in copy.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            names = free_names(a.g)
            a.g.initializer.extend(onnx.helper.make_tensor(n, 1, [], [0.0]) for n in names)
    return copy


def check_nodes(graph: onnx.GraphProto, opsets: dict[str, int], ir_version: int) -> None:
    """Check every node against its ONNX schema; one ValueError listing every bad node."""
    ctx = _context(opsets, ir_version)
    problems = []
    for node in graph.node:
        name = node.name or (node.output[0] if node.output else "") or "<unnamed>"
        try:
            checker.check_node(_with_outer_scope(node), ctx)
            why = _legacy(node, opsets.get("", MIN_OPSET))
        except checker.ValidationError as err:
            why = str(err).strip().splitlines()[0]
        if why:
            problems.append(f"  {name} ({node.op_type}): {why}")
    if problems:
        raise ValueError(
            f"{len(problems)} node(s) do not follow the ONNX specification:\n" + "\n".join(problems)
        )


def check_int_attrs(attrs: dict, op_type: str) -> None:
    """Refuse attribute values the spec rules out, naming the attribute (a NodeError: the
    frontend adds the node's name)."""
    for name, value in attrs.items():
        if name == "pads" and op_type == "Pad":  # Pad-2's pads may be negative: a crop
            continue
        values = value if isinstance(value, tuple | list) else (value,)
        if name in _BOOLEANS and any(v not in (0, 1) for v in values):
            raise NodeError(f"attribute {name!r} must be 0 or 1, got {value!r}")
        if name in _POSITIVE and any(isinstance(v, int) and v < 1 for v in values):
            raise NodeError(f"attribute {name!r} must hold values >= 1, got {list(values)}")
        if name in _NON_NEGATIVE and any(isinstance(v, int) and v < 0 for v in values):
            raise NodeError(f"attribute {name!r} must hold values >= 0, got {list(values)}")
