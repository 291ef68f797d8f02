"""bench/wide_matmul.py's models are what its cases say (MatMul with a constant weight, Gemm
with transB and a bias, q @ Transpose(k)), and tessera runs small versions of each as ONNX
Runtime does, through the same helpers the benchmark times. No timings."""

import numpy as np
import pytest
from bench_modules import load_bench


def _load_bench():
    return load_bench("wide_matmul")  # it imports its neighbours models, stream, fma_peak


wide = _load_bench()

SMALL = [
    lambda: wide._matmul_const(5, 12, 37),  # rows and columns off the tiles
    lambda: wide._gemm_const(3, 16, 70),
    lambda: wide._batch_matmul((1, 2, 9, 8), (1, 2, 8, 13)),
    lambda: wide._batch_matmul((1, 2, 9, 8), (1, 2, 13, 8), transpose_b=True),
]


@pytest.mark.parametrize("build", range(len(SMALL)))
def test_small_cases_match_onnxruntime(build):
    pytest.importorskip("onnxruntime")
    from tessera.runtime import GraphModule, cpu

    model = SMALL[build]()
    feeds = wide._feeds(model)
    module = GraphModule(wide.compile_model(model)["default"](cpu(0)))
    module.set_input(**feeds)
    module.run()
    expected = wide.ort_session(model, 1).run(None, feeds)
    assert wide.relative_error([module.get_output(0).numpy()], expected) < 1e-5


def test_cases_are_the_shapes_they_name():
    ops = [n.op_type for n in wide.CASES["gemm"][0]().graph.node]
    assert ops == ["Gemm"]
    qkt = wide.CASES["vit_qkt"][0]()
    assert [n.op_type for n in qkt.graph.node] == ["Transpose", "MatMul"]
    out = [d.dim_value for d in qkt.graph.output[0].type.tensor_type.shape.dim]
    assert out == [1, 12, 197, 197]
    build, flops, weight_bytes = wide.CASES["ocr"]
    w = build().graph.initializer[0]
    assert list(w.dims) == [120, 18710] and weight_bytes == 120 * 18710 * 4
    assert flops == 2 * 40 * 120 * 18710
    assert np.dtype(np.float32).itemsize * np.prod(w.dims) == weight_bytes
