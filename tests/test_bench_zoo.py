"""bench/fetch_zoo.py, bench/roofline.py and model_zoo's pretrained weights: the pure parts
(no download, no timing): safetensors reading, static input shapes, FLOP and class of nodes."""

import json
import struct
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from bench_modules import load_bench
from onnx import helper

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))


def _load(name: str):
    return load_bench(name)


fetch_zoo = _load("fetch_zoo")
model_zoo = _load("model_zoo")


def test_read_safetensors_round_trips():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([7, -1], np.int64)
    header = {"a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
              "b": {"dtype": "I64", "shape": [2], "data_offsets": [24, 40]},
              "__metadata__": {"format": "pt"}}  # fmt: skip
    text = json.dumps(header).encode()
    data = struct.pack("<Q", len(text)) + text + a.tobytes() + b.tobytes()
    got = fetch_zoo.read_safetensors(data)
    np.testing.assert_array_equal(got["a"], a)
    np.testing.assert_array_equal(got["b"], b)


def test_fix_input_shapes_sets_every_dim_and_names_bad_inputs():
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 3, "h", "w"])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                                                [x], [y]))  # fmt: skip
    fetch_zoo.fix_input_shapes(model, {"x": (1, 3, 48, 320)})
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [1, 3, 48, 320]
    with pytest.raises(KeyError, match="no input 'z'"):
        fetch_zoo.fix_input_shapes(model, {"z": (1,)})


def test_pretrained_weights_replace_every_random_one_or_fail():
    small = dict(layers=1, hidden=8, heads=2, seq=4, vocab=10, max_position=8)
    random = model_zoo.bert_encoder(**small)
    weights = {
        i.name: onnx.numpy_helper.to_array(i) + 1.0
        for i in random.graph.initializer
        if "/" not in i.name and i.name != "embeddings.position_ids"
    }
    model = model_zoo.bert_encoder(**small, weights=weights)
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    for name, w in weights.items():
        np.testing.assert_array_equal(inits[name], w.astype(np.float32))
    weights.pop(next(iter(weights)))
    with pytest.raises(KeyError, match="no weight"):
        model_zoo.bert_encoder(**small, weights=weights)


def test_roofline_counts_flops_and_names_classes():
    roofline = _load("roofline")
    shapes = {"x": [1, 8, 10, 10], "w": [8, 2, 3, 3], "y": [1, 8, 10, 10],
              "a": [32, 1024], "b": [8210, 1024], "c": [32, 8210]}  # fmt: skip
    conv = helper.make_node("Conv", ["x", "w"], ["y"], group=4)
    info = roofline.node_info(conv, shapes, {"w"})
    assert info.label == "grouped conv (group 4)"
    assert info.flops == 2 * 800 * 2 * 9
    gemm = helper.make_node("Gemm", ["a", "b"], ["c"], transB=1)
    info = roofline.node_info(gemm, shapes, {"b"})
    assert info.label == "matmul small-M (const B)" and info.flops == 2 * 32 * 8210 * 1024
