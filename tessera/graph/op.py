"""The op registry: each graph op in one place with its fusion kind and its rules.

    relu = register_op("nn.relu", kind=OpKind.ELEMWISE)

    @relu.type_rule
    def _(x: TensorType) -> TensorType:
        return x

    @relu.reference
    def _(x: np.ndarray) -> np.ndarray:
        return np.maximum(x, 0)

A rule is called with the inputs as positional arguments and the call's attributes as keyword
arguments. `type_rule` maps input types to the output type (or a tuple of them); `reference`
is the numpy implementation (the testing oracle, and what constant folding evaluates).
`compute` and `schedule` slots are filled by the te/topi work with one more decorator next to
the others (`@relu.compute`). Ops are registered when `tessera.graph.ops` is imported.
"""

from __future__ import annotations

import enum
import inspect

import numpy as np

from tessera.graph.ir import Attrs, TensorType


class OpKind(enum.IntEnum):
    """Fusion kind, ordered like TVM's OpPatternKind (a group takes the max of its members)."""

    ELEMWISE = 0
    BROADCAST = 1
    INJECTIVE = 2
    COMM_REDUCE = 3
    OUT_ELEMWISE_FUSABLE = 4
    OPAQUE = 8


_REGISTRY: dict[str, Op] = {}
_RULES = ("type_rule", "reference", "compute", "schedule")


class Op:
    """A graph operator. Ops are singletons: they compare by identity."""

    def __init__(self, name: str, kind: OpKind, has_side_effects: bool = False):
        self.name = name
        self.kind = OpKind(kind)
        self.has_side_effects = has_side_effects
        self.rules: dict[str, object] = {}
        # output i -> output j: a run fills only the leading rows of output i, as many as the
        # int64 scalar output j says (Note [run-time rows] in graph_build/executor_plan.py)
        self.row_counts: dict[int, int] = {}
        self.row_axis = lambda attrs, i: 0  # the axis output i's rows are counted along

    def __repr__(self) -> str:
        return f"Op({self.name})"

    def _set_rule(self, slot: str, fn, target: str | None = None):
        key = slot if target is None else f"{slot}:{target}"
        self.rules[key] = fn
        return fn

    def type_rule(self, fn):
        return self._set_rule("type_rule", fn)

    def reference(self, fn):
        return self._set_rule("reference", fn)

    def compute(self, fn):
        return self._set_rule("compute", fn)

    def schedule(self, target: str = "generic"):
        """@op.schedule("x86") registers the default schedule of this op for a target."""
        return lambda fn: self._set_rule("schedule", fn, target)

    def infer_type(self, input_types, attrs) -> tuple[TensorType, ...]:
        """Output types of a call with these input types and attrs (a tuple, even for one)."""
        fn = self._rule("type_rule")
        out = self._call(fn, "type rule", input_types, attrs)
        return out if isinstance(out, tuple) else (out,)

    def evaluate(self, inputs, attrs) -> tuple[np.ndarray, ...]:
        """Run the numpy reference on arrays; returns a tuple of arrays."""
        fn = self._rule("reference")
        out = self._call(fn, "reference", [np.asarray(x) for x in inputs], attrs)
        return tuple(np.asarray(o) for o in out) if isinstance(out, tuple) else (np.asarray(out),)

    def _rule(self, slot: str):
        if slot not in self.rules:
            raise NotImplementedError(f"op {self.name} has no {slot.replace('_', ' ')}")
        return self.rules[slot]

    def _call(self, fn, what: str, args, attrs):
        attrs = dict(attrs.items()) if isinstance(attrs, Attrs) else dict(attrs)
        try:
            inspect.signature(fn).bind(*args, **attrs)
        except TypeError as e:
            raise TypeError(f"{self.name}: bad inputs or attributes for its {what}: {e}") from None
        return fn(*args, **attrs)


def register_op(name: str, kind: OpKind = OpKind.OPAQUE, has_side_effects: bool = False) -> Op:
    """Create and register the op `name`; registering a name twice is an error."""
    if name in _REGISTRY:
        raise ValueError(f"op {name!r} is already registered")
    op = Op(name, kind, has_side_effects)
    _REGISTRY[name] = op
    return op


def get_op(name: str) -> Op:
    """The registered op called `name` (e.g. "nn.conv2d")."""
    import tessera.graph.ops  # noqa: F401  (registers the ops)

    if name not in _REGISTRY:
        # ops of a target's strategies (blocked convs, packed dense) register with them
        from tessera.target import load_strategies

        load_strategies()
    if name not in _REGISTRY:
        raise ValueError(f"unknown graph op {name!r}")
    return _REGISTRY[name]


def list_ops() -> list[str]:
    import tessera.graph.ops  # noqa: F401
    from tessera.target import load_strategies

    load_strategies()

    return sorted(_REGISTRY)


def type_error(op: str, message: str) -> TypeError:
    """The error a type rule raises: names the op."""
    return TypeError(f"{op}: {message}")


def normalize_axis(op: str, axis: int, ndim: int) -> int:
    if not -ndim <= axis < max(ndim, 1):
        raise type_error(op, f"axis {axis} is out of range for a tensor of rank {ndim}")
    return axis % ndim if ndim else 0
