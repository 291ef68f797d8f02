"""Kernels with symbolic extents (topi/symbolic.py): each op's compute and x86 schedule built
ONCE with a symbolic dim, then run at several sizes (1, primes, below and above one tile) and
compared with numpy; the main loops of a symbolic split run without guards."""

import inspect
from dataclasses import replace

import numpy as np
import pytest

import tessera
from tessera import te, tir
from tessera.driver import TIR_PASSES
from tessera.graph.op import get_op
from tessera.ir.module import IRModule
from tessera.target import load_strategies
from tessera.topi import generic, symbolic

HOST = tessera.Target("llvm")
RNG = np.random.default_rng(13)
SIZES = (1, 2, 7, 16, 17, 53)


def schedule_for(op, outs, target=HOST):
    """The op's schedule rule for the host's keys (default config), as lowering picks it."""
    keys = target.kind_info.keys(target)
    load_strategies(keys)
    for key in keys:
        rule = op.rules.get(f"schedule:{key}")
        if rule is not None:
            if "config" in inspect.signature(rule).parameters:
                return rule(list(outs), target, config=None)
            return rule(list(outs), target)
    return generic.schedule_injective(list(outs), target)


def lower_symbolic(name, shapes, attrs, dtypes=None):
    """(placeholders, outputs, PrimFunc) of op `name` on placeholders of `shapes` (te dims)."""
    op = get_op(name)
    dtypes = dtypes or ["float32"] * len(shapes)
    pairs = enumerate(zip(shapes, dtypes, strict=True))
    args = [te.placeholder(s, d, name=f"in{k}") for k, (s, d) in pairs]
    outs = op.rules["compute"](*args, **attrs)
    outs = tuple(outs) if isinstance(outs, (tuple, list)) else (outs,)
    # a representative size of 16: the tiles and size buckets of 1..16 rows (fewer kernel
    # copies to compile than the default's), and every size above 16 runs the top tile
    with HOST, symbolic.sizes(n=16):
        s = schedule_for(op, outs)
    return args, outs, te.lower(s, [*args, *outs], name="kernel")


def check_sizes(name, shape_of, attrs=None, sizes=SIZES, rtol=1e-4, atol=1e-4):
    """Build op `name` once with the dim n symbolic; at each size compare with its reference."""
    attrs = attrs or {}
    n = te.var("n")
    _, outs, func = lower_symbolic(name, shape_of(n), attrs)
    assert n in func.scalar_vars() or any(v.name == "n" for v in func.scalar_vars())
    kernel = tessera.build(IRModule({"kernel": func}), target=HOST)["kernel"]
    op = get_op(name)
    for size in sizes:
        inputs = [RNG.standard_normal(s).astype("float32") for s in shape_of(size)]
        expected = op.evaluate(inputs, attrs)
        got = [np.full(e.shape, np.nan, e.dtype) for e in expected]
        kernel(*inputs, *got)
        for g, e in zip(got, expected, strict=True):
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, err_msg=f"{name} n={size}")


def test_elementwise_and_broadcast():
    check_sizes("add", lambda n: [(n, 37), (37,)])
    check_sizes("nn.relu", lambda n: [(2, 3, n)])  # the symbolic dim innermost (a width)
    check_sizes("multiply", lambda n: [(n, 1, 5), (1, 4, 5)])


def test_reductions():
    check_sizes("sum", lambda n: [(n, 50)], {"axis": 1, "keepdims": False})
    check_sizes("max", lambda n: [(n, 6)], {"axis": 0, "keepdims": True})  # over n


@pytest.mark.parametrize("name", ["nn.softmax", "nn.log_softmax"])
def test_softmax_rows_and_row_length(name):
    check_sizes(name, lambda n: [(n, 100)], {"axis": -1})
    check_sizes(name, lambda n: [(3, n)], {"axis": -1})  # the reduced row is symbolic
    check_sizes(name, lambda n: [(2, n, n)], {"axis": -1})


def test_layer_norm():
    attrs = {"axis": -1, "epsilon": 1e-5}
    check_sizes("nn.layer_norm", lambda n: [(n, 64), (64,), (64,)], attrs)
    check_sizes("nn.layer_norm", lambda n: [(4, n), (n,), (n,)], attrs)


def test_dense_and_matmul_with_symbolic_rows():
    check_sizes("nn.dense", lambda n: [(n, 48), (40, 48)], rtol=1e-4, atol=1e-3)
    check_sizes("nn.dense", lambda n: [(2, n, 24), (33, 24)], rtol=1e-4, atol=1e-3)
    check_sizes("matmul", lambda n: [(n, 32), (32, 20)], rtol=1e-4, atol=1e-3)


def test_packed_dense_with_symbolic_leading_dims():
    """BERT's dense layers: constant weights packed in panels, rows = batch * seq."""
    attrs = {"units": 40}
    check_sizes("nn.dense_packed", lambda n: [(n, 24), (3, 24, 16)], attrs, atol=1e-3)
    check_sizes("nn.dense_packed", lambda n: [(2, n, 24), (3, 24, 16)], attrs, atol=1e-3)


def test_packed_dense_buckets_the_product_of_two_dims():
    """Rows = batch * seq, two vars: one kernel dispatching on their product (Note [product
    buckets] in topi/symbolic.py), right at every (batch, seq)."""
    b, q = te.var("b"), te.var("q")
    attrs = {"units": 40}
    shapes = lambda b, q: [(b, q, 24), (3, 24, 16)]  # noqa: E731
    op = get_op("nn.dense_packed")
    args = [te.placeholder(s, "float32", name=f"in{k}") for k, s in enumerate(shapes(b, q))]
    (y,) = (op.rules["compute"](*args, **attrs),)
    with HOST, symbolic.sizes(b=4, q=8):
        s = schedule_for(op, [y])
    assert isinstance(s, te.SizeDispatch) and "b" in str(s.size) and "q" in str(s.size)
    func = te.lower(s, [*args, y], name="kernel")
    kernel = tessera.build(IRModule({"kernel": func}), target=HOST)["kernel"]
    for sizes in ((1, 1), (1, 3), (2, 5), (3, 7), (5, 13)):
        inputs = [RNG.standard_normal(sh).astype("float32") for sh in shapes(*sizes)]
        (expected,) = op.evaluate(inputs, attrs)
        got = np.full(expected.shape, np.nan, "float32")
        kernel(*inputs, got)
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-3, err_msg=str(sizes))


def test_batch_matmul_symbolic_batch_rows_columns_and_k():
    check_sizes("nn.batch_matmul", lambda n: [(n, 5, 8), (n, 6, 8)], {"transpose_b": True})
    # attention: seq in rows and columns (q @ k.T), then in k (p @ v)
    qk = {"transpose_b": True}
    check_sizes("nn.batch_matmul", lambda n: [(3, n, 16), (3, n, 16)], qk, atol=1e-3)
    pv = {"transpose_b": False}
    check_sizes("nn.batch_matmul", lambda n: [(3, n, n), (3, n, 16)], pv, atol=1e-3)


def test_transpose_and_pooling():
    check_sizes("transpose", lambda n: [(n, 3, 5)], {"axes": [1, 0, 2]})
    pool = {"pool_size": (2, 2), "strides": (2, 2), "padding": (0, 0, 1, 1), "dilation": (1, 1)}
    check_sizes("nn.max_pool2d", lambda n: [(1, 3, 6, n)], pool, sizes=(1, 2, 7, 16))
    avg = dict(pool, ceil_mode=1, count_include_pad=0)
    check_sizes("nn.avg_pool2d", lambda n: [(n, 2, 5, 5)], avg, sizes=(1, 3))
    # ceil_mode over a symbolic width: the output width is an expression
    ceil = {"pool_size": (3, 3), "strides": (2, 2), "padding": (1, 1, 1, 1), "ceil_mode": 1}
    check_sizes("nn.max_pool2d", lambda n: [(1, 2, 5, n)], ceil, sizes=(1, 2, 5, 8, 9))
    check_sizes("nn.avg_pool2d", lambda n: [(1, 2, 5, n)], dict(ceil, count_include_pad=1),
                sizes=(1, 4, 7))  # fmt: skip


def _stores(stmt, guarded=False, out=None):
    """(buffer name, under a likely guard?) of every store in stmt."""
    out = [] if out is None else out
    if isinstance(stmt, tir.BufferStore):
        out.append((stmt.buffer.name, guarded))
    elif isinstance(stmt, tir.IfThenElse):  # a likely guard (not a size bucket's branch)
        cond = stmt.condition
        guard = guarded or (isinstance(cond, tir.Call) and cond.op == "likely")
        _stores(stmt.then_case, guard, out)
        if stmt.else_case is not None:
            _stores(stmt.else_case, guard, out)
    elif isinstance(stmt, tir.SeqStmt):
        for s in stmt.seq:
            _stores(s, guarded, out)
    elif hasattr(stmt, "body"):
        _stores(stmt.body, guarded, out)
    return out


def test_matrix_product_micro_kernel_runs_unguarded_on_every_tile():
    """Note [clamped tails]: the accumulators of a symbolic product are computed without a
    guard, also in the tail tiles; only the stores of the output are guarded there, and the
    main tiles store unguarded (partition_loop)."""
    n = te.var("n")
    _, _, func = lower_symbolic("nn.batch_matmul", [(3, n, 16), (3, n, 16)], {"transpose_b": True})
    for p in TIR_PASSES:
        func = p(func)
    stores = _stores(func.body)
    acc = [g for name, g in stores if ".local" in name]
    out = [g for name, g in stores if name == "batch_matmul"]
    assert acc and not any(acc)
    assert False in out and True in out


def test_fused_symbolic_loop_needs_no_guard():
    """te's Note [shape vars are positive]: the fused rows of a (12, n) tensor give
    floordiv(f, n) < 12 without a guard."""
    n = te.var("n")
    x = te.placeholder((12, n, 8), name="x")
    y = te.compute(x.shape, lambda a, b, c: x[a, b, c] * 2.0, name="y")
    s = te.create_schedule(y.op)
    s[y].fuse(*y.op.axis[:2])
    func = te.lower(s, [x, y])
    assert not any(g for _, g in _stores(func.body))


def test_representative_sizes():
    n, w = te.var("n"), te.var("w")
    assert symbolic.representative(7) == 7
    assert symbolic.representative(n) == symbolic.UNKNOWN_SIZE
    with symbolic.sizes(n=128, w=(32, 2048)):
        assert symbolic.representative(n * 3) == 384
        assert symbolic.representative(w) == 2048
        assert symbolic.representative("n*w//4") == 128 * 2048 // 4
        with symbolic.sizes(n=2):
            assert symbolic.representative_shape((n, 5)) == [2, 5]
    with pytest.raises(ValueError, match="positive"):
        symbolic.sizes(n=0)


def test_schedule_rules_take_the_representative_size():
    """The tiles of a symbolic product are the rules' at the representative size: the size
    given by the caller (a bucket of small batches) changes the register tile."""
    from tessera.topi.strategy import ConfigRecord

    def recorded(size):
        n = te.var("n")
        args = [te.placeholder((n, 64)), te.placeholder((48, 64))]
        y = get_op("nn.dense").rules["compute"](*args)
        with symbolic.sizes(n=size), HOST:
            s = schedule_for(get_op("nn.dense"), [y])
        (rec,) = [st for st in s.steps if isinstance(st, ConfigRecord)]
        return dict(rec.values)

    assert recorded(1)["mr"] == 1
    assert recorded(4096)["mr"] > 1


@pytest.mark.parametrize(
    "padding, strides, groups",
    [
        ((1, 1, 1, 1), (1, 1), 1),
        pytest.param((0, 0, 0, 0), (2, 2), 1, marks=pytest.mark.slow),
        pytest.param((1, 1, 1, 1), (1, 1), 16, marks=pytest.mark.slow),  # depthwise
    ],
)
def test_conv2d_nchwc_symbolic_width_and_batch(padding, strides, groups):
    """OCR: a text line of any width; a detector: any batch (blocked data, static channels)."""
    cin, cout, ib, ob = 16, 32 if groups == 1 else 16, 8, 8
    icg = 1 if groups > 1 else cin // ib
    wshape = (cout // ob, icg, 3, 3, 1 if groups > 1 else ib, ob)
    attrs = {"strides": strides, "padding": padding, "dilation": (1, 1), "groups": groups}
    check_sizes(
        "nn.conv2d_nchwc",
        lambda n: [(1, cin // ib, 6, n, ib), wshape],
        attrs,
        sizes=(3, 5, 16, 37),
        atol=1e-3,
    )
    check_sizes(
        "nn.conv2d_nchwc", lambda n: [(n, cin // ib, 5, 7, ib), wshape], attrs, sizes=(1, 3),
        atol=1e-3,
    )  # fmt: skip


def test_strategies_give_symbolic_workloads_their_knobs():
    """A graph workload with a named dim (BERT's rows) gets the blocked / packed / rows
    implementations with knobs at the representative size, and size buckets (Note [size
    buckets]); the schedule built with that config runs at every size."""
    from tessera.topi.strategy import Workload, find_strategy

    dense = Workload("nn.dense", (((("n"), 64), "float32"), ((48, 64), "float32")), (),
                     (False, True), ("n", 48))  # fmt: skip
    strat = find_strategy("nn.dense", HOST)
    config = strat.default(dense, HOST, {"rewrite": False})
    assert config.impl == "blocked" and config["size_buckets"] is True
    with symbolic.sizes(n=8):
        small = strat.default(dense, HOST, {"rewrite": False})
    assert small["mr"] <= 8 < config["mr"] * 2
    assert strat.default(dense, HOST, {}).impl == "packed"
    rows = Workload("nn.softmax", ((("b", "s", 128), "float32"),), (("axis", -1),), (False,),
                    ("b", "s", 128))  # fmt: skip
    assert find_strategy("nn.softmax", HOST).default(rows, HOST, {}).impl == "rows"
    conv_attrs = (("dilation", (1, 1)), ("groups", 1), ("padding", (1, 1, 1, 1)),
                  ("strides", (1, 1)))  # fmt: skip
    conv = Workload("nn.conv2d", (((1, 64, 32, "w"), "float32"), ((64, 64, 3, 3), "float32")),
                    conv_attrs, (False, True), (1, 64, 32, "w"))  # fmt: skip
    # an OCR line of any width: the direct blocked conv (Winograd's tiles are per size)
    assert find_strategy("nn.conv2d", HOST).default(conv, HOST, {}).impl == "direct_nchwc"
    # the config's tile for the top bucket, the rules' below it
    n = te.var("n")
    x, w = te.placeholder((n, 64), name="x"), te.placeholder((48, 64), name="w")
    y = get_op("nn.dense").rules["compute"](x, w)
    from tessera.topi.x86.batch_matmul import schedule_matmul

    with HOST:
        s = schedule_matmul([y], HOST, config=config)
    assert isinstance(s, te.SizeDispatch)
    kernel = tessera.build(IRModule({"k": te.lower(s, [x, w, y], name="k")}), target=HOST)["k"]
    for size in (1, 5, 70):
        a, b = RNG.standard_normal((size, 64), "float32"), RNG.standard_normal((48, 64), "float32")
        out = np.empty((size, 48), "float32")
        kernel(a, b, out)
        np.testing.assert_allclose(out, a @ b.T, rtol=1e-4, atol=1e-3)


@pytest.mark.slow
def test_c_target_runs_the_same_symbolic_kernels():
    """The C code generator takes the same TIR: clamped tails, size buckets, row buffers of
    symbolic length (allocated per row there)."""
    cases = [
        ("nn.softmax", lambda n: [(3, n)], {"axis": -1}),
        ("nn.batch_matmul", lambda n: [(2, n, 8), (2, n, 8)], {"transpose_b": True}),
    ]
    n = te.var("n")
    funcs = {}
    for k, (name, shape_of, attrs) in enumerate(cases):
        funcs[f"k{k}"] = replace(lower_symbolic(name, shape_of(n), attrs)[2], name=f"k{k}")
    mod = tessera.build(IRModule(funcs), target="c")
    for k, (name, shape_of, attrs) in enumerate(cases):
        for size in (1, 5, 33):
            inputs = [RNG.standard_normal(s).astype("float32") for s in shape_of(size)]
            (expected,) = get_op(name).evaluate(inputs, attrs)
            out = np.empty(expected.shape, expected.dtype)
            mod[f"k{k}"](*inputs, out)
            np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)
