"""Guards on what a model may ask for (frontend/onnx_checks.py, transform/check_limits.py):
opsets ONNX Runtime refuses, attributes named in their errors, impossible dims and dtypes, and
tensors or arenas too large to run, refused while compiling with the node named."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import tessera
from tessera.frontend import from_onnx
from tessera.frontend.testing import make_model
from tessera.transform import PassContext

N = helper.make_node


def relu_model(opset=17, shape=(2, 3), dtype="float32"):
    return make_model(
        [N("Relu", ["x"], ["y"], name="r")], {"x": (shape, dtype)}, ["y"], opset=opset
    )


def conv_model(**attrs):
    w = np.ones((2, 3, 3, 3), np.float32)
    node = N("Conv", ["x", "w"], ["y"], name="conv1", **attrs)
    return make_model([node], {"x": ((1, 3, 8, 8), "float32")}, ["y"], {"w": w})


def test_an_opset_newer_than_onnx_knows_is_refused():
    with pytest.raises(ValueError, match="imports opset 99 of the ONNX domain"):
        from_onnx(relu_model(opset=99))


def test_an_old_form_of_an_op_is_refused_like_onnx_runtime_does():
    with pytest.raises(ValueError, match=r"r \(Relu\): opset 1 gives Relu-1.*convert_version"):
        from_onnx(relu_model(opset=1))
    # an op unchanged since opset 1 reads as it is at opset 7 (ORT runs it too)
    model = make_model([N("Not", ["x"], ["y"])], {"x": ((3,), "bool")}, ["y"], opset=1)
    from_onnx(model)


def test_float_strides_name_the_attribute():
    with pytest.raises(ValueError, match=r"conv1 : strides'. Expected: 'INTS', actual: 'FLOATS'"):
        from_onnx(conv_model(strides=[1.0, 2.0]))


def test_a_zero_stride_with_same_upper_names_the_attribute():
    with pytest.raises(ValueError, match=r"conv1.*attribute 'strides' must hold values >= 1"):
        from_onnx(conv_model(strides=[0, 3], auto_pad="SAME_UPPER"))


@pytest.mark.parametrize(
    "attrs, message",
    [
        ({"dilations": [0, 1]}, "'dilations' must hold values >= 1"),
        ({"pads": [-1, 0, 0, 0]}, "'pads' must hold values >= 0"),
        ({"group": 0}, "'group' must hold values >= 1"),
        ({"kernel_shape": [3, 3, 3]}, "a 3-D window takes a 5-D input"),
        ({"bogus": 1}, "Unrecognized attribute: bogus"),
    ],
)
def test_bad_conv_attributes_are_named(attrs, message):
    with pytest.raises(ValueError, match=message):
        from_onnx(conv_model(**attrs))


def test_a_boolean_attribute_is_0_or_1():
    node = N("ReduceMean", ["x"], ["y"], axes=[1], keepdims=5, name="mean")
    model = make_model([node], {"x": ((2, 3), "float32")}, ["y"], opset=13)
    with pytest.raises(ValueError, match="mean.*attribute 'keepdims' must be 0 or 1, got 5"):
        from_onnx(model)


def test_a_missing_required_input_is_named():
    node = N("Add", ["x", ""], ["y"], name="add")
    with pytest.raises(ValueError, match=r"add \(Add\).*input 1 is marked single"):
        from_onnx(make_model([node], {"x": ((2,), "float32")}, ["y"]))


def test_a_negative_dim_is_not_called_dynamic():
    model = relu_model()
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_value = -5
    with pytest.raises(ValueError, match="input 'x' has dim 1 = -5: a dim is >= 0"):
        from_onnx(model)
    with pytest.raises(ValueError, match=r"shape_dict\['x'\].*int >= 0"):
        from_onnx(relu_model(), {"x": (2, -3)})


def test_a_string_input_is_named_with_its_type():
    model = relu_model()
    model.graph.input[0].type.tensor_type.elem_type = TensorProto.STRING
    with pytest.raises(ValueError, match="input 'x' is a tensor of string: tessera compiles"):
        from_onnx(model)


def test_a_1e12_element_intermediate_is_refused_while_compiling_with_its_node():
    nodes = [N("MatMul", ["a", "b"], ["big"], name="outer"), N("ReduceSum", ["big"], ["y"])]
    inputs = {"a": ((10**6, 1), "float32"), "b": ((1, 10**6), "float32")}
    model = make_model(nodes, inputs, ["y"], opset=13)
    with pytest.raises(ValueError, match=r"node 'outer' \(MatMul.*float32\[1000000, 1000000\]"):
        from_onnx(model)


def test_a_huge_input_is_refused_with_its_name():
    model = relu_model(shape=(1024, 1024, 1024, 1024))  # 4 TB of float32
    with pytest.raises(ValueError, match=r"input 'x' would be float32.*4\.4 TB, over the limit"):
        from_onnx(model)


def test_the_limits_are_configurable():
    model = relu_model(shape=(64, 64))
    with PassContext(config={"limits.max_tensor_bytes": 1024}):
        with pytest.raises(ValueError, match="input 'x' would be .*limits.max_tensor_bytes"):
            from_onnx(model)
    mod, params = from_onnx(model)
    with PassContext(config={"limits.max_tensor_bytes": 1024}):  # a graph built without ONNX
        with pytest.raises(ValueError, match="input %x would be"):
            tessera.build(mod, target="llvm", params=params)
    nodes = [N("Exp", ["x"], ["e"], name="exp"), N("Log", ["e"], ["y"], name="log")]
    mod, params = from_onnx(make_model(nodes, {"x": ((64, 64), "float32")}, ["y"]))
    with PassContext(opt_level=0, config={"limits.max_arena_bytes": 256}):
        with pytest.raises(ValueError, match="arena of 16.4 kB, over the limit"):
            tessera.build(mod, target="llvm", params=params)
    with PassContext(config={"limits.max_arena_bytes": "big"}):
        with pytest.raises(ValueError, match="must be a positive int"):
            tessera.build(mod, target="llvm", params=params)


def test_a_converter_bug_is_one_clear_error_with_the_node(monkeypatch):
    from tessera.frontend import onnx_registry

    def broken(b, x):
        return {}["oops"]

    monkeypatch.setitem(onnx_registry._CONVERTERS, ("", "Relu"), [(1, broken)])
    with pytest.raises(ValueError, match=r"node 'r' \(Relu.*internal error: KeyError"):
        from_onnx(relu_model())
