"""Example models that ship with the onnx package, with reproducible random weights.

    model = tessera.models.example_model()            # ResNet-50, random weights (seed 0)
    model = tessera.models.light_model("densenet121", seed=1)
    randomize_weights(model, np.random.default_rng(0))  # in place, on any such model

The onnx package's light models (`onnx/backend/test/data/light`) build every weight with
`ConstantOfShape` (one value everywhere), which makes their outputs nearly independent of the
input. `randomize_weights` replaces each of those nodes by a random initializer (He-scaled by
fan-in; batch-norm variances positive), so that tests and benchmarks compare real numerics.
The built-in example of the `tessera` command is `example_model()`.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import numpy_helper

EXAMPLE = "resnet50"
EXAMPLE_SEED = 0


def light_model_dir() -> str:
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def light_model_names() -> list[str]:
    """The light models the installed onnx package ships: ['alexnet', ..., 'zfnet512']."""
    files = os.listdir(light_model_dir())
    return sorted(f[len("light_") : -len(".onnx")] for f in files if f.endswith(".onnx"))


def light_model_path(name: str) -> str:
    path = os.path.join(light_model_dir(), f"light_{name}.onnx")
    if not os.path.exists(path):
        known = ", ".join(light_model_names())
        raise ValueError(f"no light model {name!r} in the onnx package (known: {known})")
    return path


def randomize_weights(model: onnx.ModelProto, rng: np.random.Generator) -> onnx.ModelProto:
    """Replace every `ConstantOfShape` whose shape is an initializer by a random initializer of
    that shape (in place; returns the model). Draws from `rng` in node order: reproducible."""
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    # Variances must stay positive; they are named "var" in some models, "riv" in others, so
    # find them by their place: input 4 of BatchNormalization.
    variances = {
        n.input[4]
        for n in model.graph.node
        if n.op_type == "BatchNormalization" and len(n.input) > 4
    }
    keep = []
    for node in model.graph.node:
        if node.op_type != "ConstantOfShape" or node.input[0] not in inits:
            keep.append(node)
            continue
        shape = [int(d) for d in inits[node.input[0]]]
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 0
        w = rng.standard_normal(shape) * (np.sqrt(2 / fan_in) if fan_in else 0.1)
        if node.output[0] in variances:
            w = np.abs(w) + 0.5
        model.graph.initializer.append(
            numpy_helper.from_array(w.astype(np.float32), node.output[0])
        )
    del model.graph.node[:]
    model.graph.node.extend(keep)
    return model


def light_model(name: str, seed: int = EXAMPLE_SEED) -> onnx.ModelProto:
    """The onnx package's light model `name` with random weights drawn from `seed`."""
    model = onnx.load(light_model_path(name))
    return randomize_weights(model, np.random.default_rng(seed))


def example_model() -> onnx.ModelProto:
    """The `tessera` command's built-in example: ResNet-50 (batch 1, 3x224x224), random weights."""
    model = light_model(EXAMPLE, EXAMPLE_SEED)
    model.graph.name = f"{EXAMPLE} (onnx light model, random weights, seed {EXAMPLE_SEED})"
    return model


def random_inputs(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Random feeds for the graph inputs that are not initializers (static shapes only)."""
    rng = np.random.default_rng(seed)
    inits = {i.name for i in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        t = vi.type.tensor_type
        shape = [d.dim_value for d in t.shape.dim]
        feeds[vi.name] = random_array(shape, onnx.helper.tensor_dtype_to_np_dtype(t.elem_type), rng)
    return feeds


def random_array(shape, dtype, rng: np.random.Generator) -> np.ndarray:
    """Standard normal floats; small non-negative integers (valid as indices into most axes)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(dtype)
    if dtype.kind in "iu":
        return rng.integers(0, 2, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


__all__ = [
    "example_model",
    "light_model",
    "light_model_names",
    "light_model_path",
    "random_array",
    "random_inputs",
    "randomize_weights",
]
