"""Full-size models cross-built for aarch64 (NEON, SVE) and armv7, run under QEMU user mode,
against ONNX Runtime on this machine: ResNet-50, MobileNetV2, one BERT layer. Slow (minutes
each under emulation): scripts/test.sh -m slow tests/cross/test_qemu_models.py"""

import numpy as np
import pytest
from bench_modules import load_bench

from tessera.cross.testing import ARM_TARGETS, check_under_qemu, missing_tools
from tessera.models import example_model, random_inputs

pytestmark = pytest.mark.slow


def load_zoo():
    return load_bench("model_zoo")


def require_toolchain(target_name: str) -> None:
    missing = missing_tools(ARM_TARGETS[target_name][0])
    if missing:
        pytest.skip(
            f"not installed: {', '.join(missing)} (scripts/setup.d/45-arm.sh installs them)"
        )


@pytest.mark.parametrize("target_name", list(ARM_TARGETS))
def test_resnet50_matches_ort_under_qemu(target_name, tmp_path):
    require_toolchain(target_name)
    model = example_model()  # ResNet-50 with random weights
    check_under_qemu(model, random_inputs(model), target_name, tmp_path, rtol=1e-3)


@pytest.mark.parametrize("target_name", list(ARM_TARGETS))
def test_mobilenet_v2_matches_ort_under_qemu(target_name, tmp_path):
    require_toolchain(target_name)
    model = load_zoo().mobilenet_v2()
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    check_under_qemu(model, {"input": x}, target_name, tmp_path, rtol=1e-3)


@pytest.mark.parametrize("target_name", list(ARM_TARGETS))
def test_bert_layer_matches_ort_under_qemu(target_name, tmp_path):
    require_toolchain(target_name)
    zoo = load_zoo()
    model = zoo.bert_encoder(layers=1, seq=128)
    check_under_qemu(model, zoo.bert_inputs(model), target_name, tmp_path, rtol=1e-3)
