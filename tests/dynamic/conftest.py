"""Shared helpers of the symbolic-dims tests (fixtures: tests cannot import conftest under
--import-mode=importlib): compile once, compare with ONNX Runtime at many sizes."""

from __future__ import annotations

import numpy as np
import pytest


class _Ort:
    """An ONNX Runtime session of `model` (1 thread) and a check of a module against it."""

    def __init__(self, model):
        ort = pytest.importorskip("onnxruntime")
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        self.session = ort.InferenceSession(
            model.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )

    def check(self, module, inputs: dict, rtol=1e-4, atol=1e-4):
        """Run both on `inputs`: the outputs agree in shape and values. Returns ours."""
        ours = module(**inputs)
        theirs = self.session.run(None, inputs)
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs, strict=True):
            assert a.shape == b.shape
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)
        return ours


@pytest.fixture
def ort_of():
    return _Ort
