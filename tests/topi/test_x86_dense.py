"""x86 dense / matmul / batch_matmul: the register-blocked kernels against numpy on ragged
shapes (row, column and k tails, batch > 1, 1-D data) and several vector widths; fused
epilogues (bias, erf-GELU, residual) against ONNX Runtime; the k loop's FMAs in registers."""

import math

import numpy as np
import pytest

import tessera
from tessera import te
from tessera.topi import nn as topi_nn
from tessera.topi.strategy import Config, ConfigRecord
from tessera.topi.testing import check_ops
from tessera.topi.x86 import batch_matmul as x86_bmm
from tessera.topi.x86 import dense as x86_dense
from tessera.topi.x86.asm import fma_loops, loop_summary
from tessera.topi.x86.cpu import vector_registers

RNG = np.random.default_rng(4)
HOST = tessera.Target("llvm")


def randn(*shape):
    return RNG.standard_normal(shape).astype("float32")


def runnable_targets():
    """The host, and narrower x86 vectors (AVX2, SSE) where the host runs them."""
    targets = ["llvm"]
    if HOST.llvm_triple.startswith("x86_64"):
        targets += [
            t for t in ("llvm -mcpu=haswell", "llvm -mcpu=x86-64") if tessera.Target(t).is_host
        ]
    return targets


@pytest.mark.parametrize(
    "target", ["llvm", "llvm -mcpu=haswell", "llvm -mcpu=x86-64", "llvm -mtriple=aarch64-linux-gnu"]
)
def test_blocking_fills_the_registers_by_rule(target):
    t = tessera.Target(target)
    blk = x86_dense.choose_blocking(t, 128, 768, 768)
    assert blk.lanes == t.vector_lanes("float32")
    assert blk.mr * blk.nv + blk.nv + 1 <= vector_registers(t)  # accumulators, B row, A bcast
    assert blk.nr == blk.nv * blk.lanes and blk.kc <= 768
    small = x86_dense.choose_blocking(t, 1, 5, 3)  # never a tile larger than the matrix
    assert small.mr == 1 and small.nv == math.ceil(5 / blk.lanes) and small.kc == 3
    with pytest.raises(ValueError, match="positive"):
        x86_dense.choose_blocking(t, 0, 5, 3)


@pytest.mark.parametrize("target", ["llvm -mcpu=znver4", "llvm -mcpu=haswell", "llvm -mcpu=x86-64"])
def test_fit_blocking_wastes_less_of_the_tiles(target):
    """Note [tile waste]: the tile always fits the registers, is the densest where the tiles
    are whole, and covers 77 columns with 5 vectors rather than 64 + 13."""
    t = tessera.Target(target)
    for M, N, K in [(77, 77, 64), (197, 197, 64), (40, 18710, 120), (9, 23, 7), (1, 1000, 512)]:
        fit = x86_dense.fit_blocking(t, M, N, K)
        assert fit.mr * fit.nv + fit.nv + 1 <= vector_registers(t)
        assert fit.mr <= M and fit.nv <= math.ceil(N / fit.lanes)
    for M, N, K in [(128, 768, 768), (1024, 1024, 1024)]:  # whole tiles: the densest
        assert x86_dense.fit_blocking(t, M, N, K) == x86_dense.choose_blocking(t, M, N, K)
    if t.vector_lanes("float32") == 16:
        assert x86_dense.fit_blocking(t, 77, 77, 64).nr == 80  # 5 vectors, not 64 + 13


def test_pack_weight_np_pads_the_last_panel():
    w = randn(5, 7)  # (K, N)
    p = x86_dense.pack_weight_np(w, 4, transposed=False)
    assert p.shape == (2, 5, 4)
    np.testing.assert_array_equal(p[1, :, :3], w[:, 4:])
    assert not p[1, :, 3].any()
    np.testing.assert_array_equal(x86_dense.pack_weight_np(w.T.copy(), 4, transposed=True), p)


# (data shape, units): 128 rows (21 full tiles of 6 and a tail), N and K off the blocks
DENSE_SHAPES = [
    ((1, 128, 96), 100),
    ((7, 33), 17),
    ((2, 7, 300), 64),
    ((9,), 5),
    ((3, 1), 40),
    ((70, 16), 20),
    ((40, 24), 530),
]  # tails with rows, then panels, in parallel


@pytest.mark.parametrize("target", runnable_targets())
def test_dense_packed_matches_reference(target):
    cases = []
    for xshape, units in DENSE_SHAPES:
        nr = x86_dense.panel_width(tessera.Target(target), units)
        w = randn(units, xshape[-1])
        wp = x86_dense.pack_weight_np(w, nr, transposed=True)
        cases.append(("nn.dense_packed", [randn(*xshape), wp], {"units": units}))
    check_ops(cases, target=target, schedule_target="x86", rtol=1e-4, atol=1e-4)


MATMUL = [
    ("matmul", [randn(1, 4, 37, 16), randn(1, 4, 16, 41)], {}),  # attention-like, 4-D
    ("matmul", [randn(3, 20, 9), randn(9, 70)], {}),  # a 2-D weight broadcast over batches
    ("matmul", [randn(9, 13, 8), randn(9, 8, 21)], {}),  # tails, the batch in parallel
    ("matmul", [randn(2, 1, 3, 4), randn(5, 4, 2)], {}),  # broadcast batch dims
    ("matmul", [randn(6), randn(6, 5)], {}),  # 1-D operands keep the generic schedule
    ("matmul", [randn(3, 6), randn(6)], {}),
    ("nn.batch_matmul", [randn(3, 13, 8), randn(3, 21, 8)], {"transpose_b": True}),
    ("nn.batch_matmul", [randn(1, 8, 13), randn(2, 8, 30)], {"transpose_a": True}),
    ("nn.dense", [randn(2, 7, 20), randn(33, 20)], {}),
    ("nn.dense", [randn(1, 64), randn(40, 64)], {}),
]


@pytest.mark.parametrize("target", runnable_targets())
def test_matmul_schedules_match_reference(target):
    check_ops(MATMUL, target=target, schedule_target="x86", rtol=1e-4, atol=1e-4)


def test_k_loop_keeps_the_accumulators_in_registers():
    if "fma" not in HOST.features or not HOST.llvm_triple.startswith("x86_64"):
        pytest.skip("the assembly check reads x86 FMA code")
    x = te.placeholder((1, 96, 256), name="x")
    nr = x86_dense.panel_width(HOST, 128)
    wp = te.placeholder((math.ceil(128 / nr), 256, nr), name="wp")
    y = x86_dense.dense_packed(x, wp, 128)
    s = x86_dense.schedule_dense_packed([y], HOST)
    f = tessera.build(s, [x, wp, y], target=HOST)
    loops = [loop_summary(body) for body in fma_loops(f.get_source("asm"))]
    blk = x86_dense.choose_blocking(HOST, 96, 128, 256)
    assert loops, "no loop of FMAs: a*b+c was not contracted"
    assert any(loop["fma"] >= blk.mr * blk.nv for loop in loops)
    for loop in loops:
        assert loop["stores"] == 0 and loop["stack"] == 0, loop


TAIL_PRODUCTS = [  # Note [tails]: rows and columns that do not fill whole tiles
    lambda: x86_dense.dense_packed(
        te.placeholder((40, 120), name="x"), te.placeholder((5, 120, 64), name="wp"), 290
    ),
    lambda: topi_nn.batch_matmul(
        te.placeholder((12, 197, 64), name="a"),
        te.placeholder((12, 197, 64), name="b"),
        transpose_b=True,
    ),
    lambda: topi_nn.matmul(
        te.placeholder((2, 77, 64), name="a"), te.placeholder((2, 64, 77), name="b")
    ),
]


@pytest.mark.parametrize("product", range(len(TAIL_PRODUCTS)))
def test_tails_keep_a_full_micro_kernel(product):
    """Partial tiles are peeled off: the main k loop is the whole mr x nv register block with
    its accumulators in registers (a tail's partial vector may cost LLVM a register or two)."""
    if "fma" not in HOST.features or not HOST.llvm_triple.startswith("x86_64"):
        pytest.skip("the assembly check reads x86 FMA code")
    y = TAIL_PRODUCTS[product]()
    args = [*y.op.input_tensors, y]
    while any(isinstance(t.op, te.ComputeOp) for t in args[:-1]):  # the transposing stage
        args = [u for t in args[:-1] for u in (t.op.input_tensors or [t])] + [y]
    with HOST:
        if y.op.tag == "injective":
            s = x86_dense.schedule_dense_packed([y], HOST)
        else:
            s = x86_bmm.schedule_matmul([y], HOST)
        f = tessera.build(s, args, target=HOST)
    cfg = dict(next(step for step in s.steps if isinstance(step, ConfigRecord)).values)
    loops = [loop_summary(body) for body in fma_loops(f.get_source("asm"))]
    main = max(loops, key=lambda loop: loop["fma"])
    assert main["fma"] >= cfg["mr"] * cfg["nv"], (cfg, loops)
    # a guarded tile spills its accumulators: stores in the k loop
    assert main["stores"] == 0 and main["stack"] == 0, (cfg, main)
    arrays = [randn(*[int(d.value) for d in t.shape]) for t in args[:-1]]
    out = tessera.nd.array(np.zeros([int(d.value) for d in y.shape], "float32"))
    f(*[tessera.nd.array(a) for a in arrays], out)
    a, b = arrays
    if product == 0:
        want = a @ b.transpose(1, 0, 2).reshape(120, -1)[:, :290]
    else:
        want = a @ (b.transpose(0, 2, 1) if product == 1 else b)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("parallel", ["batch", "cols", "rows"])
def test_each_parallel_loop_of_a_tiled_product_with_tails(parallel):
    """The strategy's `parallel` knob (Note [tails]): any of the three loops gives numpy's."""
    a, b = te.placeholder((3, 29, 8), name="a"), te.placeholder((3, 8, 37), name="b")
    y = topi_nn.matmul(a, b)
    config = Config("blocked", mr=4, nv=1, kc=8, parallel=parallel)
    with HOST:
        f = tessera.build(x86_bmm.schedule_matmul([y], HOST, config), [a, b, y], target=HOST)
    an, bn = randn(3, 29, 8), randn(3, 8, 37)
    out = tessera.nd.array(np.zeros((3, 29, 37), "float32"))
    f(tessera.nd.array(an), tessera.nd.array(bn), out)
    np.testing.assert_allclose(out.numpy(), an @ bn, rtol=1e-5, atol=1e-5)


# -- fused epilogues, end to end against ONNX Runtime -------------------------------------------


def _mlp_model(rows, hidden, ffn):
    """MatMul + bias + erf-GELU, MatMul + bias + residual: the transformer MLP."""
    from onnx import TensorProto, helper, numpy_helper

    inits = {
        "w1": randn(hidden, ffn) * 0.1, "b1": randn(ffn), "w2": randn(ffn, hidden) * 0.1,
        "b2": randn(hidden), "sqrt2": np.array(math.sqrt(2), np.float32),
        "one": np.array(1, np.float32), "half": np.array(0.5, np.float32),
    }  # fmt: skip
    N = helper.make_node
    nodes = [
        N("MatMul", ["x", "w1"], ["m"]), N("Add", ["m", "b1"], ["h"]),
        N("Div", ["h", "sqrt2"], ["g0"]), N("Erf", ["g0"], ["g1"]), N("Add", ["g1", "one"], ["g2"]),
        N("Mul", ["h", "g2"], ["g3"]), N("Mul", ["g3", "half"], ["g"]),
        N("MatMul", ["g", "w2"], ["o"]), N("Add", ["o", "b2"], ["ob"]),
        N("Add", ["x", "ob"], ["y"]),
    ]  # fmt: skip
    shape = [*rows, hidden]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, {"x": randn(*shape)}


@pytest.mark.parametrize("rows,hidden,ffn", [((1, 13), 24, 100), ((2, 5), 64, 70), ((3,), 8, 33)])
def test_mlp_with_fused_epilogues_matches_onnxruntime(rows, hidden, ffn):
    ort = pytest.importorskip("onnxruntime")
    model, feeds = _mlp_model(rows, hidden, ffn)
    mod, params = tessera.frontend.from_onnx(model)
    with tessera.transform.PassContext(opt_level=3):
        lib = tessera.build(mod, target="llvm", params=params)
    kernels = " ".join(c["kernel"] for c in lib.plan["calls"])
    assert "dense_packed" in kernels and "matmul" not in kernels  # weights were packed
    m = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))
    m.set_input("x", feeds["x"])
    m.run()
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = sess.run(None, feeds)
    np.testing.assert_allclose(m.get_output(0).numpy(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("a_shape", [(9, 1, 33, 16), (2, 1, 3, 1, 5, 16)])
def test_matmul_of_a_constant_with_extent_one_axes_between_the_rows(a_shape):
    """Batch axes of extent 1 between others ([9, 1, 33] rows) leave the fused rows; the rows
    that remain are made adjacent before they fuse (was: 'i0 and i2 are not adjacent loops')."""
    from onnx import TensorProto, helper, numpy_helper

    a, b = randn(*a_shape), randn(16, 7)
    y_shape = [*a_shape[:-1], 7]
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["A", "B"], ["Y"])],
        "g",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, list(a_shape))],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, y_shape)],
        [numpy_helper.from_array(b, "B")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    mod, params = tessera.frontend.from_onnx(model)
    with tessera.transform.PassContext(opt_level=3):
        lib = tessera.build(mod, target="llvm", params=params)
    m = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))
    m.set_input("A", a)
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), a @ b, rtol=1e-5, atol=1e-5)


def test_matmul_of_a_tensor_with_itself():
    """MatMul(X, X): the product reads one tensor twice (was: 'not enough values to unpack')."""
    from onnx import TensorProto, helper

    x = randn(3, 5, 5)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "X"], ["Y"])],
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [3, 5, 5])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [3, 5, 5])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    mod, params = tessera.frontend.from_onnx(model)
    lib = tessera.build(mod, target="llvm", params=params)
    m = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))
    m.set_input("X", x)
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), x @ x, rtol=1e-5, atol=1e-5)


def test_the_parallel_loop_rule_balances_the_targets_cores():
    """Note [tails]: the parallel loop is the first with parallel_tasks(target) iterations,
    four per core (cpu.py). A 60 x 130 product on AVX2 (6 x 16 tiles: 9 column panels, 10
    row tiles) runs its panels in parallel on 2 cores (8 tasks); on 4 (16 tasks) neither loop
    has enough, and the one with the most, the rows, is taken."""
    import tessera.topi.x86.strategy  # noqa: F401  (registers the cpu strategies)
    from tessera.topi.strategy import Task, Workload
    from tessera.topi.x86.cpu import parallel_tasks
    from tessera.topi.x86.dense import choose_blocking, parallel_rule

    two = tessera.Target("llvm -mcpu=haswell -num-cores=2")
    four = tessera.Target("llvm -mcpu=haswell -num-cores=4")
    assert (parallel_tasks(two), parallel_tasks(four)) == (8, 16)
    assert choose_blocking(two, 60, 130, 64).tasks == 8
    assert parallel_rule(0, 60, 130, 6, 16, tasks=8) == "cols"
    assert parallel_rule(0, 60, 130, 6, 16, tasks=16) == "rows"
    wl = Workload("matmul", (((60, 64), "float32"), ((64, 130), "float32")), (), (False, False),
                  (60, 130))  # fmt: skip
    task = Task(wl, "cpu")
    tile = {"unroll_k": 1, "kc_scope": "tile", "mc": 0, "nc": 0}  # Note [cache blocks]: today's
    assert task.default(two) == Config("blocked", mr=6, nv=2, kc=64, parallel="cols", **tile)
    assert task.default(four) == Config("blocked", mr=6, nv=2, kc=64, parallel="rows", **tile)
