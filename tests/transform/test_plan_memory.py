import numpy as np
import pytest

from tessera.graph import Call, Function, TensorType, Value, get_op, parse, run_function
from tessera.transform import PassContext, fuse_ops, plan_memory


def _chain(n, shape="16, 16"):
    calls = "; ".join(f"%a{i} = exp(%a{i - 1})" for i in range(1, n + 1))
    return parse(f"def main(%a0: f32[{shape}]) {{ {calls}; return %a{n} }}")


def _overlap(a, b):
    return a.start <= b.end and b.start <= a.end


def _check_plan(func, plan):
    for a in plan.allocations:
        assert a.offset % plan.alignment == 0
        assert a.nbytes >= a.value.type.size * a.value.type.dtype.itemsize
        assert a.offset + a.nbytes <= plan.arena_bytes
    allocs = plan.allocations
    for i, a in enumerate(allocs):  # every pair: live together means disjoint bytes
        for b in allocs[i + 1 :]:
            if _overlap(a, b):
                assert a.offset + a.nbytes <= b.offset or b.offset + b.nbytes <= a.offset, (a, b)
    assert plan.peak_live_bytes <= plan.arena_bytes <= plan.naive_bytes


def _run_in_arena(func, plan, inputs):
    """Run `func` keeping every planned value in one byte arena: a bad plan clobbers data."""
    arena = np.zeros(plan.arena_bytes, np.uint8)
    env = {id(p): inputs[p.name] for p in func.params}
    env.update({id(c): c.array for c in func.constants})
    planned = {id(a.value): a for a in plan.allocations}

    def read(v):
        if id(v) not in planned:
            return env[id(v)]
        a = planned[id(v)]
        raw = arena[a.offset : a.offset + v.type.size * v.type.dtype.itemsize]
        return raw.view(v.type.dtype.numpy_name).reshape(v.type.shape)

    for call in func.body:
        results = call.op.evaluate([read(v) for v in call.inputs], call.attrs)
        for v, r in zip(call.outputs, results, strict=True):
            if id(v) in planned:
                a = planned[id(v)]
                arena[a.offset : a.offset + r.nbytes] = (
                    np.ascontiguousarray(r).view(np.uint8).ravel()
                )
            else:
                env[id(v)] = r
    return [read(v) for v in func.outputs]


def test_chain_reuses_two_buffers():
    func = _chain(6)
    plan = plan_memory(func)
    assert len(plan.allocations) == 5  # %a6 is the output: the caller's
    assert plan.naive_bytes == 5 * 1024
    assert plan.arena_bytes == 2 * 1024 < plan.naive_bytes
    assert {plan.offset(a.value) for a in plan.allocations} == {0, 1024}
    _check_plan(func, plan)


def test_sizes_are_aligned_and_odd_sizes_pack():
    func = parse(
        """def main(%x: f32[3]) {
          %a = exp(%x); %b = cast(%a, dtype=u8); %c = cast(%b, dtype=f32); %d = add(%c, %a);
          return %d }"""
    )
    plan = plan_memory(func)
    assert [a.nbytes for a in plan.allocations] == [64, 64, 64]
    assert plan.arena_bytes == 192  # %a lives to the end, %b and %c overlap at the cast
    with pytest.raises(ValueError, match="power of two"):
        plan_memory(func, alignment=48)
    assert plan_memory(func, alignment=16).arena_bytes == 48


def test_bigger_first_then_first_fit_into_the_gap():
    func = parse(
        """def main(%x: f32[256]) {
          %big = exp(%x); %s = sum(%big, axis=[0]); %e = exp(%s); %f = multiply(%x, %e);
          %g = exp(%f); %h = add(%g, %x); return %h }"""
    )
    plan = plan_memory(func)
    _check_plan(func, plan)
    assert plan.arena_bytes == 2048  # %g and %f (1 KiB each) reuse %big's bytes and the next


@pytest.mark.parametrize("seed", range(15))
def test_random_dags_never_share_live_bytes(seed, make_random_dag, same_outputs):
    func = parse(make_random_dag(seed, num_calls=16))
    for f in (func, fuse_ops(func)):
        plan = plan_memory(f)
        _check_plan(f, plan)
        inputs = {"x": np.random.default_rng(seed).standard_normal((4, 6)).astype("f4")}
        want = run_function(f, inputs)
        got = _run_in_arena(f, plan, inputs)
        for w, g in zip(want, got, strict=True):
            np.testing.assert_array_equal(g, w)


def test_fused_model_plan_and_outputs_not_planned():
    func = parse(
        """def main(%x: f32[1, 3, 8, 8], %w: f32[4, 3, 3, 3]) {
          %1 = nn.conv2d(%x, %w, strides=[1, 1], padding=[1, 1, 1, 1], dilation=[1, 1]);
          %2 = nn.relu(%1); %3 = nn.softmax(%2, axis=1); %4 = exp(%3); %5 = nn.softmax(%4);
          return %5, %3 }"""
    )
    with PassContext(opt_level=3):
        fused = fuse_ops(func)
    plan = plan_memory(fused)
    names = [a.value.name for a in plan.allocations]
    assert names == ["2", "4"]  # %3 and %5 are outputs
    _check_plan(fused, plan)
    assert "arena" in str(plan)


def test_errors():
    with pytest.raises(TypeError, match="graph Function"):
        plan_memory(42)
    x = Value("x", TensorType(("n",), "f32"))
    func = parse("def main(%x: f32[4]) { %a = exp(%x); %b = exp(%a); return %b }")
    sym = Value("a", TensorType(("n",), "f32"))
    y = Value("y", TensorType(("n",), "f32"))
    bad = Function(
        "main",
        (x,),
        (Call(get_op("exp"), (x,), {}, (sym,)), Call(get_op("exp"), (sym,), {}, (y,))),
        (y,),
    )
    with pytest.raises(ValueError, match="symbolic shape"):
        plan_memory(bad)
    with pytest.raises(KeyError, match="not an intermediate"):
        plan_memory(func).offset(func.outputs[0])
    assert plan_memory(parse("def main(%x: f32[4]) { return %x }")).arena_bytes == 0


def _views_model():
    """Reshapes of an intermediate (read twice, late), of an output's source, of the input."""
    return parse(
        """def main(%x: f32[4, 6], %w: f32[8, 6]) {
          %a = nn.dense(%x, %w); %b = reshape(%a, newshape=[2, 16]); %c = max(%b, axis=[1]);
          %e = sum(%x, axis=[0, 1], keepdims=true); %g = reshape(%e, newshape=[1]);
          %h = nn.softmax(%b, axis=1); %i = reshape(%x, newshape=[6, 4]);
          return %h, %g, %c, %i }"""
    )


def _fused_views_model():
    with PassContext(opt_level=3):
        return fuse_ops(_views_model())


def test_view_calls_share_their_sources_bytes():
    fused = _fused_views_model()
    plan = plan_memory(fused, views=True)
    assert {v.name: s.name for v, s in plan.views} == {"b": "a", "g": "e", "i": "x"}
    assert [(s.name, k) for s, k in plan.in_outputs] == [("e", 1)]  # %e writes output 1
    a = {x.value.name: x for x in plan.allocations}
    assert set(a) == {"a"}  # no bytes for the views, none for %e
    softmax = next(i for i, c in enumerate(fused.body) if c.outputs[0].name == "h")
    assert a["a"].end == softmax  # %b is read by the softmax: %a lives to it
    _check_plan(fused, plan)
    assert plan_memory(fused).views == ()  # not asked for: every call planned as before


def test_view_calls_are_not_made_and_outputs_match():
    import tessera
    from tessera.ir.module import IRModule
    from tessera.runtime import GraphModule

    lib = tessera.build(IRModule({"main": _views_model()}), target="llvm")
    kernels = [c["kernel"] for c in lib.plan["calls"]]
    assert not any("reshape" in k for k in kernels), kernels
    storage = [o["storage"] for o in lib.plan["outputs"]]
    assert storage[1] == ["output", 1] and storage[3] == ["input", 0]
    m = GraphModule(lib["default"]())
    rng = np.random.default_rng(0)
    x, w = (rng.standard_normal(s).astype(np.float32) for s in ((4, 6), (8, 6)))
    m.run(x=x, w=w)
    b = (x @ w.T).reshape(2, 16)
    soft = np.exp(b - b.max(1, keepdims=True))
    np.testing.assert_allclose(m.get_output(0).numpy(), soft / soft.sum(1, keepdims=True),
                               rtol=1e-5, atol=1e-6)  # fmt: skip
    np.testing.assert_allclose(m.get_output(1).numpy(), [x.sum()], rtol=1e-5)
    np.testing.assert_allclose(m.get_output(2).numpy(), b.max(1), rtol=1e-5)
    np.testing.assert_array_equal(m.get_output(3).numpy(), x.reshape(6, 4))
