"""topi/strategy.py: config spaces are data (enumerate, sample, validate without building),
strategies pick defaults by their rules, given configs win, and tasks are recorded."""

import random

import pytest

import tessera
from tessera.graph.parser import parse
from tessera.topi import strategy as S
from tessera.topi.strategy import Config, ConfigSpace, Knob, Task, Workload

HOST = tessera.Target("llvm")


def test_space_enumerates_only_valid_assignments():
    space = ConfigSpace(
        [Knob("a", (1, 2, 3, 4)), Knob("b", (1, 2))], [lambda v: v["a"] * v["b"] <= 4]
    )
    got = list(space.enumerate())
    assert len(got) == space.size() == 6
    assert {"a": 3, "b": 2} not in got and {"a": 4, "b": 1} in got
    rng = random.Random(0)
    samples = [space.sample(rng) for _ in range(50)]
    assert all(space.valid(s) for s in samples)
    assert len({tuple(sorted(s.items())) for s in samples}) > 3  # not one value
    assert not space.valid({"a": 5, "b": 1}) and not space.valid({"a": 4, "b": 2})


def test_config_is_an_immutable_hashable_mapping():
    c = Config("direct", b=2, a=1)
    assert c.impl == "direct" and dict(c) == {"impl": "direct", "a": 1, "b": 2}
    assert c == Config("direct", {"a": 1, "b": 2}) and len({c, Config("direct", a=1, b=2)}) == 1
    assert c != Config("other", a=1, b=2)
    assert repr(c) == "Config('direct', a=1, b=2)"
    assert Config.from_json(c.to_json()) == c


def _call(text):
    return parse(text).body[0]


def _demo_strategy():
    st = S.OpStrategy("nn.relu", "x86")  # registered only where a test patches it in

    @st.implementation("plain")
    def _(wl, target):
        return ConfigSpace()

    @st.implementation("split", priority=1)
    def _(wl, target):
        n = wl.shape(0)[0]
        if n % 2:
            return None  # odd lengths: not applicable
        return ConfigSpace([Knob("factor", (1, 2, 4, 8), default=lambda wl, t, ctx: min(8, n))])

    return st


def test_default_is_the_applicable_implementation_of_highest_priority():
    st = _demo_strategy()
    even = Workload.of(_call("def main(%x: f32[16]) { %1 = nn.relu(%x); return %1 }"))
    odd = Workload.of(_call("def main(%x: f32[15]) { %1 = nn.relu(%x); return %1 }"))
    assert st.default(even, HOST, {}) == Config("split", factor=8)
    assert st.default(odd, HOST, {}) == Config("plain")


def test_choose_gives_the_configured_value_and_records_the_task(monkeypatch):
    st = _demo_strategy()
    monkeypatch.setitem(S._STRATEGIES, ("nn.relu", "x86"), st)
    call = _call("def main(%x: f32[16]) { %1 = nn.relu(%x); return %1 }")
    target = tessera.Target("llvm -mtriple=x86_64-linux-gnu")
    with S.record_tasks() as seen:
        task, config = S.choose(call, target)
    assert seen == [task] and task.key == "x86" and config == Config("split", factor=8)
    assert [c["factor"] for c in task.configs(target) if c.impl == "split"] == [1, 2, 4, 8]
    with S.use_configs({task: Config("split", factor=2)}, target):
        assert S.choose(call, target)[1] == Config("split", factor=2)
    with pytest.raises(ValueError, match="not a valid config"):
        S.use_configs({task: Config("split", factor=3)}, target)


def test_workload_identity_ignores_which_inputs_are_constants():
    a = Workload("matmul", (((2, 3), "float32"), ((3, 4), "float32")), (), (False, True), (2, 4))
    b = Workload("matmul", (((2, 3), "float32"), ((3, 4), "float32")), (), (False, False), (2, 4))
    assert (
        a == b
        and Task(a, "cpu") == Task(b, "cpu")
        and Task(a, "cpu").digest() == Task(b, "cpu").digest()
    )
