"""Op strategies: how an op runs on a target, as implementations with config spaces of knobs.

    conv = register_strategy("nn.conv2d", "x86")

    @conv.implementation("winograd", priority=2)
    def _(wl: Workload, target) -> ConfigSpace | None:      # None: does not apply to wl
        return ConfigSpace([Knob("tile", (2, 4), default=4)])

    task = Task.of(call, target)           # the op call's workload, for the target's key
    task.space().sample(rng)               # Config(impl="winograd", tile=2)
    choose(call, target)                   # the config to build with: given, else the default

A strategy is keyed by (op name, strategy key) (the keys come from the target table:
`Target.kind_info.keys(target)`, "x86", "generic"). Each implementation declares, for a
workload, its config space: named knobs with candidate values, constraints between them, and a
default computed by the hand rule (`default=` a value or a function of the workload). The space
exists without building anything: enumerate it, sample it, hash it. A `Config` is a small
frozen mapping (with the implementation's name under "impl"); graph passes write it into the
attrs of the op they emit (`config=` as (name, value) pairs), lowering hands it to the
schedule, and the schedule records it with its steps (`record_config`). Configs chosen for a
build come from `use_configs({task: config})` (what `tessera.build(..., configs=)` enters);
anything not given takes the default. A strategy's default may read `context` (facts a graph
pass knows, such as the block of a conv's input) so that the default is exactly the hand rule.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from tessera.te.steps import Step, _step

# -- knobs, spaces, configs ------------------------------------------------------------------------


@dataclass(frozen=True)
class Knob:
    """A named decision with its candidate values; `default`: a value, or a function of
    (workload, target, context) giving the hand rule's value (one of the candidates);
    `before`: where the knob was added with a default that is not the behaviour before it, that
    behaviour's value (a tuning record written before the knob takes it: Note [added knobs] in
    autotune/records.py); () where the default is."""

    name: str
    candidates: tuple
    default: object = None
    before: object = ()

    def __post_init__(self):
        if not self.candidates:
            raise ValueError(f"knob {self.name!r} has no candidates")


class Config(Mapping):
    """The knob values of one implementation: an immutable, hashable mapping, "impl" first."""

    __slots__ = ("_items",)

    def __init__(self, impl: str, values: Mapping | None = None, **kwargs):
        items = dict(values or {}, **kwargs)
        self._items = (("impl", impl), *sorted(items.items()))

    @property
    def impl(self) -> str:
        return self._items[0][1]

    def __getitem__(self, key):
        for k, v in self._items:
            if k == key:
                return v
        raise KeyError(key)

    def __iter__(self):
        return (k for k, _ in self._items)

    def __len__(self):
        return len(self._items)

    def __eq__(self, other):
        return isinstance(other, Config) and self._items == other._items

    def __hash__(self):
        return hash(self._items)

    def __repr__(self) -> str:
        rest = ", ".join(f"{k}={v!r}" for k, v in self._items[1:])
        return f"Config({self.impl!r}{', ' + rest if rest else ''})"

    def knobs(self) -> dict:
        return dict(self._items[1:])

    def as_attr(self) -> tuple:
        """The config as a graph attribute value: ((name, value), ...)."""
        return self._items

    @staticmethod
    def from_attr(value) -> Config:
        items = dict(value)
        return Config(items.pop("impl"), items)

    def to_json(self) -> str:
        return json.dumps(dict(self._items), sort_keys=True)

    @staticmethod
    def from_json(text: str) -> Config:
        items = json.loads(text)
        return Config(items.pop("impl"), items)


@dataclass(frozen=True)
class ConfigSpace:
    """The knobs of one implementation for one workload, and constraints between them
    (functions of the knob dict that must hold for a valid config)."""

    knobs: tuple[Knob, ...] = ()
    constraints: tuple[Callable[[dict], bool], ...] = ()

    def __init__(self, knobs=(), constraints=()):
        object.__setattr__(self, "knobs", tuple(knobs))
        object.__setattr__(self, "constraints", tuple(constraints))

    def valid(self, values: Mapping) -> bool:
        for k in self.knobs:
            if values.get(k.name) not in k.candidates:
                return False
        return all(c(dict(values)) for c in self.constraints)

    def enumerate(self) -> Iterator[dict]:
        """Every valid assignment of the knobs (in candidate order)."""
        names = [k.name for k in self.knobs]
        for combo in itertools.product(*(k.candidates for k in self.knobs)):
            values = dict(zip(names, combo, strict=True))
            if all(c(values) for c in self.constraints):
                yield values

    def sample(self, rng: random.Random, tries: int = 1000) -> dict:
        """A uniformly drawn valid assignment (rejection sampling, then the first valid one)."""
        for _ in range(tries):
            values = {k.name: rng.choice(k.candidates) for k in self.knobs}
            if all(c(values) for c in self.constraints):
                return values
        return next(self.enumerate())

    def size(self) -> int:
        return sum(1 for _ in self.enumerate())


# -- workloads and tasks ---------------------------------------------------------------------------


def _plain(v):
    if isinstance(v, (tuple, list)):
        return tuple(_plain(x) for x in v)
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return str(v)


@dataclass(frozen=True)
class Workload:
    """What a kernel computes, as plain data: the op, its input types, its attributes, and
    which inputs are constants (weights a graph pass may re-pack)."""

    op: str
    inputs: tuple  # ((shape, dtype), ...)
    attrs: tuple  # ((name, value), ...), sorted
    # one bool per input; not part of the identity: inside a fused group a weight is a
    # parameter, and the group's kernel must find the task the graph passes saw
    constant: tuple = field(default=(), compare=False)
    output: tuple = ()  # the first output's shape

    @staticmethod
    def of(call) -> Workload:
        from tessera.graph.ir import Constant

        inputs = tuple((tuple(v.type.shape), str(v.type.dtype)) for v in call.inputs)
        attrs = tuple((k, _plain(v)) for k, v in call.attrs.items() if k != "config")
        constant = tuple(isinstance(v, Constant) for v in call.inputs)
        output = tuple(call.outputs[0].type.shape) if call.outputs else ()
        return Workload(call.op.name, inputs, attrs, constant, output)

    def attr(self, name: str, default=None):
        return dict(self.attrs).get(name, default)

    def shape(self, i: int) -> tuple:
        return self.inputs[i][0]

    def dtype(self, i: int) -> str:
        return self.inputs[i][1]


def _short(v) -> str:
    return "[" + ", ".join(_short(x) for x in v) + "]" if isinstance(v, tuple) else str(v)


@dataclass(frozen=True)
class Task:
    """A workload for a strategy key: what a tuner searches a config for."""

    workload: Workload
    key: str

    @staticmethod
    def of(call, target) -> Task | None:
        """The task of a graph call for the target, or None when no strategy has the op."""
        found = find_strategy(call.op.name, target)
        return None if found is None else Task(Workload.of(call), found.key)

    @property
    def strategy(self) -> OpStrategy:
        return _STRATEGIES[(self.workload.op, self.key)]

    def implementations(self, target) -> dict[str, ConfigSpace]:
        """The implementations that apply, with their config spaces."""
        out = {}
        for impl in self.strategy.implementations:
            space = impl.space(self.workload, target)
            if space is not None:
                out[impl.name] = space
        return out

    def configs(self, target) -> Iterator[Config]:
        """Every valid config of every applicable implementation."""
        for name, space in self.implementations(target).items():
            for values in space.enumerate():
                yield Config(name, values)

    def sample(self, target, rng: random.Random) -> Config:
        """A random valid config: an implementation, then its knobs."""
        impls = self.implementations(target)
        name = rng.choice(sorted(impls))
        return Config(name, impls[name].sample(rng))

    def default(self, target, context: Mapping | None = None) -> Config:
        return self.strategy.default(self.workload, target, context or {})

    def valid(self, config: Config, target) -> bool:
        space = self.implementations(target).get(config.impl)
        return space is not None and space.valid(config.knobs())

    def digest(self) -> str:
        """A stable name of the task (what a tuning record is keyed by, with the target)."""
        wl = self.workload
        text = repr((self.key, wl.op, wl.inputs, wl.attrs, wl.output))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def __str__(self) -> str:
        shapes = [f"{d}{list(s)}" for s, d in self.workload.inputs]
        attrs = [f"{k}={_short(v)}" for k, v in self.workload.attrs]
        return f"{self.key}:{self.workload.op}({', '.join(shapes + attrs)})"


# -- strategies ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Implementation:
    """One way to run the op: `space(workload, target)` gives its config space, or None when
    it does not apply to the workload."""

    name: str
    space: Callable[[Workload, object], ConfigSpace | None]
    priority: int = 0
    # graph passes ask it which layout / packing the config wants (see the strategy module of
    # the op, e.g. topi/x86/strategy.py); None: the op is kept as it is
    layout: Callable | None = None


@dataclass
class OpStrategy:
    """The implementations of one op for one strategy key, and the rule that picks the
    default implementation (`default_rule(workload, target, context) -> impl name`; by
    default the applicable implementation of highest priority)."""

    op: str
    key: str
    implementations: list[Implementation] = field(default_factory=list)
    default_rule: Callable | None = None

    def implementation(self, name: str, priority: int = 0, layout: Callable | None = None):
        """@strategy.implementation("direct") registers a space function for `name`;
        `layout`: what graph passes ask for the layout and packing a config wants."""

        def register(fn):
            self.implementations.append(Implementation(name, fn, priority, layout))
            return fn

        return register

    def get(self, name: str) -> Implementation:
        for impl in self.implementations:
            if impl.name == name:
                return impl
        raise KeyError(f"strategy {self.op}/{self.key} has no implementation {name!r}")

    def choose_default(self, fn):
        """@strategy.choose_default: the hand rule picking the implementation."""
        self.default_rule = fn
        return fn

    def space(self, name: str, workload: Workload, target) -> ConfigSpace | None:
        return self.get(name).space(workload, target)

    def default(self, workload: Workload, target, context: Mapping) -> Config:
        """Today's hand rules: the default implementation and the default of each knob."""
        if self.default_rule is not None:
            name = self.default_rule(workload, target, context)
        else:
            ok = [i for i in self.implementations if i.space(workload, target) is not None]
            if not ok:
                raise ValueError(f"no implementation of {self.op}/{self.key} applies to {workload}")
            name = max(ok, key=lambda i: i.priority).name
        space = self.space(name, workload, target)
        values = {}
        for k in space.knobs:
            d = k.default(workload, target, context) if callable(k.default) else k.default
            values[k.name] = k.candidates[0] if d is None else d
        return Config(name, values)


_STRATEGIES: dict[tuple[str, str], OpStrategy] = {}


def register_strategy(op: str, key: str) -> OpStrategy:
    """The strategy of `op` for strategy key `key` (created on first use)."""
    if (op, key) not in _STRATEGIES:
        _STRATEGIES[(op, key)] = OpStrategy(op, key)
    return _STRATEGIES[(op, key)]


def find_strategy(op: str, target) -> OpStrategy | None:
    """The strategy of `op` for the most specific of the target's keys that has one."""
    from tessera.target import load_strategies

    keys = target.kind_info.keys(target)
    load_strategies(keys)
    for key in keys:
        if (op, key) in _STRATEGIES:
            return _STRATEGIES[(op, key)]
    return None


# -- the configs of a build ------------------------------------------------------------------------

_CONFIG_SCOPE: list[dict] = []


class use_configs:
    """`with use_configs({task: config}):` the configs that `choose` returns for those tasks
    (what `tessera.build(..., configs=)` enters). Each config is checked against its task."""

    def __init__(self, configs: Mapping | None, target=None):
        self.configs = dict(configs or {})
        for task, config in self.configs.items():
            if not isinstance(task, Task) or not isinstance(config, Config):
                raise TypeError(f"configs: expected {{Task: Config}}, got {task!r}: {config!r}")
            if target is not None and not task.valid(config, target):
                raise ValueError(f"configs: {config} is not a valid config of task {task}")

    def __enter__(self):
        _CONFIG_SCOPE.append(self.configs)
        return self

    def __exit__(self, *exc):
        _CONFIG_SCOPE.pop()


def given_config(task: Task) -> Config | None:
    """The config given for `task` by the innermost `use_configs`, or None."""
    for configs in reversed(_CONFIG_SCOPE):
        if task in configs:
            return configs[task]
    return None


_COMPUTE_SCOPE: list = []


class computing_with:
    """`with computing_with(config):` the config of the group whose computes run inside, for
    compute rules that take a knob (`compute_config`; lowering enters it per fused group)."""

    def __init__(self, config: Config | None):
        self.config = config

    def __enter__(self):
        _COMPUTE_SCOPE.append(self.config)
        return self

    def __exit__(self, *exc):
        _COMPUTE_SCOPE.pop()


def compute_config() -> Config | None:
    """The config of the group being computed (`computing_with`), or None outside one."""
    return _COMPUTE_SCOPE[-1] if _COMPUTE_SCOPE else None


_RECORDERS: list[list] = []


class _Recorded(list):
    """The tasks asked for, in order; `contexts[task]`: the context of its first ask (the
    layout a graph pass gave it, e.g. alter_layout's input block)."""

    def __init__(self):
        super().__init__()
        self.contexts: dict = {}


class record_tasks:
    """`with record_tasks() as tasks:` lists every task `choose` is asked for (extract_tasks)."""

    def __enter__(self) -> list:
        _RECORDERS.append(_Recorded())
        return _RECORDERS[-1]

    def __exit__(self, *exc):
        _RECORDERS.pop()


def choose(call, target, context: Mapping | None = None) -> tuple[Task, Config] | None:
    """(task, config) for a graph call: the given config, else the default; None when no
    strategy covers the op for this target."""
    task = Task.of(call, target)
    if task is None:
        return None
    for seen in _RECORDERS:
        seen.append(task)
        seen.contexts.setdefault(task, dict(context or {}))
    config = given_config(task)
    return task, config if config is not None else task.default(target, context)


def plan_layout(call, target, context: Mapping | None = None) -> dict | None:
    """What a graph pass asks: the layout and packing the chosen config of `call` wants, from
    its implementation's layout hook (a dict: "op", "weight", "attrs", blocks), or None when
    the op is kept as it is. The config goes into "attrs" only when it is not the default:
    a kernel without one is scheduled by the hand rules, which the defaults are."""
    context = dict(context or {})
    chosen = choose(call, target, context)
    if chosen is None:
        return None
    task, config = chosen
    impl = task.strategy.get(config.impl)
    if impl.layout is None:
        return None
    from tessera.graph.ir import Constant

    weights = [v.array for v in call.inputs[1:2] if isinstance(v, Constant)]
    plan = impl.layout(task.workload, config, context, target, weights[0] if weights else None)
    if plan is not None and config == task.default(target, context):
        plan["attrs"] = {k: v for k, v in plan["attrs"].items() if k != "config"}
    return plan


# -- configs recorded with the schedule ------------------------------------------------------------


@_step("config")
@dataclass(frozen=True)
class ConfigRecord(Step):
    """The knob values a schedule was built with, recorded among its steps (replay: no-op)."""

    values: tuple  # ((name, value), ...)

    def apply(self, sch) -> None:
        return None

    def __str__(self) -> str:
        return "config(" + ", ".join(f"{k}={v}" for k, v in self.values) + ")"


def recorded_config(s) -> tuple | None:
    """The knob values recorded with a schedule's steps (the last record), or None."""
    records = [st for st in s.steps if isinstance(st, ConfigRecord)]
    return records[-1].values if records else None


def record_config(s, config: Config | None) -> None:
    """Record `config` with the schedule's steps."""
    if config is not None:
        s.steps.append(ConfigRecord(tuple(config.as_attr())))
