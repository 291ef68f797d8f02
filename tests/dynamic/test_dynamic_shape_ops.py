"""Shape subgraphs over symbolic dims, as exporters write them: Shape -> Gather -> Unsqueeze ->
Concat (-> Mul) -> Reshape, and Expand to a shape built the same way, folded at conversion into
shapes with symbolic dims; compiled once, run at several sizes against ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import tessera
from tessera.frontend import from_onnx
from tessera.graph.dims import same_dim
from tessera.runtime import GraphModule


def _const(name, values):
    return numpy_helper.from_array(np.asarray(values, np.int64), name)


def exported_reshapes():
    """x [batch, seq, 8] -> heads [batch, seq, 2, 4] (shape from Shape/Gather/Concat) ->
    transposed -> merged back [batch, seq * 8 / 8 * 8] via Mul of the gathered seq; the mask
    [batch, seq] Expanded to [batch, 2, seq, seq] from the same gathered dims."""
    node = helper.make_node
    nodes = [
        node("Shape", ["x"], ["shp"]),
        node("Gather", ["shp", "i0"], ["b0"], axis=0),
        node("Gather", ["shp", "i1"], ["s0"], axis=0),
        node("Unsqueeze", ["b0", "ax0"], ["b1"]),
        node("Unsqueeze", ["s0", "ax0"], ["s1"]),
        node("Slice", ["shp", "zero", "i2"], ["bs"]),  # [batch, seq]
        node("Concat", ["bs", "heads"], ["hshape"], axis=0),
        node("Reshape", ["x", "hshape"], ["h"]),
        node("Transpose", ["h"], ["ht"], perm=[0, 2, 1, 3]),
        node("Relu", ["ht"], ["hr"]),
        node("Transpose", ["hr"], ["hb"], perm=[0, 2, 1, 3]),
        node("Mul", ["s1", "eight"], ["s8"]),
        node("Sub", ["s8", "zero"], ["s8b"]),
        node("Squeeze", ["b1", "ax0"], ["b2"]),
        node("Unsqueeze", ["b2", "ax0"], ["b3"]),
        node("Concat", ["b3", "s8b"], ["flat_shape"], axis=0),
        node("Reshape", ["hb", "flat_shape"], ["y"]),
        node("Unsqueeze", ["mask", "ax12"], ["m4"]),
        node("Concat", ["b1", "two", "s1", "s1"], ["eshape"], axis=0),
        node("Expand", ["m4", "eshape"], ["m0"]),
        node(
            "ConstantOfShape",
            ["eshape"],
            ["ones"],
            value=helper.make_tensor("v", TP.FLOAT, [1], [0.5]),
        ),
        node("Add", ["m0", "ones"], ["m"]),
    ]
    inits = [
        _const("i0", 0),
        _const("i1", 1),
        _const("ax0", [0]),
        _const("zero", [0]),
        _const("i2", [2]),
        _const("ax12", [1, 2]),
        _const("heads", [2, 4]),
        _const("eight", [8]),
        _const("two", [2]),
    ]
    graph = helper.make_graph(
        nodes,
        "exported_reshapes",
        [
            helper.make_tensor_value_info("x", TP.FLOAT, ["batch", "seq", 8]),
            helper.make_tensor_value_info("mask", TP.FLOAT, ["batch", "seq"]),
        ],
        [
            helper.make_tensor_value_info("y", TP.FLOAT, None),
            helper.make_tensor_value_info("m", TP.FLOAT, None),
        ],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_shape_subgraphs_fold_into_symbolic_shapes(ort_of):
    model = exported_reshapes()
    mod, params = from_onnx(model)
    func = mod["main"]
    batch, seq, _ = func.params[0].type.shape
    out_batch, out_rest = func.outputs[0].type.shape
    assert out_batch is batch and same_dim(out_rest, seq * 8)
    assert func.outputs[1].type.shape[:2] == (batch, 2)
    m = GraphModule(tessera.build(mod, target="llvm", params=params)["default"]())
    ort = ort_of(model)
    for b, s in ((1, 3), (2, 5), (3, 1)):
        rng = np.random.default_rng(b * 10 + s)
        x = rng.standard_normal((b, s, 8)).astype(np.float32)
        mask = rng.standard_normal((b, s)).astype(np.float32)
        ort.check(m, {"x": x, "mask": mask})


def test_a_symbolic_shape_read_as_data_is_refused():
    node = helper.make_node
    graph = helper.make_graph(
        [
            node("Shape", ["x"], ["s"]),
            node("Cast", ["s"], ["f"], to=TP.FLOAT),
            node("Mul", ["f", "x"], ["y"]),
        ],  # fmt: skip
        "g",
        [helper.make_tensor_value_info("x", TP.FLOAT, ["n"])],
        [helper.make_tensor_value_info("y", TP.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ValueError, match=r"Cast.*symbolic dims.*float32"):
        from_onnx(model)


def test_a_symbolic_shape_as_a_model_output_is_refused():
    graph = helper.make_graph(
        [helper.make_node("Shape", ["x"], ["s"])],
        "g",
        [helper.make_tensor_value_info("x", TP.FLOAT, ["n", 2])],
        [helper.make_tensor_value_info("s", TP.INT64, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ValueError, match=r"output 's' is a shape with symbolic dims \(n, 2\)"):
        from_onnx(model)
    mod, _ = from_onnx(model, {"x": (3, 2)})  # sized: the shape is a constant
    assert mod["main"].outputs[0].array.tolist() == [3, 2]
