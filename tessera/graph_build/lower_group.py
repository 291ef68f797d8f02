"""Lower fused groups to kernels: a group's primitive Function -> te -> a tir.PrimFunc.

    kernels = lower_groups(fused_func, Target("llvm"))
    kernels.funcs            # one PrimFunc per distinct group (params: inputs, then outputs)
    kernels.kernel_of_call   # for each `fused` call of the body, the name of its kernel

For a group: a te placeholder per parameter (scalar constants inside the group become te
constants, inlined where they are used), each member's compute rule in order (its output types
are checked against the graph types), the anchor op's schedule rule (the member of the highest
OpKind, first of equals) for the target's schedule keys (`schedule_keys`), given the anchor's
strategy config when the rule takes one (`group_config`), else the generic default for the
group's kind, then `te.lower`. Identical groups (same ops, attrs, input types
and inner constants: `group_key`) share one kernel. `check_compute_rules` lists every op without
a compute rule at once, before anything is lowered.
"""

from __future__ import annotations

import contextlib
import inspect
from dataclasses import dataclass

from tessera import te, tir
from tessera.graph.dims import dim_bounds, dim_vars, simplify_dim
from tessera.graph.ir import Constant, Function, TensorType
from tessera.graph.op import OpKind, get_op
from tessera.target import Target, load_strategies
from tessera.topi import generic, strategy
from tessera.topi.strategy import Config


class MissingComputeError(ValueError):
    """Ops of the graph have no compute rule; `ops` maps each op name to where it is used
    (source node names, or output values)."""

    def __init__(self, ops: dict[str, list[str]]):
        self.ops = ops
        calls = sum(len(v) for v in ops.values())
        lines = [f"  {name}: {'; '.join(where)}" for name, where in ops.items()]
        super().__init__(
            f"{len(ops)} op(s) in {calls} call(s) have no compute rule, so the model cannot be "
            "compiled:\n" + "\n".join(lines)
        )


class LoweringError(ValueError):
    """A compute or schedule rule failed or disagrees with the graph's types."""


def check_compute_rules(func: Function) -> None:
    """Raise MissingComputeError naming every op (with its calls) that has no compute rule."""
    fused = get_op("fused")
    missing: dict[str, list[str]] = {}
    for call in func.body:
        members = call.attrs["func"].body if call.op is fused else (call,)
        for member in members:
            if "compute" not in member.op.rules and "primfunc" not in member.op.rules:
                # the source (ONNX) node names when the call has them, else its output values
                where = ", ".join(member.span) or ", ".join("%" + v.name for v in member.outputs)
                missing.setdefault(member.op.name, []).append(where)
    if missing:
        raise MissingComputeError(missing)


def schedule_keys(target: Target) -> tuple[str, ...]:
    """The schedule-rule keys to try for a target, most specific first (its target table row)."""
    return target.kind_info.keys(target)


def group_key(group: Function):
    """A structural key: equal for groups that compute the same thing from the same types."""
    slot = {id(p): ("param", k) for k, p in enumerate(group.params)}
    consts = []
    for c in group.constants:
        slot[id(c)] = ("const", len(consts))
        consts.append((c.type, c.data))
    calls = []
    for k, call in enumerate(group.body):
        for j, v in enumerate(call.outputs):
            slot[id(v)] = ("call", k, j)
        inputs = tuple(slot[id(v)] for v in call.inputs)
        calls.append((call.op.name, call.attrs, inputs, tuple(v.type for v in call.outputs)))
    params = tuple(p.type for p in group.params)
    return params, tuple(consts), tuple(calls), tuple(slot[id(v)] for v in group.outputs)


def _te_constant(c: Constant) -> te.Tensor:
    """A scalar (one-element) constant as a te stage that inlines into its users."""
    value = c.array.reshape(-1)[0].item()
    dtype = str(c.type.dtype)
    shape = tuple(c.type.shape)
    return te.compute(shape, lambda *_: tir.const(value, dtype), name=c.name, tag="elemwise")


def _static_shape(t: te.Tensor) -> tuple:
    """A te tensor's shape as a graph type's: ints, and symbolic dims (Note [symbolic dims])."""
    return tuple(int(d.value) if isinstance(d, tir.IntImm) else simplify_dim(d) for d in t.shape)


def _compute_rule(op, target: Target | None):
    """The op's compute rule for the most specific of the target's keys that has one (a
    target's own form of an op, such as the micro int8 convolution), else its compute rule."""
    if target is not None:
        keys = schedule_keys(target)
        load_strategies(keys)  # a target's strategy module registers its compute rules
        for key in keys:
            rule = op.rules.get(f"compute:{key}")
            if rule is not None:
                return rule
    if "compute" not in op.rules and "primfunc" in op.rules:
        raise LoweringError(
            f"{op.name} has a kernel written in tir for the CPU targets, no te compute for "
            f"{'this target' if target is None else target.kind}"
        )
    return op.rules["compute"]


def _compute_group(
    group: Function, target: Target | None = None
) -> tuple[list[te.Tensor], list[te.Tensor]]:
    """(placeholders, output tensors) of the group's compute rules, types checked."""
    env: dict[int, te.Tensor] = {}
    placeholders = []
    for k, p in enumerate(group.params):
        if any(isinstance(d, str) for d in p.type.shape):
            raise LoweringError(f"{group.name}: input %{p.name} has an unbound dim: {p.type}")
        env[id(p)] = te.placeholder(p.type.shape, str(p.type.dtype), name=f"p{k}")
        placeholders.append(env[id(p)])
    for c in group.constants:
        env[id(c)] = _te_constant(c)
    # computes that take a knob (the row split of softmax/layer_norm) read the group's config
    with strategy.computing_with(None if target is None else group_config(group, target)):
        _compute_calls(group, env, target)
    return placeholders, _distinct_outputs([env[id(v)] for v in group.outputs])


def _compute_calls(group: Function, env: dict, target: Target | None) -> None:
    for call in group.body:
        args = [env[id(v)] for v in call.inputs]
        try:
            outs = _compute_rule(call.op, target)(*args, **dict(call.attrs.items()))
        except Exception as err:  # a rule's failure, reported with the call it came from
            raise LoweringError(
                f"{group.name}: the compute rule of {call.op.name} (for "
                f"%{call.outputs[0].name}) failed: {type(err).__name__}: {err}"
            ) from err
        outs = tuple(outs) if isinstance(outs, (tuple, list)) else (outs,)
        _check_types(group, call, outs)
        for v, t in zip(call.outputs, outs, strict=True):
            env[id(v)] = t


def _check_types(group: Function, call, outs) -> None:
    if len(outs) != len(call.outputs):
        raise LoweringError(
            f"{group.name}: {call.op.name} computes {len(outs)} tensors, "
            f"the graph has {len(call.outputs)} outputs"
        )
    for v, t in zip(call.outputs, outs, strict=True):
        got = TensorType(_static_shape(t), t.dtype)
        if got != v.type:
            raise LoweringError(
                f"{group.name}: the compute rule of {call.op.name} gives {got} for "
                f"%{v.name}, whose graph type is {v.type}"
            )


def _distinct_outputs(outs: list[te.Tensor]) -> list[te.Tensor]:
    """A kernel writes each output: an input passed through, or a tensor returned twice, gets a
    copy stage of its own."""
    seen: set[int] = set()
    result = []
    for t in outs:
        if isinstance(t.op, te.PlaceholderOp) or id(t) in seen:
            t = te.compute(t.shape, lambda *i, t=t: t(*i), name="copy", tag="injective")
        seen.add(id(t))
        result.append(t)
    return result


def _anchor(group: Function):
    best = group.body[0]
    for call in group.body[1:]:
        if call.op.kind > best.op.kind:
            best = call
    return best


def _schedule_rule(op, target: Target):
    """The anchor op's schedule rule for the most specific of the target's keys, or None."""
    keys = schedule_keys(target)
    load_strategies(keys)  # the targets' strategy modules register their schedules
    for key in keys:
        rule = op.rules.get(f"schedule:{key}")
        if rule is not None:
            return rule
    return None


def group_config(group: Function, target: Target) -> Config | None:
    """The strategy config the group's anchor is scheduled with, when its schedule rule takes
    one: the config a graph pass wrote into its attrs (`config`), else the one chosen for its
    task (given to the build, else the default, for a call no graph pass rewrote); else None."""
    anchor = _anchor(group)
    rule = _schedule_rule(anchor.op, target)
    if rule is None or not _takes_config(rule):
        return None
    attr = anchor.attrs.get("config")
    if attr is not None:
        return Config.from_attr(attr)
    chosen = strategy.choose(anchor, target, {"rewrite": False})
    return None if chosen is None else chosen[1]


def _takes_config(rule) -> bool:
    try:
        return "config" in inspect.signature(rule).parameters
    except (TypeError, ValueError):
        return False


def schedule_group(group: Function, outs: list[te.Tensor], target: Target) -> te.Schedule:
    rule = _schedule_rule(_anchor(group).op, target)
    if rule is not None:
        if _takes_config(rule):
            return rule(list(outs), target, config=group_config(group, target))
        return rule(list(outs), target)
    if max(c.op.kind for c in group.body) <= OpKind.INJECTIVE:
        return generic.schedule_injective(list(outs), target)
    return generic.schedule_reduce(list(outs), target)


def lower_group(group: Function, target: Target, name: str | None = None) -> tir.PrimFunc:
    """The PrimFunc of one fused group: params are its inputs, then its outputs. The target
    is current while its computes and schedule run (rules that read `Target.current()`, such
    as the row split of softmax, take its rule; Note [lane split] in topi/nn/softmax.py)."""
    with target, _size_hints(group):
        return _lower_group(group, target, name)


def _size_hints(group: Function):
    """Note [size hints]: the rules (strategy knobs, schedules) run with each bounded symbolic
    dim of the group at its bounds, through `topi.symbolic.sizes` where the kernels' side has
    it (issue 13's symbolic kernels); without it, or without bounds, nothing changes."""
    bounded = {}
    for v in dim_vars([p.type.shape for p in group.params]):
        lo, hi = dim_bounds(v)
        if hi is not None:
            bounded[v.name] = (lo, hi)
    try:
        from tessera.topi import symbolic
    except ImportError:
        symbolic = None
    if not bounded or symbolic is None or not hasattr(symbolic, "sizes"):
        return contextlib.nullcontext()
    return symbolic.sizes(bounded)


def _lower_group(group: Function, target: Target, name: str | None) -> tir.PrimFunc:
    if len(group.body) == 1 and "primfunc" in group.body[0].op.rules:
        return _primfunc_group(group, target, name or group.name)
    placeholders, outs = _compute_group(group, target)
    try:
        s = schedule_group(group, outs, target)
        return te.lower(s, [*placeholders, *outs], name=name or group.name)
    except Exception as err:
        raise LoweringError(
            f"{group.name}: scheduling or lowering failed ({_anchor(group).op.name} anchors "
            f"the group): {type(err).__name__}: {err}"
        ) from err


def _primfunc_group(group: Function, target: Target, name: str) -> tir.PrimFunc:
    """The kernel of an op written in tir directly (a `primfunc` rule, such as the step loop of
    a recurrent layer: Note [recurrence kernel] in topi/recurrent.py), alone in its group."""
    from tessera.tir.buffer import Buffer

    (call,) = group.body
    if group.constants or [id(v) for v in call.inputs] != [id(p) for p in group.params]:
        raise LoweringError(f"{group.name}: {call.op.name} must be alone in its group")
    params = []
    for k, p in enumerate(group.params):
        t = te.placeholder(p.type.shape, str(p.type.dtype), name=f"p{k}")
        params.append(Buffer(t.name, t.shape, t.dtype))
    outs = []
    for k, v in enumerate(group.outputs):
        t = te.placeholder(v.type.shape, str(v.type.dtype), name=f"out{k}")
        outs.append(Buffer(t.name, t.shape, t.dtype))
    attrs = dict(call.attrs.items())
    return call.op.rules["primfunc"](params, outs, target, name=name, **attrs)


@dataclass
class Kernels:
    funcs: list[tir.PrimFunc]  # one per distinct group
    kernel_of_call: list[str]  # per call of the fused body


def distinct_groups(func: Function) -> tuple[list[Function], list[str]]:
    """(the distinct groups of `func`'s `fused` calls, the kernel name of each call): identical
    groups (equal `group_key`) share one kernel, named after the first of them."""
    check_compute_rules(func)
    fused = get_op("fused")
    by_key: dict[object, str] = {}
    groups, names = [], []
    for call in func.body:
        if call.op is not fused:
            raise LoweringError(f"{func.name}: call of {call.op.name} is not in a fused group")
        group = call.attrs["func"]
        key = group_key(group)
        if key not in by_key:
            by_key[key] = group.name
            groups.append(group)
        names.append(by_key[key])
    return groups, names


def lower_groups(func: Function, target: Target) -> Kernels:
    """Lower every `fused` call of `func`; identical groups share one kernel."""
    groups, names = distinct_groups(func)
    return Kernels([lower_group(g, target) for g in groups], names)
