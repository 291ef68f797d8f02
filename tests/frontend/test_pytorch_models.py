"""Whole models through the PyTorch frontend: torchvision's classification, segmentation and
detection architectures and a BERT-style encoder (written with torch.nn, random weights), small
in the default suite and full size under the slow marker, against torch eager."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tessera  # noqa: E402
from tessera.frontend.pytorch_testing import (  # noqa: E402
    bert_encoder,
    check_module,
    deeplabv3,
    efficientnet_b0,
    flatten_outputs,
    mobilenet_v3_large,
    resnet50,
    resnet_fpn,
    vit_b_16,
)
from tessera.runtime import GraphModule, cpu  # noqa: E402

G = torch.Generator().manual_seed(0)


def image(n=1, size=32):
    return torch.randn(n, 3, size, size, generator=G)


def tokens(batch=2, length=7, vocab=100):
    ids = torch.randint(0, vocab, (batch, length), generator=G)
    mask = torch.ones(batch, length, dtype=torch.int64)
    mask[-1, length // 2 :] = 0  # a padded sequence: the mask must reach the softmax
    return ids, mask


# One block of each kind of MobileNetV3-Large's table: (kernel, expanded, out, SE, activation,
# stride) with and without SE and residual, ReLU and hard-swish, kernels 3 and 5, strides 1 and 2.
MOBILENET_BLOCKS = [(3, 16, 16, False, "RE", 1), (3, 64, 24, False, "RE", 2),
                    (5, 72, 40, True, "RE", 2), (5, 120, 40, True, "RE", 1),
                    (3, 240, 80, False, "HS", 2), (3, 480, 80, True, "HS", 1)]  # fmt: skip

SMALL = {
    "resnet50": lambda: (resnet50(8, (1, 2, 1, 1), 10), (image(2),)),
    "mobilenet_v3_large": lambda: (
        mobilenet_v3_large(0.25, MOBILENET_BLOCKS, num_classes=10, last_channel=32),
        (image(),),
    ),
    "efficientnet_b0": lambda: (efficientnet_b0(0.25, 0.2, num_classes=10), (image(),)),
    "vit_b_16": lambda: (vit_b_16(32, 8, 2, 2, 16, 32, 10), (image(2),)),
    "deeplabv3": lambda: (deeplabv3(8, (1, 1, 1, 1), 5, (2, 4, 6), 16), (image(),)),
    "resnet_fpn": lambda: (resnet_fpn(8, (1, 1, 1, 1), 16), (image(size=64),)),
    "bert_encoder": lambda: (bert_encoder(100, 32, 2, 4, 64), tokens()),
}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_small_model_matches_torch(name):
    model, inputs = SMALL[name]()
    check_module(model, inputs)


def compiled_outputs(model, inputs):
    mod, params = tessera.frontend.from_pytorch(model, inputs)
    with tessera.transform.PassContext(opt_level=3):
        lib = tessera.build(mod, target="llvm", params=params)
    m = GraphModule(lib["default"](cpu(0)))
    for p, x in zip(mod["main"].params, inputs, strict=False):
        m.set_input(p.name, x.numpy())
    m.run()
    return [m.get_output(i).numpy() for i in range(m.get_num_outputs())]


def check_compiled(model, inputs, rtol=1e-4):
    model = model.eval()
    with torch.no_grad():
        expected = [e.numpy() for e in flatten_outputs(model(*inputs))]
    got = compiled_outputs(model, inputs)
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=rtol, atol=rtol * float(np.abs(e).max()))


def test_compiled_detection_backbone_matches_torch():
    """The whole pipeline (passes, fusion, LLVM) on a model with five outputs."""
    check_compiled(*SMALL["resnet_fpn"]())


FULL = {
    "resnet50": lambda: (resnet50(), (image(size=224),)),
    "mobilenet_v3_large": lambda: (mobilenet_v3_large(), (image(size=224),)),
    "efficientnet_b0": lambda: (efficientnet_b0(), (image(size=224),)),
    "vit_b_16": lambda: (vit_b_16(), (image(size=224),)),
    "deeplabv3": lambda: (deeplabv3(), (image(size=224),)),
    "resnet_fpn": lambda: (resnet_fpn(), (image(size=224),)),
    "bert_encoder": lambda: (bert_encoder(), tokens(1, 128, 30522)),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(FULL))
def test_full_size_model_compiled_matches_torch(name):
    check_compiled(*FULL[name]())
