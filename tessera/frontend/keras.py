"""Keras frontend: a Keras model file (or model) -> a graph IRModule and its params.

    mod, params = from_keras("model.keras")          # Keras 3: config.json + model.weights.h5
    mod, params = from_keras("model.h5")             # legacy HDF5: model_config + model_weights

Reads the architecture (JSON) and the weights (with h5py) without importing keras; a keras
model object is saved to a temporary `.keras` file and read back. Steps: list every layer
without a converter (one UnsupportedOpError for all of them); bind the inputs (batch dim from
`shape_dict`, else `batch_size`); convert the layers' calls in the order of the config (which is
topological for Sequential and functional models) with the converters of `keras_layers` and
`keras_rnn`. Values keep Keras's channels-last layout; converters of spatial layers run
tessera's NCHW ops between transposes, and back-to-back transposes cancel as they are made.
"""

from __future__ import annotations

import io
import json
import tempfile
import zipfile
from pathlib import Path

import numpy as np

# Importing the converter modules registers their converters.
from tessera.frontend import keras_layers, keras_rnn  # noqa: F401
from tessera.frontend.keras_registry import KerasContext, LayerError, find_converter
from tessera.frontend.onnx import UnsupportedOpError
from tessera.frontend.params import constants_to_params
from tessera.graph.ir import Value
from tessera.ir.module import IRModule

# The sub-layers of composite layers in the order of `layer.weights` (a .keras file stores
# them by attribute name).
_CHILD_ORDER = {"MultiHeadAttention": ["query_dense", "key_dense", "value_dense", "output_dense"]}


def _h5py():
    try:
        import h5py
    except ImportError:
        raise ImportError("from_keras needs h5py: pip install 'tessera[keras]'") from None
    return h5py


def _load(model) -> tuple[dict, dict[str, list[np.ndarray]]]:
    """(model config, {layer name: its weights in the order of layer.weights})."""
    if hasattr(model, "save") and hasattr(model, "get_config"):  # a keras model object
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "model.keras"
            model.save(path)
            return _load(path)
    if not isinstance(model, (str, Path)):
        raise TypeError(
            f"from_keras expects a path to a .keras or .h5 file or a keras model, got "
            f"{type(model).__name__}"
        )
    path = Path(model)
    if not path.exists():
        raise ValueError(f"no such Keras model file: {str(path)!r}")
    if zipfile.is_zipfile(path):
        return _load_keras_v3(path)
    h5py = _h5py()
    try:
        f = h5py.File(path, "r")
    except OSError:
        raise ValueError(
            f"{str(path)!r} is neither a Keras 3 .keras archive nor an HDF5 .h5 file"
        ) from None
    with f:
        return _load_legacy_h5(path, f)


def _load_keras_v3(path: Path):
    h5py = _h5py()
    try:
        with zipfile.ZipFile(path) as z:
            config = json.loads(z.read("config.json"))
            data = z.read("model.weights.h5") if "model.weights.h5" in z.namelist() else None
    except (KeyError, zipfile.BadZipFile, json.JSONDecodeError) as e:
        raise ValueError(f"{str(path)!r} is not a valid .keras archive: {e}") from None
    if not isinstance(config, dict):
        raise ValueError(f"{str(path)!r}: config.json does not describe a model")
    classes = {
        layer.get("config", {}).get("name"): layer.get("class_name")
        for layer in config.get("config", {}).get("layers") or []
        if isinstance(layer, dict)
    }
    weights = {}
    if data is not None:
        try:
            with h5py.File(io.BytesIO(data), "r") as f:
                for group in f["layers"].values() if "layers" in f else []:
                    # the group's key is made from the class; its vars name the layer
                    name = group["vars"].attrs.get("name") if "vars" in group else None
                    if name is not None:
                        weights[str(name)] = _group_arrays(group, classes.get(str(name), ""))
        except OSError as e:
            raise ValueError(f"{str(path)!r}: cannot read model.weights.h5: {e}") from None
    return config, weights


def _group_arrays(group, cls: str) -> list[np.ndarray]:
    arrays = []
    if "vars" in group:
        v = group["vars"]
        arrays += [np.array(v[str(i)]) for i in range(len(v))]
    children = [k for k in group.keys() if k != "vars"]
    order = _CHILD_ORDER.get(cls)
    children = [k for k in order if k in children] if order else sorted(children)
    for k in children:
        arrays += _group_arrays(group[k], "")
    return arrays


def _load_legacy_h5(path: Path, f):
    if "model_config" not in f.attrs:
        raise ValueError(f"{str(path)!r} holds no model architecture (saved weights only?)")
    raw = f.attrs["model_config"]
    try:
        config = json.loads(raw.decode() if isinstance(raw, bytes) else raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{str(path)!r}: the model_config attribute is not JSON: {e}") from None
    if not isinstance(config, dict):
        raise ValueError(f"{str(path)!r}: model_config does not describe a model")
    root = f["model_weights"] if "model_weights" in f else f
    weights = {}
    for name, group in root.items():
        names = [n.decode() if isinstance(n, bytes) else str(n)
                 for n in group.attrs.get("weight_names", [])]  # fmt: skip
        weights[name] = [np.array(group[n]) for n in names]
    return config, weights


# -- the graph of layer calls ------------------------------------------------------------------


def _layers_and_io(config: dict):
    """(layer configs, input refs, output refs) of a Sequential or functional model."""
    cls, cfg = config.get("class_name"), config.get("config", {})
    layers = cfg.get("layers")
    if not isinstance(layers, list):
        raise ValueError(f"the model config ({cls}) lists no layers")
    if cls == "Sequential":
        return _sequential_graph(cfg, layers)
    if cls in ("Functional", "Model"):
        return layers, _refs(cfg.get("input_layers")), _refs(cfg.get("output_layers"))
    raise ValueError(f"models of class {cls!r} are not supported (Sequential and functional are)")


def _refs(spec):
    """[name, node, tensor] or a list of them (or a dict of them) -> [(name, node, tensor)]."""
    if isinstance(spec, dict):
        spec = list(spec.values())
    if spec and isinstance(spec[0], str):
        spec = [spec]
    return [(s[0], s[1], s[2]) for s in spec or []]


def _sequential_graph(cfg, layers):
    """A Sequential as a chain: each layer is called once, on the previous layer's output."""
    layers = [dict(layer) for layer in layers]
    if not layers or layers[0]["class_name"] != "InputLayer":
        first = layers[0]["config"] if layers else {}
        shape = first.get("batch_input_shape") or first.get("batch_shape")
        if shape is None:
            shape = (cfg.get("build_input_shape") or (cfg.get("build_config") or {}).get(
                "input_shape"))  # fmt: skip
        if shape is None:
            raise ValueError("the Sequential model has no input shape (build it before saving)")
        inp = {"class_name": "InputLayer",
               "config": {"name": "input", "batch_shape": shape,
                          "dtype": _dtype_name(first.get("dtype", "float32"))}}  # fmt: skip
        layers.insert(0, inp)
    previous = layers[0]["config"]["name"]
    for layer in layers:
        layer["name"] = layer["config"]["name"]
    for layer in layers[1:]:
        layer["inbound_nodes"] = [{"args": [_tensor_ref(previous)], "kwargs": {}}]
        previous = layer["name"]
    return layers, [(layers[0]["name"], 0, 0)], [(previous, 0, 0)]


def _tensor_ref(name, node=0, index=0):
    return {"class_name": "__keras_tensor__", "config": {"keras_history": [name, node, index]}}


def _dtype_name(dtype) -> str:
    if isinstance(dtype, dict):  # a DTypePolicy
        dtype = dtype.get("config", {}).get("name", "float32")
    return {"mixed_float16": "float32", "mixed_bfloat16": "float32"}.get(dtype, dtype)


def _calls(layer: dict):
    """Each call of a layer as (args, kwargs), in Keras 3 form (Keras 2 configs converted)."""
    for node in layer.get("inbound_nodes") or []:
        if isinstance(node, dict):
            yield node.get("args", []), node.get("kwargs", {})
        else:  # Keras 2: [[name, node, tensor, kwargs], ...]
            refs = [_tensor_ref(n, i, t) for n, i, t, *_ in node]
            kwargs = node[0][3] if node and len(node[0]) > 3 else {}
            yield ([refs[0]] if len(refs) == 1 else [refs]), kwargs


def _resolve(env, arg):
    """Replace keras tensor references in a call argument by their Values."""
    if isinstance(arg, dict) and arg.get("class_name") == "__keras_tensor__":
        name, node, index = arg["config"]["keras_history"]
        key = (name, node, index)
        if key not in env:
            raise LayerError(f"uses output {index} of call {node} of layer {name!r}, which is "
                             "not computed before it")  # fmt: skip
        return env[key]
    if isinstance(arg, list):
        return [_resolve(env, a) for a in arg]
    if isinstance(arg, dict):
        return {k: _resolve(env, v) for k, v in arg.items()}
    return arg


def _check_supported(layers) -> None:
    missing = [(layer["config"].get("name", "?"), layer["class_name"], "")
               for layer in layers
               if layer["class_name"] != "InputLayer" and find_converter(layer["class_name"])
               is None]  # fmt: skip
    if missing:
        raise UnsupportedOpError(missing)


def _input(b, layer, shape_dict, batch_size):
    cfg = layer["config"]
    name = cfg.get("name", layer.get("name"))
    shape = cfg.get("batch_shape") or cfg.get("batch_input_shape")
    if name in shape_dict:
        shape = tuple(shape_dict[name])
    elif shape is None:
        raise ValueError(f"input {name!r} has no shape: give it in shape_dict")
    else:
        shape = tuple(batch_size if i == 0 and d is None else d for i, d in enumerate(shape))
        if any(d is None for d in shape):
            raise ValueError(
                f"input {name!r} has a dynamic dim (shape {list(shape)}): give its shape in "
                "shape_dict"
            )
    return b.param(name, shape, _dtype_name(cfg.get("dtype", "float32")))


def from_keras(model, shape_dict: dict | None = None, batch_size: int = 1):
    """Convert a Keras model to (IRModule with function "main", params: dict[str, ndarray]).

    `model` is a path to a `.keras` or `.h5` file, or a keras Model. Inputs whose batch dim is
    unknown get `batch_size`; `shape_dict` ({input name: shape}) overrides whole shapes.
    Params are named "<layer>/<i>" (the i-th weight of a layer, in Keras's order)."""
    config, weights = _load(model)
    layers, inputs, outputs = _layers_and_io(config)
    _check_supported(layers)
    shape_dict = dict(shape_dict or {})
    b = KerasContext(weights)
    env: dict[tuple, Value] = {}
    by_name = {layer.get("name") or layer["config"]["name"]: layer for layer in layers}
    for name, _, _ in inputs:  # the function's inputs in the model's order of inputs
        if by_name.get(name, {}).get("class_name") != "InputLayer":
            raise ValueError(f"the model's input {name!r} is not an InputLayer")
        env[(name, 0, 0)] = _input(b, by_name[name], shape_dict, batch_size)
    for layer in layers:
        name = layer.get("name") or layer["config"]["name"]
        if layer["class_name"] == "InputLayer":
            continue
        for k, (args, kwargs) in enumerate(_calls(layer)):
            _convert_call(b, layer, name, k, args, kwargs, env)
    missing = [f"{n}[{i}]" for n, i, t in outputs if (n, i, t) not in env]
    if missing:
        raise ValueError(f"the model's outputs {missing} are not computed by its layers")
    func = b.finish([env[ref] for ref in outputs])
    func, params = constants_to_params(b.eliminate_dead(func), b.weight_ids)
    func.verify()
    return IRModule({"main": func}), params


def _convert_call(b, layer, name, k, args, kwargs, env):
    cls = layer["class_name"]
    b.layer_name, b.span, b.name_hint = name, (name,), name
    try:
        args, kwargs = _resolve(env, args), _resolve(env, kwargs)
        out = find_converter(cls)(b, layer["config"], *args, **kwargs)
    except (LayerError, TypeError, ValueError, NotImplementedError) as e:
        raise ValueError(f"layer {name!r} ({cls}): {e}") from None
    outs = out if isinstance(out, (tuple, list)) else (out,)
    for i, v in enumerate(outs):
        env[(name, k, i)] = v


__all__ = ["from_keras"]
