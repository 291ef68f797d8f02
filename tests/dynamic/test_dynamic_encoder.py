"""A BERT-style encoder layer with dynamic batch and sequence (Reshape with 0 and -1 over
symbolic dims, Transpose, batched MatMul, Softmax, LayerNormalization, an Erf GELU): compiled
once, run at five sizes against ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera.frontend import from_onnx
from tessera.models_dynamic import encoder_layer
from tessera.runtime import GraphModule

SIZES = ((1, 8), (2, 5), (3, 17), (1, 1), (4, 33))


def _inputs(batch: int, seq: int) -> dict:
    rng = np.random.default_rng(batch * 1000 + seq)
    x = rng.standard_normal((batch, seq, 64)).astype(np.float32)
    mask = (rng.random((batch, seq)) > 0.2).astype(np.float32)
    return {"x": x, "mask": mask}


def test_types_are_symbolic_expressions():
    mod, _ = from_onnx(encoder_layer())
    func = mod["main"]
    batch, seq, _ = func.params[0].type.shape
    assert func.params[1].type.shape == (batch, seq)  # equal names share one var
    assert func.outputs[0].type.shape == (batch, seq, 64)
    shapes = [c.outputs[0].type.shape for c in func.body if c.op.name == "reshape"]
    assert (batch, 1, 1, seq) in shapes  # Unsqueeze of the mask
    assert (batch, seq, 4, 16) in shapes  # Reshape (0, 0, 4, -1)
    assert (batch, seq, 64) in shapes  # Reshape (0, 0, 64)


@pytest.mark.parametrize("target", ["llvm", pytest.param("c", marks=pytest.mark.slow)])
def test_encoder_layer_five_sizes_match_ort(target, ort_of):
    model = encoder_layer()
    mod, params = from_onnx(model, {"x": (("batch", 1, 8), ("seq", 1, 64), 64)})
    lib = tessera.build(mod, target=target, params=params)
    m, ort = GraphModule(lib["default"]()), ort_of(model)
    for batch, seq in SIZES:
        ort.check(m, _inputs(batch, seq))


def test_inputs_that_disagree_on_a_dim_are_refused():
    mod, params = from_onnx(encoder_layer())
    m = GraphModule(tessera.build(mod, target="llvm", params=params)["default"]())
    x = _inputs(2, 5)["x"]
    with pytest.raises(ValueError, match=r"input 'mask': dim 1 \('seq'\) = 6, but input 'x'"):
        m(x=x, mask=np.ones((2, 6), np.float32))
