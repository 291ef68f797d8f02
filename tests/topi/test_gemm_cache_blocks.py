"""Note [cache blocks] (topi/x86/dense.py): knobs `kc_scope`, `mc`, `nc` of the x86 "packed" and
"blocked" products. The defaults are today's schedule (k blocks inside each tile); "block" runs
the k blocks around a block of mc row tiles x nc panels with the partial sums in the block's
buffer. Every value of each knob computes numpy's product on odd shapes (K not a multiple of
the k block, M = 1, N odd, row and column tails, a batch), the space only pairs mc/nc with the
block scope, and the block's k loop keeps its accumulators in registers."""

import random

import numpy as np
import pytest

import tessera
from tessera import te
from tessera.topi import nn as topi_nn
from tessera.topi.strategy import Config, Task, Workload
from tessera.topi.x86 import batch_matmul as x86_bmm
from tessera.topi.x86 import dense as x86_dense
from tessera.topi.x86 import strategy as x86_strategy  # noqa: F401  (registers the strategies)
from tessera.topi.x86.asm import fma_loops, loop_summary

HOST = tessera.Target("llvm")
RNG = np.random.default_rng(11)

# (M, K, N): M = 1; K prime (no k block divides it); N odd; row and column tails; whole tiles
SHAPES = [(1, 37, 21), (13, 50, 37), (40, 97, 19), (24, 64, 32)]


def randn(*shape):
    return RNG.standard_normal(shape).astype("float32")


def _packed_space(M, K, N):
    wl = Workload("nn.dense", (((M, K), "float32"), ((N, K), "float32")), (), (False, True), (M, N))
    task = Task(wl, "cpu")
    return task, task.implementations(HOST)["packed"]


def _run_packed(M, K, N, knobs):
    """x (M, K) @ w^T through dense_packed with the task's default config and `knobs` set."""
    task, space = _packed_space(M, K, N)
    config = Config("packed", {**task.default(HOST).knobs(), **knobs})
    assert space.valid(config.knobs()), config
    nr = config["nv"] * HOST.vector_lanes("float32")
    w = randn(N, K)
    wp = x86_dense.pack_weight_np(w, nr, transposed=True)
    x = te.placeholder((M, K), name="x")
    wpt = te.placeholder(wp.shape, name="wp")
    y = x86_dense.dense_packed(x, wpt, N)
    with HOST:
        s = x86_dense.schedule_dense_packed([y], HOST, config)
        f = tessera.build(s, [x, wpt, y], target=HOST)
    xn = randn(M, K)
    out = tessera.nd.array(np.zeros((M, N), "float32"))
    f(tessera.nd.array(xn), tessera.nd.array(wp), out)
    np.testing.assert_allclose(out.numpy(), xn @ w.T, rtol=1e-4, atol=1e-4, err_msg=str(config))
    return f


def test_defaults_are_todays_tiles_and_the_space_pairs_blocks_with_the_block_scope():
    task, space = _packed_space(128, 768, 768)
    default = task.default(HOST)
    assert (default["kc_scope"], default["mc"], default["nc"]) == ("tile", 0, 0)
    knobs = {k.name: k.candidates for k in space.knobs}
    assert knobs["kc_scope"] == ("tile", "block")
    assert 0 in knobs["mc"] and 0 in knobs["nc"] and max(knobs["mc"]) < 128
    base = default.knobs()
    assert not space.valid({**base, "mc": 2})  # blocks mean nothing with k inside the tiles
    assert not space.valid({**base, "nc": 2})
    assert space.valid({**base, "kc_scope": "block", "mc": 2, "nc": 4})
    assert space.valid({**base, "kc_scope": "block"})  # one block: all rows and panels
    _, tiny = _packed_space(1, 37, 5)  # no block of rows or panels smaller than the matrix
    tiny_knobs = {k.name: k.candidates for k in tiny.knobs}
    assert tiny_knobs["mc"] == (0,) and tiny_knobs["nc"] == (0,)
    # ... and no block scope where the matrix is one tile (it is the tile scope's loop nest)
    assert all(v["kc_scope"] == "tile" for v in tiny.enumerate())


@pytest.mark.parametrize("shape", SHAPES)
def test_every_block_knob_value_computes_the_product(shape):
    """Every value of mc, nc and kc with the block scope (the lists walked together, shorter
    ones from a random start, so each value is built once), and the tile scope."""
    M, K, N = shape
    task, space = _packed_space(M, K, N)
    knobs = {k.name: k.candidates for k in space.knobs}
    # where the default's tile is the whole matrix (1 x 21 in a tile of 2 vectors of 16 lanes)
    # there is no block scope: its blocks are then of one-vector panels
    narrow = {} if space.valid({**task.default(HOST).knobs(), "kc_scope": "block"}) else {"nv": 1}
    rng = random.Random(M * K * N)
    names = ("mc", "nc", "kc")
    starts = {n: rng.randrange(len(knobs[n])) for n in names}
    runs = [{"kc_scope": "tile", "kc": rng.choice(knobs["kc"])}]
    for i in range(max(len(knobs[n]) for n in names)):
        values = {n: knobs[n][(starts[n] + i) % len(knobs[n])] for n in names}
        runs.append({"kc_scope": "block", **narrow, **values})
    for knob_values in runs:
        _run_packed(M, K, N, knob_values)


@pytest.mark.parametrize("unroll", [2, 4])
def test_block_scope_with_unrolled_k_steps(unroll):
    _run_packed(13, 50, 37, {"kc_scope": "block", "kc": 16, "mc": 1, "nc": 2, "unroll_k": unroll})


def test_blocked_batch_matmul_in_blocks_with_tails():
    """The "blocked" product (both operands inputs, a batch in the parallel loop with the
    blocks; row and column tails) with the block scope."""
    a, b = te.placeholder((3, 29, 45), name="a"), te.placeholder((3, 45, 37), name="b")
    y = topi_nn.matmul(a, b)
    an, bn = randn(3, 29, 45), randn(3, 45, 37)
    for mc, nc, kc in [(0, 0, 16), (2, 1, 8), (1, 4, 45), (4, 0, 32)]:
        config = Config(
            "blocked", mr=4, nv=1, kc=kc, parallel="cols", unroll_k=1, kc_scope="block",
            mc=mc, nc=nc,
        )  # fmt: skip
        with HOST:
            f = tessera.build(x86_bmm.schedule_matmul([y], HOST, config), [a, b, y], target=HOST)
        out = tessera.nd.array(np.zeros((3, 29, 37), "float32"))
        f(tessera.nd.array(an), tessera.nd.array(bn), out)
        np.testing.assert_allclose(out.numpy(), an @ bn, rtol=1e-4, atol=1e-4, err_msg=str(config))


def test_the_blocks_k_loop_keeps_the_accumulators_in_registers():
    """The partial sums live in the block's buffer across k blocks, but over one k block the
    tile's accumulators stay in registers: no store in a loop of FMAs."""
    if "fma" not in HOST.features or not HOST.llvm_triple.startswith("x86_64"):
        pytest.skip("the assembly check reads x86 FMA code")
    f = _run_packed(96, 256, 128, {"kc_scope": "block", "kc": 64, "mc": 4, "nc": 2})
    tile = _run_packed(96, 256, 128, {})
    assert f.get_source("asm") != tile.get_source("asm")
    loops = [loop_summary(body) for body in fma_loops(f.get_source("asm"))]
    blk = x86_dense.choose_blocking(HOST, 96, 128, 256)
    assert loops and any(loop["fma"] >= blk.mr * blk.nv for loop in loops)
    for loop in loops:
        assert loop["stores"] == 0 and loop["stack"] == 0, loop


def test_a_large_blocks_partial_sums_go_to_the_heap():
    """One block of all 600 x 520 outputs (1.2 MB of partial sums, over 1/16 of the 8 MiB
    thread stack) is allocated on the heap; a block of 8 row tiles stays on the stack."""
    a, b = te.placeholder((1, 600, 64), name="a"), te.placeholder((1, 64, 520), name="b")
    y = topi_nn.matmul(a, b)
    an, bn = randn(1, 600, 64), randn(1, 64, 520)
    for mc, heap in [(0, True), (8, False)]:
        config = Config(
            "blocked", mr=6, nv=2, kc=16, parallel="cols", unroll_k=1, kc_scope="block",
            mc=mc, nc=0,
        )  # fmt: skip
        with HOST:
            f = tessera.build(x86_bmm.schedule_matmul([y], HOST, config), [a, b, y], target=HOST)
        assert ("tessera_alloc" in f.get_source("ll")) == heap
        out = tessera.nd.array(np.zeros((1, 600, 520), "float32"))
        f(tessera.nd.array(an), tessera.nd.array(bn), out)
        np.testing.assert_allclose(out.numpy(), an @ bn, rtol=1e-4, atol=1e-4, err_msg=str(config))


def test_symbolic_rows_in_blocks_of_a_constant_size():
    """Where the rows are symbolic the blocks must have a constant size (mc, nc > 0): the
    clamped tails stay inside the block's buffer; one block of all rows is refused clearly
    (its tails overran a buffer of the symbolic extent)."""
    n = te.var("n")
    x, wpt = te.placeholder((n, 24), name="x"), te.placeholder((3, 24, 16), name="wp")
    y = x86_dense.dense_packed(x, wpt, 40)
    w = randn(40, 24)
    wp = x86_dense.pack_weight_np(w, 16, transposed=True)
    base = {"mr": 6, "nv": 2, "kc": 8, "parallel": "cols", "unroll_k": 1, "kc_scope": "block"}
    for blocks in [{"mc": 2, "nc": 1}, {"mc": 1, "nc": 2, "unroll_k": 2}]:
        with HOST:
            s = x86_dense.schedule_dense_packed([y], HOST, Config("packed", {**base, **blocks}))
            f = tessera.build(s, [x, wpt, y], target=HOST)
        for rows in (1, 7, 50):
            xn = randn(rows, 24)
            out = tessera.nd.array(np.zeros((rows, 40), "float32"))
            f(tessera.nd.array(xn), tessera.nd.array(wp), out)
            np.testing.assert_allclose(out.numpy(), xn @ w.T, rtol=1e-4, atol=1e-4)
    with HOST, pytest.raises(ValueError, match="constant size"):
        x86_dense.schedule_dense_packed([y], HOST, Config("packed", {**base, "mc": 0, "nc": 1}))
    wl = Workload(
        "nn.dense", ((("n", 24), "float32"), ((40, 24), "float32")), (), (False, True), ("n", 40)
    )
    space = Task(wl, "cpu").implementations(HOST)["packed"]
    default = Task(wl, "cpu").default(HOST).knobs()
    assert space.valid({**default, "kc_scope": "block", "mc": 1, "nc": 1})
    assert not space.valid({**default, "kc_scope": "block", "mc": 0, "nc": 1})
