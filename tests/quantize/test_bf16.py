"""bf16: the bf16.dense kernel (vdpbf16ps, and the emulation on CPUs without AVX512_BF16)
against numpy with bfloat16 rounding; the dot_bf16 intrinsic's exact semantics; the pass that
PassContext(config={"precision": "bf16"}) turns on, and its error on a CPU without bf16."""

import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera.frontend import from_onnx
from tessera.quantize import sqnr_db
from tessera.runtime import GraphModule, cpu
from tessera.runtime.ndarray import float_to_bfloat16_bits
from tessera.target import Target
from tessera.tir.interpreter import _dot_bf16
from tessera.topi.x86.bf16_dense import pack_bf16_weight, round_bf16, unpack_bf16_weight
from tessera.transform import PassContext

R = np.random.default_rng(41)
NATIVE = "llvm"  # the host, when it has AVX512_BF16 (vdpbf16ps)
EMULATED = ["llvm -mcpu=skylake-avx512", "llvm -mcpu=haswell"]  # 16 and 8 float lanes, no bf16


def runnable(name):
    t = Target(name)
    if not t.is_host:
        pytest.skip(f"this CPU cannot run {name}")
    if name == NATIVE and "avx512bf16" not in t.features:
        pytest.skip("this CPU has no AVX512_BF16")
    return name


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def matmul_model(m, k, n, lead=(1,), transposed=False, onnx_only=False):
    """MatMul (or Gemm with transB) by a constant weight, plus a bias and a ReLU (epilogue)."""
    w = R.standard_normal((n, k) if transposed else (k, n)).astype(np.float32)
    b = R.standard_normal(n).astype(np.float32)
    if transposed:
        nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["m"], transB=1)]
        x_shape, y_shape = [m, k], [m, n]
    else:
        nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"]),
                 helper.make_node("Add", ["mm", "b"], ["m"])]  # fmt: skip
        x_shape, y_shape = [*lead, m, k], [*lead, m, n]
    nodes.append(helper.make_node("Relu", ["m"], ["y"]))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    if onnx_only:
        return model
    mod, params = from_onnx(model)
    wt = w if transposed else w.T
    x = R.standard_normal(x_shape).astype(np.float32)
    ref = np.maximum(round_bf16(x).astype(np.float64) @ round_bf16(wt).T.astype(np.float64) + b, 0)
    return mod, params, x, ref.astype(np.float32), np.maximum(x @ wt.T + b, 0)


def build_run(mod, params, x, target, config):
    with PassContext(opt_level=3, config=config):
        lib = tessera.build(mod, target=target, params=params)
    m = GraphModule(lib["default"](cpu(0)))
    m.set_input("x", x)
    m.run()
    return lib, m.get_output(0).numpy()


SHAPES = [(4, 64, 32, (1,), False), (5, 37, 40, (2,), False), (3, 19, 7, (), True),
          (128, 96, 48, (1,), False)]  # fmt: skip


@pytest.mark.parametrize("target", [NATIVE, *EMULATED])
@pytest.mark.parametrize("m,k,n,lead,transposed", SHAPES)
def test_bf16_dense_matches_numpy(target, m, k, n, lead, transposed):
    runnable(target)
    mod, params, x, ref, f32 = matmul_model(m, k, n, lead, transposed)
    config = {"precision": "bf16", "bf16_emulate": target != NATIVE}
    lib, y = build_run(mod, params, x, target, config)
    # float32 accumulation of exact bfloat16 products against a float64 sum of the same
    scale = np.abs(round_bf16(x)).max() * k
    np.testing.assert_allclose(y, ref, rtol=0, atol=scale * 2e-6)
    assert sqnr_db(f32, y) > 35  # and close to float32: bfloat16 keeps 8 significant bits
    if target == NATIVE:
        assert "vdpbf16ps" in lib.get_source("asm")


def test_pass_rewrites_constant_weight_layers_only_when_asked():
    mod, params, x, _, f32 = matmul_model(4, 32, 16)
    from tessera.quantize.bf16 import to_bf16
    from tessera.transform import bind_params, infer_types

    bound = infer_types(bind_params(mod, params))
    target = Target(NATIVE)  # the rewrite is the same with the emulation (a host without bf16)
    emulate = "avx512bf16" not in target.features
    with PassContext(config={"precision": "bf16", "bf16_emulate": emulate}):
        text = str(to_bf16(bound, target))
    assert "bf16.dense(" in text and "matmul(" not in text
    with PassContext(config={"precision": "fp32"}):
        assert to_bf16(bound, target) is bound
    with PassContext():
        assert to_bf16(bound, target) is bound
    _, y = build_run(mod, params, x, "llvm", {"precision": "fp32"})
    np.testing.assert_allclose(y, f32, rtol=1e-5, atol=1e-5)


def test_cpu_without_bf16_is_refused_with_a_clear_error():
    mod, params, *_ = matmul_model(4, 32, 16)
    with pytest.raises(ValueError, match="AVX512_BF16.*bf16_emulate"):
        with PassContext(opt_level=3, config={"precision": "bf16"}):
            tessera.build(mod, target="llvm -mcpu=skylake-avx512", params=params)
    with pytest.raises(ValueError, match="precision 'fp16' is not one of"):
        with PassContext(opt_level=3, config={"precision": "fp16"}):
            tessera.build(mod, target="llvm", params=params)


def test_bf16_code_for_a_bf16_cpu_is_built_on_any_host():
    mod, params, *_ = matmul_model(4, 32, 16)
    with PassContext(opt_level=3, config={"precision": "bf16"}):
        lib = tessera.build(mod, target="llvm -mcpu=sapphirerapids", params=params)
    assert "vdpbf16ps" in lib.get_source("asm")


def test_weight_panels_round_trip():
    w = R.standard_normal((37, 21)).astype(np.float32)
    wp = pack_bf16_weight(w)
    assert wp.shape == (3, 11, 16) and wp.dtype == np.int32
    np.testing.assert_array_equal(unpack_bf16_weight(wp, 37, 21), round_bf16(w))


def test_dot_bf16_semantics():
    """High halves first, each step rounded to float32 (vdpbf16ps's order)."""
    a_vals = np.array([[1.0, 2.0**-9], [3.0, -0.5]], np.float32)
    b_vals = np.array([[2.0**20, 1.0], [1.5, 4.0]], np.float32)

    def words(v):  # column 0 -> low half, column 1 -> high half
        bits = float_to_bfloat16_bits(v).astype(np.uint32)
        return (bits[:, 0] | (bits[:, 1] << 16)).view(np.int32)

    acc = np.array([2.0**23, 1.0], np.float32)
    got = _dot_bf16(acc, words(a_vals), words(b_vals))
    # lane 0: 2^23 + 2^-9 rounds away, then + 2^20; lane 1: 1 - 2, then + 4.5
    np.testing.assert_array_equal(got, np.array([2.0**23 + 2.0**20, 3.5], np.float32))


@pytest.mark.parametrize("mcpu", ["znver4", "skylake-avx512"])
def test_cli_precision_bf16(tmp_path, mcpu):
    onnx.save(matmul_model(4, 32, 16, onnx_only=True), tmp_path / "m.onnx")
    out = tmp_path / "m.so"
    cmd = [sys.executable, "-m", "tessera.cli", "compile", str(tmp_path / "m.onnx"), "--target",
           f"llvm -mcpu={mcpu}", "--precision", "bf16", "-o", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    if mcpu == "skylake-avx512":  # no AVX512_BF16: a clear error, no traceback
        assert proc.returncode != 0 and "AVX512_BF16" in proc.stderr
        assert "Traceback" not in proc.stderr
    else:
        assert proc.returncode == 0, proc.stderr
        assert out.exists()


def conv_model(c, oc, hw, k, stride, pad):
    w = R.standard_normal((oc, c, k, k)).astype(np.float32)
    b = R.standard_normal(oc).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[pad] * 4, strides=[stride] * 2),
         helper.make_node("Relu", ["c"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model, w, b


def conv_reference(x, w, b, stride, pad, bf16=True):
    """float64 cross-correlation of the bfloat16 values (bf16=False: the float32 ones), + bias,
    ReLU."""
    from tessera.graph.ops import nn_ref

    rnd = round_bf16 if bf16 else np.asarray
    xr, wr = rnd(x).astype(np.float64), rnd(w).astype(np.float64)
    y = nn_ref.conv(xr, wr, (stride, stride), (pad,) * 4, (1, 1), 1)
    return np.maximum(y + b.reshape(1, -1, 1, 1), 0)


CONVS = [(16, 32, 9, 3, 1, 1), (32, 48, 8, 1, 1, 0), (16, 16, 11, 3, 2, 1), (3, 8, 10, 3, 1, 1)]


@pytest.mark.parametrize("target", [NATIVE, EMULATED[0]])
@pytest.mark.parametrize("c,oc,hw,k,stride,pad", CONVS)
def test_bf16_conv_matches_numpy(target, c, oc, hw, k, stride, pad):
    runnable(target)
    model, w, b = conv_model(c, oc, hw, k, stride, pad)
    mod, params = from_onnx(model)
    x = R.standard_normal((1, c, hw, hw)).astype(np.float32)
    config = {"precision": "bf16", "bf16_emulate": target != NATIVE}
    lib, y = build_run(mod, params, x, target, config)
    ref = conv_reference(x, w, b, stride, pad, bf16=c % 2 == 0)  # odd blocks stay float32
    scale = np.abs(round_bf16(x)).max() * np.abs(w).max() * c * k * k
    np.testing.assert_allclose(y, ref, rtol=0, atol=scale * 1e-6)
    asm = lib.get_source("asm")
    # a 3-channel conv (odd input block) stays float32: no bf16 code for it
    assert ("vdpbf16ps" in asm) == (target == NATIVE and c % 2 == 0)


def test_bf16_conv_pass_rewrites_blocked_convs():
    from tessera.quantize.bf16 import to_bf16_convs
    from tessera.transform import alter_layout, bind_params, fold_constant, infer_types

    model, *_ = conv_model(16, 32, 9, 3, 1, 1)
    mod, params = from_onnx(model)
    bound = fold_constant(infer_types(bind_params(mod, params)))
    with (
        Target("llvm"),
        PassContext(opt_level=3, config={"precision": "bf16", "bf16_emulate": True}),
    ):
        text = str(to_bf16_convs(alter_layout(bound)))
    assert "bf16.conv2d_nchwc(" in text and "nn.conv2d_nchwc(" not in text


def _dot_kernel(m, k2, n):
    from tessera import te
    from tessera.tir import op

    A = te.placeholder((m, k2), "int32", name="A")
    B = te.placeholder((n, k2), "int32", name="B")
    k = te.reduce_axis((0, k2), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(op.dot_bf16(0.0, A[i, k], B[j, k]), axis=k))
    s = te.create_schedule(C.op)
    s[C].reorder(C.op.axis[0], k, C.op.axis[1])
    s[C].vectorize(C.op.axis[1])
    return s, [A, B, C]


@pytest.mark.parametrize("target", [NATIVE, "llvm -mcpu=skylake-avx512", "llvm -mcpu=x86-64", "c"])
@pytest.mark.parametrize("n", [7, 16, 44])
def test_dot_bf16_in_every_code_generator(target, n):
    """The intrinsic alone, in a te kernel, against the interpreter's reference: within a few
    float32 roundings (LLVM folds the sum's `acc + dot_bf16(0, a, b)` into dot_bf16(acc, a, b),
    one rounding fewer per step; the interpreter and C keep them apart)."""
    from tessera.tir.interpreter import interpret

    if target != "c":
        runnable(target)
    a = float_to_bfloat16_bits(R.standard_normal((3, 20)).astype(np.float32))
    b = float_to_bfloat16_bits(R.standard_normal((n, 20)).astype(np.float32))
    a32, b32 = a.view(np.int32), b.view(np.int32)
    s, args = _dot_kernel(3, 10, n)
    c = np.zeros((3, n), np.float32)
    tessera.build(s, args, target=target)(a32, b32, c)
    want = np.zeros((3, n), np.float32)
    interpret(tessera.lower(s, args)["main"], a32, b32, want)
    np.testing.assert_allclose(c, want, rtol=0, atol=np.abs(want).max() * 1e-6)
