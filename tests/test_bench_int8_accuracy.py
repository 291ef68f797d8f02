"""bench/int8_accuracy.py's decision_noise: the noise on each view's top-1 minus top-2 logit
against an even spread over the logits, and the flips a Gaussian of each predicts (docs/
quantization.md, "Why 42 dB on the logits still flips 7 of 576 views")."""

import math
import runpy
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
decision_noise = runpy.run_path(str(BENCH / "int8_accuracy.py"))["decision_noise"]


def test_decision_noise_even_and_concentrated():
    rng = np.random.default_rng(5)
    ref = rng.standard_normal((4000, 100))
    even = ref + 0.05 * rng.standard_normal(ref.shape)
    ratio, flips, spread = decision_noise(ref, even)
    assert ratio == pytest.approx(1.0, abs=0.06) and flips == pytest.approx(spread, rel=0.1)
    # the same error energy, all of it on each view's top two logits
    top2 = np.argsort(ref, axis=1)[:, -2:]
    noise = np.zeros_like(ref)
    rows = np.arange(len(ref))[:, None]
    noise[rows, top2] = 0.05 * math.sqrt(50) * rng.standard_normal(top2.shape)
    ratio, flips, spread = decision_noise(ref, ref + noise)
    assert ratio == pytest.approx(math.sqrt(50), rel=0.06) and flips > 3 * spread
    # the prediction is that of a Gaussian: about the flips seen
    seen = int(((ref + noise).argmax(axis=1) != ref.argmax(axis=1)).sum())
    assert flips == pytest.approx(seen, rel=0.25), (flips, seen)
