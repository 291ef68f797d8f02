"""Testing helpers for the ONNX frontend: build small models with onnx.helper, run them with
ONNX Runtime (an optional dependency, imported when used) and with tessera's graph interpreter,
and compare.

    check_node("Conv", {"x": x, "const_w": w}, {"pads": [1, 1, 1, 1]})
"""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tessera.frontend import from_onnx
from tessera.graph import run_function

_NP_TO_ONNX = {np.dtype(k): v for k, v in [
    ("float32", TensorProto.FLOAT), ("float64", TensorProto.DOUBLE), ("int64", TensorProto.INT64),
    ("int32", TensorProto.INT32), ("bool", TensorProto.BOOL), ("uint8", TensorProto.UINT8),
    ("int8", TensorProto.INT8), ("uint32", TensorProto.UINT32), ("float16", TensorProto.FLOAT16),
]}  # fmt: skip


def make_model(nodes, inputs, outputs, initializers=None, opset=17):
    """inputs: {name: array or (shape, dtype)}; outputs: list of names (types left to ORT)."""
    ins = []
    for name, spec in inputs.items():
        shape, dtype = (spec.shape, spec.dtype) if isinstance(spec, np.ndarray) else spec
        ins.append(helper.make_tensor_value_info(name, _NP_TO_ONNX[np.dtype(dtype)], shape))
    outs = [helper.make_empty_tensor_value_info(n) for n in outputs]
    inits = [numpy_helper.from_array(np.asarray(a), n) for n, a in (initializers or {}).items()]
    graph = helper.make_graph(nodes, "test", ins, outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def run_ort(model, feeds):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def ort_u8s8_is_exact() -> bool:
    """Whether ONNX Runtime's uint8 x int8 products are exact on this host. On x86 without VNNI
    (AVX512-VNNI or AVX-VNNI) its kernels add the products in pairs with vpmaddubsw, which
    saturates at 16 bits: full-range operands then differ from the ONNX definition."""
    import platform

    from tessera.target import Target

    if platform.machine().lower() not in ("x86_64", "amd64"):
        return True
    return bool({"avx512vnni", "avxvnni"} & set(Target("llvm").features))


def run_int8_reference(model, feeds):
    """The exact answer for a model of integer products (QLinearConv, MatMulInteger, ...):
    ONNX Runtime where that is exact here (`ort_u8s8_is_exact`), else onnx.reference."""
    if ort_u8s8_is_exact():
        return run_ort(model, feeds)
    from onnx.reference import ReferenceEvaluator
    from onnx.version_converter import convert_version

    try:
        return ReferenceEvaluator(model).run(None, feeds)
    except RuntimeError as e:  # its QuantizeLinear/DequantizeLinear start at opset 19
        if "No implementation for operator" not in str(e):
            raise
        return ReferenceEvaluator(convert_version(model, 21)).run(None, feeds)


def check_model(model, feeds, rtol=1e-4, atol=1e-5, shape_dict=None):
    """Compare tessera (interpreter) with ONNX Runtime; returns the converted function."""
    expected = run_ort(model, feeds)
    mod, params = from_onnx(model, shape_dict)
    func = mod["main"]
    got = run_function(func, feeds, params)
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.dtype, (g.dtype, e.dtype)
        assert g.shape == e.shape, (g.shape, e.shape)
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)
    return func


def check_node(op_type, inputs, attrs=None, opset=17, initializers=None, n_outputs=1, **kw):
    """One node whose inputs are `inputs` (dict name -> array; names starting with 'const_'
    become initializers); compare with ORT."""
    feeds = {k: v for k, v in inputs.items() if not k.startswith("const_")}
    inits = {k: v for k, v in inputs.items() if k.startswith("const_")}
    inits.update(initializers or {})
    outs = [f"y{i}" for i in range(n_outputs)]
    node = helper.make_node(op_type, list(inputs), outs, name=f"{op_type}_0", **(attrs or {}))
    model = make_model([node], feeds, outs, inits, opset)
    return check_model(model, feeds, **kw)


__all__ = ["check_model", "check_node", "make_model", "run_ort", "onnx"]
