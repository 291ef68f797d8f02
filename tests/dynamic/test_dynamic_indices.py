"""Index arithmetic of kernels over symbolic dims: no division by a symbolic dim per row or per
tile where a build specialized to the sizes has none (Note [fused index merge], Note [clamped
fused reads], Note [ramp division], Note [divisor not zero]), and the same results as ONNX
Runtime at sizes with tails."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper

import tessera
from tessera.arith import Analyzer
from tessera.frontend import from_onnx
from tessera.models_dynamic import encoder_layer
from tessera.runtime import GraphModule
from tessera.tir import expr as E
from tessera.tir.stmt import BufferStore
from tessera.tir.stmt_functor import collect, substitute
from tessera.transform.pass_context import PassContext, PassInstrument


class _Kernels(PassInstrument):
    """The final tir of each kernel of a build (the last tir pass is `remove_no_op`)."""

    def __init__(self):
        self.funcs = []

    def run_after_pass(self, name, ir, seconds):
        if name == "remove_no_op":
            self.funcs.append(ir)


def _build(model, shapes=None):
    mod, params = from_onnx(model, shapes)
    kernels = _Kernels()
    with PassContext(config={"codegen.cache": False}, instruments=[kernels]):
        lib = tessera.build(mod, target="llvm", params=params)
    return GraphModule(lib["default"]()), kernels.funcs


def _symbolic_divisions(func) -> list:
    """The floordiv/floormod by a non-constant inside the buffer indices of `func`."""
    out = []
    for node in collect(func.body, lambda n: isinstance(n, E.BufferLoad | BufferStore)):
        for index in node.indices:
            out += collect(
                index,
                lambda n: isinstance(n, E.FloorDiv | E.FloorMod)
                and not isinstance(n.b, E.IntImm | E.Broadcast),
            )
            out += collect(
                index,
                lambda n: isinstance(n, E.FloorDiv | E.FloorMod)
                and isinstance(n.b, E.Broadcast)
                and not isinstance(n.b.value, E.IntImm),
            )
    return out


def test_encoder_kernels_index_without_dividing_by_seq(ort_of):
    """The attention softmax (rows fused over batch, heads and seq), the dense layers over the
    (batch, seq) rows (their clamped tail reads) and the heads' transposes address their
    buffers without a division by a symbolic dim; the mask's reshape keeps one (a vector
    floormod by seq, a tiny kernel)."""
    model = encoder_layer()
    m, funcs = _build(model)
    names = {f.name: _symbolic_divisions(f) for f in funcs}
    for name, divisions in names.items():
        if name.startswith("fused_reshape") and "transpose" not in name:
            continue
        assert not divisions, f"{name}: {[str(d) for d in divisions]}"
    assert any("softmax" in n for n in names) and any("dense_packed" in n for n in names)
    ort = ort_of(model)
    rng = np.random.default_rng(0)
    for b, s in ((1, 1), (3, 5), (4, 32), (2, 13)):  # 15 and 26 rows: tails of 6-row tiles
        x = rng.standard_normal((b, s, 64)).astype(np.float32)
        mask = (rng.random((b, s)) > 0.2).astype(np.float32)
        ort.check(m, {"x": x, "mask": mask})


def _matmul_model():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((24, 40)).astype(np.float32)
    x = helper.make_tensor_value_info("x", TP.FLOAT, ["a", "b", "c", 24])
    y = helper.make_tensor_value_info("y", TP.FLOAT, ["a", "b", "c", 40])
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "rows3",
        [x],
        [y],
        [helper.make_tensor("w", TP.FLOAT, w.shape, w.ravel())],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_dense_over_three_symbolic_row_dims_clamps_the_fused_row(ort_of):
    """Rows a*b*c of a constant-weight MatMul: the tail tile's reads are clamped as one fused
    row (Note [clamped fused reads]), merged by the flattening into one index."""
    model = _matmul_model()
    onnx.checker.check_model(model)
    m, funcs = _build(model)
    (dense,) = [f for f in funcs if "dense" in f.name or "matmul" in f.name]
    assert not _symbolic_divisions(dense), [str(d) for d in _symbolic_divisions(dense)]
    ort = ort_of(model)
    rng = np.random.default_rng(2)
    for shape in ((1, 1, 1), (2, 3, 5), (1, 7, 1), (3, 1, 11)):
        ort.check(m, {"x": rng.standard_normal((*shape, 24)).astype(np.float32)})


def test_ramp_division_stays_in_one_period():
    """floordiv/floormod of a vector index whose lanes stay in one period of the divisor
    become a broadcast and a ramp (Note [ramp division]); one that may cross stays."""
    o = E.Var("o", "int32")
    an = Analyzer()
    an.bind(o, (0, 8))
    one, sixteen = E.IntImm(1, "int32"), E.Broadcast(E.IntImm(16, "int32"), 8)
    ramp = E.Ramp(o * 8, one, 8)
    div, mod = an.simplify(E.FloorDiv(ramp, sixteen)), an.simplify(E.FloorMod(ramp, sixteen))
    assert isinstance(div, E.Broadcast) and isinstance(mod, E.Ramp)
    crossing = an.simplify(E.FloorDiv(E.Ramp(o * 8 + 4, one, 8), sixteen))
    assert isinstance(crossing, E.FloorDiv)
    for value in range(8):  # lane by lane, the rewrite computes what the division does
        lanes = [value * 8 + i for i in range(8)]
        at = {o: E.IntImm(value, "int32")}
        assert _lanes(substitute(div, at)) == [v // 16 for v in lanes]
        assert _lanes(substitute(mod, at)) == [v % 16 for v in lanes]


def _lanes(vec) -> list[int]:
    vec = Analyzer().simplify(vec)
    if isinstance(vec, E.Broadcast):
        return [int(vec.value.value)] * vec.lanes
    return [int(vec.base.value) + i * int(vec.stride.value) for i in range(vec.lanes)]


def test_guard_over_a_symbolic_divisor_is_a_product():
    """floordiv(x, seq) < batch is x < seq*batch where seq is a shape var known only >= 0
    (Note [divisor not zero]): the guard of a tile fused over (batch, seq); so is
    batch <= floordiv(x, seq). Without a sign for the divisor the division stays."""
    x, seq, batch, d = (E.Var(n, "int32") for n in ("x", "seq", "batch", "d"))
    an = Analyzer()
    an.bind(seq, (0, 1 << 20))
    an.bind(batch, (0, 1 << 20))
    for cond in (E.FloorDiv(x, seq) < batch, E.LE(batch, E.FloorDiv(x, seq))):
        out = an.simplify(cond)
        assert not collect(out, lambda n: isinstance(n, E.FloorDiv)), str(out)
    assert collect(an.simplify(E.FloorDiv(x, d) < batch), lambda n: isinstance(n, E.FloorDiv))


def test_blocked_max_pool_has_size_buckets_over_a_symbolic_width():
    """Note [pool buckets]: the column group per bucket of the width (an 8-column group for a
    row of 4 columns left it wholly to the guarded tail); each bucket computes the pool."""
    from tessera import te
    from tessera.te.schedule import SizeDispatch
    from tessera.topi.symbolic import sizes
    from tessera.topi.x86.pooling import pool_nchwc, schedule_pool_nchwc

    target = tessera.Target("llvm")
    w = te.var("w")
    x = te.placeholder((1, 2, 4, w, 8), name="x")
    y = pool_nchwc(x, "max", (2, 2), (2, 2), (0, 0, 0, 0))
    with sizes(w=(2, 2048)), target:
        s = schedule_pool_nchwc([y], target)
    assert isinstance(s, SizeDispatch) and len(s.cases) >= 2
    f = tessera.build(te.lower(s, [x, y], name="pool"), target=target)
    rng = np.random.default_rng(3)
    for width in (2, 6, 8, 13, 24, 70):
        a = rng.standard_normal((1, 2, 4, width, 8)).astype(np.float32)
        out = np.empty((1, 2, 2, width // 2, 8), np.float32)
        f(a, out)
        want = a[:, :, :, : width // 2 * 2].reshape(1, 2, 2, 2, width // 2, 2, 8).max(axis=(3, 5))
        np.testing.assert_array_equal(out, want)
