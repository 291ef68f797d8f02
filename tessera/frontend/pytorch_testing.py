"""Testing helpers for the PyTorch frontend: torchvision's architectures written with `torch.nn`
(torchvision does not install beside the pinned torch), sized by a width and a depth so the
default tests run small and the slow tests and the benchmark run the real sizes, and
`check_module`, which compares tessera's graph interpreter with torch eager.

    model = resnet50(width=8, blocks=(1, 1, 1, 1), num_classes=10).eval()
    check_module(model, (torch.randn(1, 3, 32, 32),))

Random weights only (no downloads). BatchNorm statistics are randomized by `randomize_bn` so a
folded or misplaced normalization shows in the outputs.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from tessera.frontend.pytorch import from_pytorch
from tessera.graph import run_function


def randomize_bn(model: nn.Module, seed: int = 0) -> nn.Module:
    """Give every BatchNorm non-trivial running statistics and affine parameters."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                n = m.num_features
                m.running_mean.copy_(torch.randn(n, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(n, generator=g) * 0.5 + 0.75)
                m.weight.copy_(torch.rand(n, generator=g) * 0.5 + 0.75)
                m.bias.copy_(torch.randn(n, generator=g) * 0.1)
    return model


def check_module(model, example_inputs, rtol=1e-4, atol=1e-5, output_names=None):
    """Convert `model`, run it with tessera's interpreter and compare with torch eager: every
    output within `rtol` of the largest magnitude of that output (plus `atol`). Returns
    (IRModule, params); `output_names` names the outputs in failure messages."""
    model = model.eval()
    with torch.no_grad():
        expected = model(*example_inputs)
    expected = [expected] if isinstance(expected, torch.Tensor) else list(flatten_outputs(expected))
    mod, params = from_pytorch(model, example_inputs)
    func = mod["main"]
    feeds = {p.name: x.numpy() for p, x in zip(func.params, example_inputs, strict=False)}
    got = run_function(func, feeds, params)
    assert len(got) == len(expected), (len(got), len(expected))
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        e = e.numpy()
        name = f"output {i}" + (f" ({output_names[i]})" if output_names else "")
        assert g.shape == e.shape, (name, g.shape, e.shape)
        assert g.dtype == e.dtype, (name, g.dtype, e.dtype)
        scale = float(np.max(np.abs(e))) if e.size and e.dtype.kind == "f" else 1.0
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol + rtol * scale, err_msg=name)
    return mod, params


def flatten_outputs(out):
    if isinstance(out, torch.Tensor):
        yield out
    elif isinstance(out, dict):
        for v in out.values():
            yield from flatten_outputs(v)
    else:
        for v in out:
            yield from flatten_outputs(v)


def _conv_bn(cin, cout, k=3, stride=1, groups=1, dilation=1, act=nn.ReLU):
    layers = [
        nn.Conv2d(cin, cout, k, stride, dilation * (k - 1) // 2, dilation, groups, bias=False),
        nn.BatchNorm2d(cout),
    ]
    return nn.Sequential(*layers, act(inplace=True)) if act else nn.Sequential(*layers)


# -- ResNet-50 (torchvision.models.resnet) ----------------------------------------------------


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin, width, stride=1, dilation=1, downsample=None):
        super().__init__()
        self.conv1 = _conv_bn(cin, width, 1)
        self.conv2 = _conv_bn(width, width, 3, stride, dilation=dilation)
        self.conv3 = _conv_bn(width, width * 4, 1, act=None)
        self.downsample = downsample
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu(self.conv3(self.conv2(self.conv1(x))) + identity)


class ResNet(nn.Module):
    """ResNet with Bottleneck blocks; `dilate` replaces the strides of the last stages with
    dilation (DeepLabV3's backbone); `features=True` returns the four stages' outputs."""

    def __init__(self, width=64, blocks=(3, 4, 6, 3), num_classes=1000, dilate=(False,) * 3):
        super().__init__()
        self.stem = nn.Sequential(_conv_bn(3, width, 7, 2), nn.MaxPool2d(3, 2, 1))
        self.cin, self.dilation = width, 1
        self.layer1 = self._stage(width, blocks[0], 1, False)
        self.layer2 = self._stage(width * 2, blocks[1], 2, dilate[0])
        self.layer3 = self._stage(width * 4, blocks[2], 2, dilate[1])
        self.layer4 = self._stage(width * 8, blocks[3], 2, dilate[2])
        self.fc = nn.Linear(width * 32, num_classes)

    def _stage(self, width, n, stride, dilate):
        previous = self.dilation
        if dilate:
            self.dilation, stride = self.dilation * stride, 1
        down = None
        if stride != 1 or self.cin != width * 4:
            down = _conv_bn(self.cin, width * 4, 1, stride, act=None)
        layers = [Bottleneck(self.cin, width, stride, previous, down)]
        self.cin = width * 4
        layers += [Bottleneck(self.cin, width, dilation=self.dilation) for _ in range(1, n)]
        return nn.Sequential(*layers)

    def features(self, x):
        c1 = self.layer1(self.stem(x))
        c2 = self.layer2(c1)
        c3 = self.layer3(c2)
        return c1, c2, c3, self.layer4(c3)

    def forward(self, x):
        x = self.features(x)[-1]
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def resnet50(width=64, blocks=(3, 4, 6, 3), num_classes=1000):
    return randomize_bn(ResNet(width, blocks, num_classes))


# -- MobileNetV3-Large and EfficientNet-B0 (torchvision.models.mobilenetv3 / efficientnet) --


class SqueezeExcitation(nn.Module):
    def __init__(self, channels, squeeze, act=nn.ReLU, gate=nn.Hardsigmoid):
        super().__init__()
        self.fc1, self.fc2 = nn.Conv2d(channels, squeeze, 1), nn.Conv2d(squeeze, channels, 1)
        self.act, self.gate = act(), gate()

    def forward(self, x):
        s = F.adaptive_avg_pool2d(x, 1)
        return x * self.gate(self.fc2(self.act(self.fc1(s))))


def _divisible(v, d=8):
    return max(d, int(v + d / 2) // d * d)


class InvertedResidual(nn.Module):
    def __init__(self, cin, k, expanded, cout, se, act, stride, se_act=nn.ReLU, gate=None):
        super().__init__()
        gate = gate or nn.Hardsigmoid
        layers = [] if expanded == cin else [_conv_bn(cin, expanded, 1, act=act)]
        layers.append(_conv_bn(expanded, expanded, k, stride, groups=expanded, act=act))
        if se:
            squeeze = _divisible(expanded // 4) if gate is nn.Hardsigmoid else max(1, cin // 4)
            layers.append(SqueezeExcitation(expanded, squeeze, se_act, gate))
        layers.append(_conv_bn(expanded, cout, 1, act=None))
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.block(x)
        return x + y if self.residual else y


# (kernel, expanded, out, SE, activation, stride) as in torchvision's mobilenet_v3_large
MOBILENET_V3_LARGE = [
    (3, 16, 16, False, "RE", 1), (3, 64, 24, False, "RE", 2), (3, 72, 24, False, "RE", 1),
    (5, 72, 40, True, "RE", 2), (5, 120, 40, True, "RE", 1), (5, 120, 40, True, "RE", 1),
    (3, 240, 80, False, "HS", 2), (3, 200, 80, False, "HS", 1), (3, 184, 80, False, "HS", 1),
    (3, 184, 80, False, "HS", 1), (3, 480, 112, True, "HS", 1), (3, 672, 112, True, "HS", 1),
    (5, 672, 160, True, "HS", 2), (5, 960, 160, True, "HS", 1), (5, 960, 160, True, "HS", 1),
]  # fmt: skip


class MobileNetV3(nn.Module):
    def __init__(self, width_mult=1.0, config=None, num_classes=1000, last_channel=1280):
        super().__init__()
        config = MOBILENET_V3_LARGE if config is None else config
        acts = {"RE": nn.ReLU, "HS": nn.Hardswish}
        cin = _divisible(16 * width_mult)
        layers = [_conv_bn(3, cin, 3, 2, act=nn.Hardswish)]
        for k, exp, out, se, act, stride in config:
            exp, out = _divisible(exp * width_mult), _divisible(out * width_mult)
            layers.append(InvertedResidual(cin, k, exp, out, se, acts[act], stride))
            cin = out
        layers.append(_conv_bn(cin, 6 * cin, 1, act=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(
            nn.Linear(6 * cin, last_channel),
            nn.Hardswish(inplace=True),
            nn.Dropout(0.2),
            nn.Linear(last_channel, num_classes),
        )

    def forward(self, x):
        x = F.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


def mobilenet_v3_large(width_mult=1.0, config=None, num_classes=1000, last_channel=1280):
    return randomize_bn(MobileNetV3(width_mult, config, num_classes, last_channel))


# (expand ratio, kernel, stride, in, out, repeats) as in torchvision's efficientnet_b0
EFFICIENTNET_B0 = [
    (1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3),
    (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1),
]  # fmt: skip


class EfficientNet(nn.Module):
    def __init__(self, width_mult=1.0, depth_mult=1.0, config=None, num_classes=1000):
        super().__init__()
        config = EFFICIENTNET_B0 if config is None else config
        layers = [_conv_bn(3, _divisible(32 * width_mult), 3, 2, act=nn.SiLU)]
        for ratio, k, stride, cin, cout, n in config:
            cin, cout = _divisible(cin * width_mult), _divisible(cout * width_mult)
            for i in range(max(1, math.ceil(n * depth_mult))):
                c = cin if i == 0 else cout
                layers.append(
                    InvertedResidual(
                        c,
                        k,
                        c * ratio,
                        cout,
                        True,
                        nn.SiLU,
                        stride if i == 0 else 1,
                        se_act=nn.SiLU,
                        gate=nn.Sigmoid,
                    )  # fmt: skip
                )
        last = 4 * cout
        layers.append(_conv_bn(cout, last, 1, act=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, num_classes))

    def forward(self, x):
        x = F.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


def efficientnet_b0(width_mult=1.0, depth_mult=1.0, config=None, num_classes=1000):
    return randomize_bn(EfficientNet(width_mult, depth_mult, config, num_classes))


# -- ViT-B/16 (torchvision.models.vision_transformer) ----------------------------------------


class EncoderBlock(nn.Module):
    def __init__(self, heads, hidden, mlp):
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden, eps=1e-6)
        self.self_attention = nn.MultiheadAttention(hidden, heads, batch_first=True)
        self.ln_2 = nn.LayerNorm(hidden, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(hidden, mlp), nn.GELU(), nn.Linear(mlp, hidden))

    def forward(self, x):
        y = self.ln_1(x)
        y, _ = self.self_attention(y, y, y, need_weights=False)
        x = x + y
        return x + self.mlp(self.ln_2(x))


class VisionTransformer(nn.Module):
    def __init__(self, image=224, patch=16, layers=12, heads=12, hidden=768, mlp=3072,
                 num_classes=1000):  # fmt: skip
        super().__init__()
        self.patch, self.hidden = patch, hidden
        self.conv_proj = nn.Conv2d(3, hidden, patch, patch)
        self.class_token = nn.Parameter(torch.randn(1, 1, hidden) * 0.02)
        n = (image // patch) ** 2 + 1
        self.pos_embedding = nn.Parameter(torch.randn(1, n, hidden) * 0.02)
        self.layers = nn.Sequential(*[EncoderBlock(heads, hidden, mlp) for _ in range(layers)])
        self.ln = nn.LayerNorm(hidden, eps=1e-6)
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, x):
        n = x.shape[0]
        x = self.conv_proj(x).reshape(n, self.hidden, -1).permute(0, 2, 1)
        x = torch.cat([self.class_token.expand(n, -1, -1), x], dim=1) + self.pos_embedding
        x = self.ln(self.layers(x))
        return self.head(x[:, 0])


def vit_b_16(image=224, patch=16, layers=12, heads=12, hidden=768, mlp=3072, num_classes=1000):
    return VisionTransformer(image, patch, layers, heads, hidden, mlp, num_classes)


# -- DeepLabV3 (torchvision.models.segmentation.deeplabv3) -----------------------------------


class ASPP(nn.Module):
    def __init__(self, cin, rates, cout=256):
        super().__init__()
        self.convs = nn.ModuleList([_conv_bn(cin, cout, 1)])
        self.convs.extend(_conv_bn(cin, cout, 3, dilation=r) for r in rates)
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), _conv_bn(cin, cout, 1))
        self.project = _conv_bn(cout * (len(rates) + 2), cout, 1)

    def forward(self, x):
        outs = [c(x) for c in self.convs]
        pooled = self.pool(x)
        outs.append(F.interpolate(pooled, size=x.shape[-2:], mode="bilinear", align_corners=False))
        return self.project(torch.cat(outs, dim=1))


class DeepLabV3(nn.Module):
    def __init__(self, width=64, blocks=(3, 4, 6, 3), num_classes=21, rates=(12, 24, 36),
                 aspp_channels=256):  # fmt: skip
        super().__init__()
        self.backbone = ResNet(width, blocks, 1, dilate=(False, True, True))
        self.aspp = ASPP(width * 32, rates, aspp_channels)
        self.head = nn.Sequential(
            _conv_bn(aspp_channels, aspp_channels, 3), nn.Conv2d(aspp_channels, num_classes, 1)
        )

    def forward(self, x):
        y = self.head(self.aspp(self.backbone.features(x)[-1]))
        return F.interpolate(y, size=x.shape[-2:], mode="bilinear", align_corners=False)


def deeplabv3(width=64, blocks=(3, 4, 6, 3), num_classes=21, rates=(12, 24, 36), aspp=256):
    return randomize_bn(DeepLabV3(width, blocks, num_classes, rates, aspp))


# -- a detection backbone: ResNet + FPN (torchvision.ops.feature_pyramid_network) ------------


class ResNetFPN(nn.Module):
    """The backbone of Faster R-CNN / RetinaNet: four ResNet stages, a top-down pyramid with
    nearest upsampling and an extra max-pooled level; returns a dict of five feature maps."""

    def __init__(self, width=64, blocks=(3, 4, 6, 3), channels=256):
        super().__init__()
        self.body = ResNet(width, blocks, 1)
        stage_channels = [width * 4, width * 8, width * 16, width * 32]
        self.inner = nn.ModuleList(nn.Conv2d(c, channels, 1) for c in stage_channels)
        self.layer = nn.ModuleList(nn.Conv2d(channels, channels, 3, padding=1) for _ in range(4))

    def forward(self, x):
        feats = self.body.features(x)
        last = self.inner[-1](feats[-1])
        results = [self.layer[-1](last)]
        for i in range(len(feats) - 2, -1, -1):
            lateral = self.inner[i](feats[i])
            last = lateral + F.interpolate(last, size=lateral.shape[-2:], mode="nearest")
            results.insert(0, self.layer[i](last))
        results.append(F.max_pool2d(results[-1], 1, 2, 0))
        return {name: r for name, r in zip(["0", "1", "2", "3", "pool"], results, strict=True)}


def resnet_fpn(width=64, blocks=(3, 4, 6, 3), channels=256):
    return randomize_bn(ResNetFPN(width, blocks, channels))


# -- a Hugging-Face-style transformer encoder (BERT) -----------------------------------------


class BertLayer(nn.Module):
    def __init__(self, hidden, heads, intermediate):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.query, self.key = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
        self.value, self.output = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
        self.ln1, self.ln2 = nn.LayerNorm(hidden, eps=1e-12), nn.LayerNorm(hidden, eps=1e-12)
        self.intermediate = nn.Linear(hidden, intermediate)
        self.out = nn.Linear(intermediate, hidden)

    def _heads(self, x):
        n, s, _ = x.shape
        return x.view(n, s, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x, mask):
        q, k, v = self._heads(self.query(x)), self._heads(self.key(x)), self._heads(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim) + mask
        ctx = torch.matmul(scores.softmax(dim=-1), v).transpose(1, 2).contiguous()
        ctx = ctx.view(x.shape[0], x.shape[1], -1)
        x = self.ln1(x + self.output(ctx))
        return self.ln2(x + self.out(F.gelu(self.intermediate(x))))


class BertEncoder(nn.Module):
    """Embeddings (word, position, token type), encoder layers with an additive attention mask
    built from `attention_mask`, and a tanh pooler: returns (last hidden state, pooled)."""

    def __init__(self, vocab=30522, hidden=768, layers=12, heads=12, intermediate=3072,
                 max_positions=512):  # fmt: skip
        super().__init__()
        self.word = nn.Embedding(vocab, hidden)
        self.position = nn.Embedding(max_positions, hidden)
        self.token_type = nn.Embedding(2, hidden)
        self.ln = nn.LayerNorm(hidden, eps=1e-12)
        self.layers = nn.ModuleList(BertLayer(hidden, heads, intermediate) for _ in range(layers))
        self.pooler = nn.Linear(hidden, hidden)

    def forward(self, input_ids, attention_mask):
        positions = torch.arange(input_ids.shape[1]).unsqueeze(0)
        x = self.word(input_ids) + self.position(positions)
        x = self.ln(x + self.token_type(torch.zeros_like(input_ids)))
        mask = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        for layer in self.layers:
            x = layer(x, mask)
        return x, torch.tanh(self.pooler(x[:, 0]))


def bert_encoder(vocab=30522, hidden=768, layers=12, heads=12, intermediate=3072):
    return BertEncoder(vocab, hidden, layers, heads, intermediate)
