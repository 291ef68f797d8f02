"""Schedule steps as data: one frozen record per primitive call, replayable and JSON-able.

Every schedule primitive appends a step to `Schedule.steps`. A step names its stage by the op's
name and iteration variables by their names, so it applies to a fresh schedule of the same
compute (`create_schedule(ops).replay(steps)`), and a tuner can store it as JSON:

    Split(stage="C", iv="i", factor=64)      str: split(C, i, factor=64)
    steps_to_json([...]) -> '[{"kind": "split", "stage": "C", "iv": "i", ...}]'
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields

_STEP_KINDS: dict[str, type] = {}


def _step(kind: str):
    def register(cls):
        cls.kind = kind
        _STEP_KINDS[kind] = cls
        return cls

    return register


def _fmt(value) -> str:
    if isinstance(value, tuple):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    return str(value)


class Step:
    """Base of step records."""

    kind = "step"

    def apply(self, sch) -> None:
        raise NotImplementedError

    def __str__(self) -> str:
        vals = [getattr(self, f.name) for f in fields(self)]
        pos = ", ".join(_fmt(v) for v in vals[: self._positional])
        kw = [
            f"{f.name}={_fmt(getattr(self, f.name))}"
            for f in fields(self)[self._positional :]
            if getattr(self, f.name) is not None
        ]
        return f"{self.kind}({', '.join([pos, *kw] if pos else kw)})"

    _positional = 99

    def to_json(self) -> dict:
        out = {"kind": self.kind}
        for f in fields(self):
            out[f.name] = _json_value(getattr(self, f.name), self, f.name)
        return out


def _json_value(value, step, name):
    if isinstance(value, tuple):
        return [_json_value(v, step, name) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise ValueError(
        f"step {step} cannot be stored as JSON: {name}={value!r} is not a number or string"
    )


def _stage(sch, name):
    return sch.stage_by_name(name)


@_step("split")
@dataclass(frozen=True)
class Split(Step):
    stage: str
    iv: str
    factor: object = None
    nparts: object = None
    _positional = 2

    def apply(self, sch):
        st = _stage(sch, self.stage)
        st.split(st.find_iv(self.iv), factor=self.factor, nparts=self.nparts)


@_step("tile")
@dataclass(frozen=True)
class Tile(Step):
    stage: str
    x: str
    y: str
    x_factor: object
    y_factor: object
    _positional = 3

    def apply(self, sch):
        st = _stage(sch, self.stage)
        st.tile(st.find_iv(self.x), st.find_iv(self.y), self.x_factor, self.y_factor)

    def __str__(self):
        # x_factor splits the axis passed first (TVM's names): show the pairing, not the names
        return f"tile({self.stage}, {self.x}={self.x_factor}, {self.y}={self.y_factor})"


@_step("fuse")
@dataclass(frozen=True)
class Fuse(Step):
    stage: str
    ivs: tuple[str, ...]

    def apply(self, sch):
        st = _stage(sch, self.stage)
        st.fuse(*[st.find_iv(n) for n in self.ivs])

    def __str__(self):
        return f"fuse({self.stage}, {', '.join(self.ivs)})"


@_step("reorder")
@dataclass(frozen=True)
class Reorder(Step):
    stage: str
    ivs: tuple[str, ...]

    def apply(self, sch):
        st = _stage(sch, self.stage)
        st.reorder(*[st.find_iv(n) for n in self.ivs])

    def __str__(self):
        return f"reorder({self.stage}, {', '.join(self.ivs)})"


@_step("vectorize")
@dataclass(frozen=True)
class Vectorize(Step):
    stage: str
    iv: str

    def apply(self, sch):
        st = _stage(sch, self.stage)
        st.vectorize(st.find_iv(self.iv))


@_step("unroll")
@dataclass(frozen=True)
class Unroll(Step):
    stage: str
    iv: str

    def apply(self, sch):
        st = _stage(sch, self.stage)
        st.unroll(st.find_iv(self.iv))


@_step("parallel")
@dataclass(frozen=True)
class Parallel(Step):
    stage: str
    iv: str

    def apply(self, sch):
        st = _stage(sch, self.stage)
        st.parallel(st.find_iv(self.iv))


@_step("bind")
@dataclass(frozen=True)
class Bind(Step):
    stage: str
    iv: str
    thread_tag: str

    def apply(self, sch):
        from tessera.te.tensor import thread_axis

        st = _stage(sch, self.stage)
        st.bind(st.find_iv(self.iv), thread_axis(self.thread_tag))


@_step("pragma")
@dataclass(frozen=True)
class Pragma(Step):
    stage: str
    iv: str
    key: str
    value: object = None
    _positional = 3

    def apply(self, sch):
        st = _stage(sch, self.stage)
        st.pragma(st.find_iv(self.iv), self.key, self.value)


@_step("prefetch")
@dataclass(frozen=True)
class Prefetch(Step):
    stage: str
    tensor: str
    iv: str
    offset: int
    locality: int = 3
    _positional = 3

    def apply(self, sch):
        st = _stage(sch, self.stage)
        tensor = sch.tensor_by_name(self.tensor)
        st.prefetch(tensor, st.find_iv(self.iv), self.offset, self.locality)


@_step("compute_at")
@dataclass(frozen=True)
class ComputeAt(Step):
    stage: str
    parent: str
    iv: str

    def apply(self, sch):
        parent = _stage(sch, self.parent)
        _stage(sch, self.stage).compute_at(parent, parent.find_iv(self.iv))


@_step("compute_inline")
@dataclass(frozen=True)
class ComputeInline(Step):
    stage: str

    def apply(self, sch):
        _stage(sch, self.stage).compute_inline()


@_step("clamp_tails")
@dataclass(frozen=True)
class ClampTails(Step):
    stage: str

    def apply(self, sch):
        _stage(sch, self.stage).clamp_tails()


@_step("compute_root")
@dataclass(frozen=True)
class ComputeRoot(Step):
    stage: str

    def apply(self, sch):
        _stage(sch, self.stage).compute_root()


@_step("set_scope")
@dataclass(frozen=True)
class SetScope(Step):
    stage: str
    scope: str

    def apply(self, sch):
        _stage(sch, self.stage).set_scope(self.scope)


@_step("cache_read")
@dataclass(frozen=True)
class CacheRead(Step):
    tensor: str
    scope: str
    readers: tuple[str, ...]

    def apply(self, sch):
        readers = [_stage(sch, r) for r in self.readers]
        sch.cache_read(sch.tensor_by_name(self.tensor), self.scope, readers)


@_step("cache_write")
@dataclass(frozen=True)
class CacheWrite(Step):
    tensor: str
    scope: str

    def apply(self, sch):
        sch.cache_write(sch.tensor_by_name(self.tensor), self.scope)


@_step("rfactor")
@dataclass(frozen=True)
class RFactor(Step):
    tensor: str
    iv: str
    factor_axis: int = 0
    peel_tail: bool | None = None  # None: False (printed only when set)

    _positional = 3

    def apply(self, sch):
        tensor = sch.tensor_by_name(self.tensor)
        iv = sch[tensor].find_iv(self.iv)
        sch.rfactor(tensor, iv, self.factor_axis, bool(self.peel_tail))


def step_from_json(obj: dict) -> Step:
    """The step a `Step.to_json()` dict describes."""
    if not isinstance(obj, dict) or obj.get("kind") not in _STEP_KINDS:
        raise ValueError(f"not a schedule step: {obj!r}")
    cls = _STEP_KINDS[obj["kind"]]
    names = {f.name for f in fields(cls)}
    unknown = set(obj) - names - {"kind"}
    if unknown:
        raise ValueError(f"step {obj['kind']} has no field(s) {sorted(unknown)}")
    args = {k: tuple(v) if isinstance(v, list) else v for k, v in obj.items() if k != "kind"}
    return cls(**args)


def steps_to_json(steps) -> str:
    """A JSON text of a list of steps."""
    return json.dumps([s.to_json() for s in steps])


def steps_from_json(text: str) -> list[Step]:
    """The steps of a `steps_to_json` text."""
    data = json.loads(text)
    if not isinstance(data, list):
        raise ValueError("schedule steps JSON must be a list")
    return [step_from_json(d) for d in data]
