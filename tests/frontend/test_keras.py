"""The Keras frontend: models built with keras (torch backend, random weights), saved as .keras
and as legacy .h5, converted and run by tessera's interpreter (one also compiled) against
keras's own predictions; a Keras-2-style .h5 written by hand; errors."""

import json
import os
import zipfile

import numpy as np
import pytest

os.environ.setdefault("KERAS_BACKEND", "torch")  # no tensorflow here
h5py = pytest.importorskip("h5py")
keras = pytest.importorskip("keras")
L = keras.layers

import tessera  # noqa: E402
from tessera.frontend import UnsupportedOpError, from_keras  # noqa: E402
from tessera.graph import run_function  # noqa: E402
from tessera.runtime import GraphModule, cpu  # noqa: E402

R = np.random.default_rng(0)
# keras's torch backend warns on every variable read under numpy 2 (its own deprecation)
pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")


def randomize_batch_norm(model):
    """Non-trivial statistics: the variance (last) and the scale (first, if any) positive."""
    for layer in model.layers:
        if isinstance(layer, L.BatchNormalization):
            weights = layer.get_weights()
            new = [R.normal(0, 0.2, w.shape) for w in weights]
            new[0], new[-1] = (R.uniform(0.5, 1.5, w.shape) for w in (weights[0], weights[-1]))
            layer.set_weights([w.astype("float32") for w in new])
    return model


def check(model, inputs, tmp_path, formats=("keras", "h5"), rtol=1e-4):
    """Save `model` in each format, convert, run and compare with model.predict."""
    inputs = inputs if isinstance(inputs, list) else [inputs]
    expected = model.predict(inputs if len(inputs) > 1 else inputs[0], verbose=0)
    expected = expected if isinstance(expected, list) else [expected]
    funcs = []
    for fmt in formats:
        path = tmp_path / f"model.{fmt}"
        model.save(path)
        mod, params = from_keras(str(path), batch_size=inputs[0].shape[0])
        func = mod["main"]
        feeds = {p.name: x for p, x in zip(func.params, inputs, strict=False)}
        got = run_function(func, feeds, params)
        assert len(got) == len(expected)
        for g, e in zip(got, expected, strict=True):
            e = np.asarray(e)
            assert g.shape == e.shape, (fmt, g.shape, e.shape)
            np.testing.assert_allclose(g, e, rtol=rtol, atol=rtol * float(np.abs(e).max()),
                                       err_msg=fmt)  # fmt: skip
        funcs.append(func)
    return funcs


def cnn():
    inp = keras.Input((12, 12, 3), name="image")
    x = L.Conv2D(8, 3, strides=2, padding="same", activation="relu")(inp)
    x = L.BatchNormalization()(x)
    y = L.DepthwiseConv2D(3, padding="same", depth_multiplier=2)(x)
    y = L.Activation("swish")(y)
    y = L.Conv2D(8, 1, use_bias=False)(y)
    x = L.Add()([x, y])
    x = L.SeparableConv2D(6, 3, activation="relu6")(x)
    x = L.ReLU(max_value=4.0)(x)
    x = L.MaxPooling2D(2, padding="same")(x)
    a = L.AveragePooling2D(2, strides=1, padding="same")(x)
    x = L.Concatenate()([x, a])
    x = L.ZeroPadding2D(((1, 0), (0, 1)))(x)
    x = L.UpSampling2D(2)(x)
    g = L.GlobalAveragePooling2D()(x)
    f = L.Dense(5, activation="gelu")(L.Flatten()(x))
    out = L.Dense(4, activation="softmax")(L.Concatenate()([g, f]))
    return randomize_batch_norm(keras.Model(inp, out))


def test_cnn_matches_keras(tmp_path):
    funcs = check(cnn(), R.standard_normal((2, 12, 12, 3)).astype("float32"), tmp_path)
    # conv -> batch norm -> depthwise conv -> ... stays in NCHW: the layout changes cancel
    transposes = sum(c.op.name == "transpose" for c in funcs[0].body)
    assert transposes <= 4, transposes


def test_compiled_cnn_matches_keras(tmp_path):
    model = cnn()
    x = R.standard_normal((1, 12, 12, 3)).astype("float32")
    mod, params = from_keras(model)  # a model object, saved and read back
    with tessera.transform.PassContext(opt_level=3):
        lib = tessera.build(mod, target="llvm", params=params)
    m = GraphModule(lib["default"](cpu(0)))
    m.set_input("image", x)
    m.run()
    expected = model.predict(x, verbose=0)
    np.testing.assert_allclose(m.get_output(0).numpy(), expected, rtol=1e-4, atol=1e-5)


def test_recurrent_models_match_keras(tmp_path):
    tokens = keras.Input((6,), dtype="int32")
    e = L.Embedding(20, 8)(tokens)
    s1 = L.LSTM(7, return_sequences=True)(e)
    s2 = L.GRU(5, go_backwards=True)(s1)
    s3 = L.GRU(5, reset_after=False, return_sequences=True, activation="relu")(e)
    s4, h = L.SimpleRNN(3, return_state=True)(s3)
    s5, h5, c5 = L.LSTM(4, return_state=True, use_bias=False)(e)
    model = keras.Model(tokens, [s2, s4, h, s5, c5])
    check(model, R.integers(0, 20, (2, 6)).astype("int32"), tmp_path)


def test_transformer_block_matches_keras(tmp_path):
    q = keras.Input((5, 8))
    a = L.MultiHeadAttention(2, 4)(q, q)
    a = L.LayerNormalization(epsilon=1e-5)(L.Add()([q, a]))
    b = L.MultiHeadAttention(2, 3, value_dim=5, use_bias=False)(a, a, use_causal_mask=True)
    ff = L.Dense(8)(L.Dense(16, activation="relu")(b))
    c = L.Conv1D(4, 3, padding="causal", dilation_rate=2)(L.Add()([b, ff]))
    c = L.Conv1D(4, 2, strides=2, activation="tanh")(c)
    out = L.GlobalMaxPooling1D()(c)
    check(keras.Model(q, out), R.standard_normal((2, 5, 8)).astype("float32"), tmp_path)


def test_sequential_matches_keras(tmp_path):
    model = keras.Sequential([
        keras.Input((10,)), L.Dense(6), L.LeakyReLU(), L.Reshape((3, 2)), L.Permute((2, 1)),
        L.Flatten(), L.Dropout(0.5), L.Dense(4, activation="sigmoid"), L.RepeatVector(2),
        L.Reshape((-1,)), L.PReLU(), L.Dense(2, activation="elu"),
    ])  # fmt: skip
    check(model, R.standard_normal((3, 10)).astype("float32"), tmp_path)


def test_assorted_layers_and_three_inputs(tmp_path):
    vol = keras.Input((6, 6, 6, 2), name="vol")
    v = L.Conv3D(3, 3, padding="same", activation="hard_sigmoid")(vol)
    v = L.Flatten()(L.GlobalMaxPooling3D(keepdims=True)(L.MaxPooling3D(2)(v)))
    img = keras.Input((8, 8, 3), name="img")
    x = L.Rescaling(1 / 127.5, offset=-1)(img)
    x = L.Cropping2D(((1, 0), (2, 1)))(x)
    x = L.UpSampling2D(2, interpolation="bilinear")(x)
    x = L.SeparableConv2D(4, 3, strides=2, depth_multiplier=2, use_bias=False,
                          activation="hard_silu")(x)  # fmt: skip
    x = L.BatchNormalization(center=False)(x)
    x = L.LayerNormalization(axis=[1, 2, 3])(x)
    x = L.Conv2D(4, 3, dilation_rate=2, padding="same", activation="selu")(x)
    x = L.Reshape((4,))(L.GlobalMaxPooling2D(keepdims=True)(x))
    seq = keras.Input((10, 4), name="seq")
    s = L.Conv1D(4, 3, padding="same", groups=2, activation="softplus")(seq)
    s = L.AveragePooling1D(3, strides=2, padding="same")(L.UpSampling1D(2)(s))
    s = L.Cropping1D((0, 1))(L.ZeroPadding1D((1, 2))(s))
    s = L.BatchNormalization()(L.DepthwiseConv1D(3)(s))
    s = L.GlobalAveragePooling1D()(L.Softmax(axis=1)(s))
    out = L.Dense(3, activation="log_softmax")(L.ELU(alpha=0.5)(L.Concatenate()([v, x, s])))
    model = randomize_batch_norm(
        keras.Model([vol, img, seq], [out, L.Maximum()([x, s]), L.Minimum()([x, s])])
    )
    inputs = [R.standard_normal((2, 6, 6, 6, 2)).astype("float32"),
              R.uniform(0, 255, (2, 8, 8, 3)).astype("float32"),
              R.standard_normal((2, 10, 4)).astype("float32")]  # fmt: skip
    funcs = check(model, inputs, tmp_path)
    assert [p.name for p in funcs[0].params[:3]] == ["vol", "img", "seq"]


def test_transposed_convolutions_match_keras(tmp_path):
    """Keras's output lengths (`same`, `valid`, output_padding) as conv_transpose pads."""
    img = keras.Input((5, 6, 3), name="img")
    a = L.Conv2DTranspose(4, 3, strides=2, padding="same", activation="relu")(img)
    b = L.Conv2DTranspose(4, 4, strides=3, padding="valid", output_padding=1)(img)
    c = L.Conv2DTranspose(2, 1, strides=3, padding="valid", use_bias=False)(a)  # k < stride
    seq = keras.Input((7, 3), name="seq")
    d = L.Conv1DTranspose(2, 3, strides=2, padding="same", dilation_rate=1)(seq)
    model = keras.Model([img, seq], [a, b, c, d])
    inputs = [R.standard_normal((2, 5, 6, 3)).astype("float32"),
              R.standard_normal((2, 7, 3)).astype("float32")]  # fmt: skip
    check(model, inputs, tmp_path)


def test_two_inputs_and_shared_layer(tmp_path):
    a, c = keras.Input((4,), name="a"), keras.Input((4,), name="c")
    shared = L.Dense(3, activation="tanh")
    out = L.Subtract()([shared(a), shared(c)])
    out = L.Average()([out, L.Multiply()([shared(a), out])])
    model = keras.Model([a, c], out)
    x = [R.standard_normal((2, 4)).astype("float32") for _ in range(2)]
    (func,) = check(model, x, tmp_path, formats=("keras",))
    assert [p.name for p in func.params[:2]] == ["a", "c"]


def test_shape_dict_and_batch_size(tmp_path):
    inp = keras.Input((None, 3), name="steps")
    keras.Model(inp, L.Dense(2)(inp)).save(tmp_path / "m.keras")
    with pytest.raises(ValueError, match=r"'steps' has a dynamic dim.*shape_dict"):
        from_keras(str(tmp_path / "m.keras"))
    mod, _ = from_keras(str(tmp_path / "m.keras"), shape_dict={"steps": (4, 7, 3)})
    assert mod["main"].params[0].type.shape == (4, 7, 3)
    fixed = keras.Input((5, 3), name="fixed")
    keras.Model(fixed, L.Dense(2)(fixed)).save(tmp_path / "f.keras")
    mod, _ = from_keras(str(tmp_path / "f.keras"), batch_size=6)
    assert mod["main"].params[0].type.shape == (6, 5, 3)


def test_unsupported_layers_reported_at_once(tmp_path):
    inp = keras.Input((6, 4))
    x = L.Bidirectional(L.LSTM(3, return_sequences=True), name="bi")(inp)
    x = L.TimeDistributed(L.Dense(2), name="per_step")(x)
    x = L.Dense(2, name="ok")(x)
    x = L.Lambda(lambda t: t * 2, name="custom")(x)
    keras.Model(inp, x).save(tmp_path / "m.keras", zipped=True)
    with pytest.raises(UnsupportedOpError) as info:
        from_keras(str(tmp_path / "m.keras"))
    message = str(info.value)
    for text in ("bi: Bidirectional", "per_step: TimeDistributed", "custom: Lambda", "3 node(s)"):
        assert text in message
    assert "ok" not in [n for n, _, _ in info.value.nodes]


def test_malformed_files_give_clear_errors(tmp_path):
    garbage = tmp_path / "bad.keras"
    garbage.write_bytes(b"not a model \x00\xff")
    with pytest.raises(ValueError, match="neither a Keras 3 .keras archive nor an HDF5"):
        from_keras(str(garbage))
    with pytest.raises(ValueError, match="no such Keras model file"):
        from_keras(str(tmp_path / "missing.keras"))
    with pytest.raises(TypeError, match="path to a .keras or .h5 file"):
        from_keras(42)
    no_config = tmp_path / "empty.keras"
    with zipfile.ZipFile(no_config, "w") as z:
        z.writestr("metadata.json", "{}")
    with pytest.raises(ValueError, match="not a valid .keras archive"):
        from_keras(str(no_config))
    not_a_model = tmp_path / "list.keras"
    with zipfile.ZipFile(not_a_model, "w") as z:
        z.writestr("config.json", "[1, 2]")
    with pytest.raises(ValueError, match="does not describe a model"):
        from_keras(str(not_a_model))
    bad_json = tmp_path / "bad_json.h5"
    with h5py.File(bad_json, "w") as f:
        f.attrs["model_config"] = b"{not json"
    with pytest.raises(ValueError, match="model_config attribute is not JSON"):
        from_keras(str(bad_json))
    weights_only = tmp_path / "w.h5"
    with h5py.File(weights_only, "w") as f:
        f.create_dataset("dense/kernel", data=np.zeros((2, 2)))
    with pytest.raises(ValueError, match="no model architecture"):
        from_keras(str(weights_only))
    model = keras.Sequential([keras.Input((2, 6, 6)), L.Conv2D(2, 3, data_format="channels_first")])
    model.save(tmp_path / "cf.keras")
    with pytest.raises(ValueError, match=r"layer 'conv2d.*channels_first"):
        from_keras(str(tmp_path / "cf.keras"))


def test_keras2_style_h5_written_by_hand(tmp_path):
    """TF-Keras 2 files: inbound_nodes as nested lists, batch_input_shape, weight names with
    ':0', weights under model_weights/<layer>/<layer>/."""
    w1, b1 = R.standard_normal((4, 3)).astype("float32"), R.standard_normal(3).astype("float32")
    w2 = R.standard_normal((3, 2)).astype("float32")
    config = {"class_name": "Functional", "config": {"name": "model", "layers": [
        {"class_name": "InputLayer", "name": "input_1", "inbound_nodes": [],
         "config": {"batch_input_shape": [None, 4], "dtype": "float32", "name": "input_1"}},
        {"class_name": "Dense", "name": "dense", "inbound_nodes": [[["input_1", 0, 0, {}]]],
         "config": {"name": "dense", "units": 3, "activation": "relu", "use_bias": True}},
        {"class_name": "Dense", "name": "dense_1", "inbound_nodes": [[["dense", 0, 0, {}]]],
         "config": {"name": "dense_1", "units": 2, "activation": "linear", "use_bias": False}},
        {"class_name": "Add", "name": "add", "inbound_nodes": [[["dense_1", 0, 0, {}],
                                                                ["dense_1", 0, 0, {}]]],
         "config": {"name": "add"}},
    ], "input_layers": [["input_1", 0, 0]], "output_layers": [["add", 0, 0]]}}  # fmt: skip
    path = tmp_path / "keras2.h5"
    with h5py.File(path, "w") as f:
        f.attrs["model_config"] = json.dumps(config).encode()
        g = f.create_group("model_weights")
        for layer, arrays in (
            ("dense", {"kernel:0": w1, "bias:0": b1}),
            ("dense_1", {"kernel:0": w2}),
        ):
            lg = g.create_group(layer)
            lg.attrs["weight_names"] = [f"{layer}/{n}".encode() for n in arrays]
            for n, a in arrays.items():
                lg.create_dataset(f"{layer}/{n}", data=a)
    mod, params = from_keras(str(path), batch_size=3)
    x = R.standard_normal((3, 4)).astype("float32")
    (got,) = run_function(mod["main"], {"input_1": x}, params)
    np.testing.assert_allclose(got, 2 * (np.maximum(x @ w1 + b1, 0) @ w2), rtol=1e-5, atol=1e-6)
