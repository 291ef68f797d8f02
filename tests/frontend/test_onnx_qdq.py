"""QDQ models written by onnxruntime.quantization (static QDQ, per tensor and per channel, and
dynamic) are recognised as integer ops (onnx_qdq.py) and match ONNX Runtime's own int8 run."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera.frontend import from_onnx
from tessera.frontend.onnx_qdq import fuse_qdq
from tessera.frontend.testing import ort_u8s8_is_exact
from tessera.runtime import GraphModule, cpu
from tessera.transform import PassContext

ort = pytest.importorskip("onnxruntime")
quantization = pytest.importorskip("onnxruntime.quantization")
R = np.random.default_rng(3)


def float_model(residual="Add"):
    """conv-relu, conv (+ residual add) -relu, maxpool, conv, global pool, flatten, matmul."""

    def w(*shape, s=0.3):
        return numpy_helper.from_array((R.standard_normal(shape) * s).astype(np.float32))

    inits = [w(8, 3, 3, 3), w(8), w(8, 8, 3, 3, s=0.15), w(8), w(16, 8, 1, 1), w(16), w(16, 10)]
    for t, name in zip(inits, ["w1", "b1", "w2", "b2", "w3", "b3", "fc"], strict=True):
        t.name = name
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]), n("Relu", ["c1"], ["r1"]),
        n("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]), n(residual, ["c2", "r1"], ["a2"]),
        n("Relu", ["a2"], ["r2"]),
        # after a Sum, ORT quantizes the ReLU's output only for a quantizable consumer
        n("MaxPool", ["r2"], ["p2"], kernel_shape=[2, 2], strides=[2, 2])
        if residual == "Add"
        else n("Conv", ["r2", "w2", "b2"], ["p2"], pads=[1, 1, 1, 1]),
        n("Conv", ["p2", "w3", "b3"], ["c3"], strides=[2, 2]),
        n("GlobalAveragePool", ["c3"], ["g"]), n("Flatten", ["g"], ["f"]),
        n("MatMul", ["f", "fc"], ["y"]),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


class Reader(quantization.CalibrationDataReader if quantization else object):
    def __init__(self, n):
        self.data = iter([{"x": R.random((1, 3, 16, 16), dtype=np.float32)} for _ in range(n)])

    def get_next(self):
        return next(self.data, None)


def ort_run(path, feeds):
    """ORT's answer; where ORT's uint8 x int8 products saturate (x86 without VNNI), onnx.reference's
    on the same file (its float DequantizeLinear -> op -> QuantizeLinear)."""
    if not ort_u8s8_is_exact():
        from onnx.reference import ReferenceEvaluator
        from onnx.version_converter import convert_version

        model = convert_version(onnx.load(path), 21)  # the reference's QDQ ops are opset 19+
        return ReferenceEvaluator(model).run(None, feeds)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def tessera_run(model, feeds):
    mod, params = from_onnx(model)
    with PassContext(opt_level=3):
        lib = tessera.build(mod, target="llvm", params=params)
    m = GraphModule(lib["default"](cpu(0)))
    for k, v in feeds.items():
        m.set_input(k, v)
    m.run()
    return m.get_output(0).numpy(), mod


@pytest.mark.parametrize("per_channel,residual", [(False, "Add"), (True, "Sum")])
def test_static_qdq_model_runs_as_integer_ops(tmp_path, per_channel, residual):
    src, dst = tmp_path / "f.onnx", tmp_path / "q.onnx"
    onnx.save(float_model(residual), src)
    quantization.quantize_static(
        str(src), str(dst), Reader(8), quant_format=quantization.QuantFormat.QDQ,
        per_channel=per_channel, activation_type=quantization.QuantType.QUInt8,
        weight_type=quantization.QuantType.QInt8,
    )  # fmt: skip
    x = R.random((1, 3, 16, 16), dtype=np.float32)
    got, mod = tessera_run(onnx.load(dst), {"x": x})
    ops = {c.op.name for c in mod["main"].body}
    assert "qnn.conv2d" in ops and "nn.conv2d" not in ops, ops
    assert not any(n.op_type == residual for n in fuse_qdq(onnx.load(dst)).graph.node)
    want = ort_run(dst, {"x": x})[0]
    # the final MatMul's output is float (dequantized): compare in its quantization steps
    step = np.abs(want).max() / 127
    assert np.abs(got - want).max() <= 1.01 * step, (np.abs(got - want).max(), step)
    assert (got == want).mean() >= 0.999  # bit for bit on this machine's ORT


def test_dynamic_quantized_model(tmp_path):
    n = helper.make_node
    w = numpy_helper.from_array(R.standard_normal((24, 12)).astype(np.float32), "w")
    graph = helper.make_graph(
        [n("MatMul", ["x", "w"], ["m"]), n("Relu", ["m"], ["y"])], "dyn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 24])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 12])], [w],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    src, dst = tmp_path / "f.onnx", tmp_path / "q.onnx"
    onnx.save(model, src)
    quantization.quantize_dynamic(str(src), str(dst), weight_type=quantization.QuantType.QInt8)
    x = R.standard_normal((3, 24)).astype(np.float32)
    got, mod = tessera_run(onnx.load(dst), {"x": x})
    assert "qnn.dense" in {c.op.name for c in mod["main"].body}
    np.testing.assert_allclose(got, ort_run(dst, {"x": x})[0], rtol=1e-5, atol=1e-5)
