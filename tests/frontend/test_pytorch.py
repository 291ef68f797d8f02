"""The PyTorch frontend op by op (small modules through tessera's interpreter against torch
eager), its errors (every unsupported op at once, with its source line), dynamic dims, tuple
and dict outputs, and params."""
# ruff: noqa: E501

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from tessera.frontend import UnsupportedOpError, from_pytorch  # noqa: E402
from tessera.frontend.pytorch_testing import check_module  # noqa: E402

G = torch.Generator().manual_seed(0)


def randn(*shape):
    return torch.randn(*shape, generator=G)


class Fn(nn.Module):
    """A module whose forward is `fn` (so each case below is one line)."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


class Cases(nn.Module):
    """Many cases in one module (one export instead of one per case, which is what takes the
    time): case k reads its own inputs; the outputs of all cases are returned in order."""

    def __init__(self, cases):
        super().__init__()
        self.fns, self.counts = [c[0] for c in cases], [len(c) - 1 for c in cases]
        self.layers = nn.ModuleList(f for f in self.fns if isinstance(f, nn.Module))

    def forward(self, *xs):
        outs, k = [], 0
        for fn, n in zip(self.fns, self.counts, strict=True):
            out = fn(*xs[k : k + n])
            outs.extend(out if isinstance(out, tuple) else (out,))
            k += n
        return tuple(outs)


def check_cases(cases: dict):
    """Check every case at once; a failure names its case."""
    names, inputs = [], []
    model = Cases(list(cases.values()))
    with torch.no_grad():
        for name, (fn, *xs) in cases.items():
            out = fn(*xs)
            names += [name] * (len(out) if isinstance(out, tuple) else 1)
            inputs += xs
    check_module(model, tuple(inputs), output_names=names)


X = randn(2, 3, 6, 7)
CASES = {
    "unary": (lambda x: torch.exp(x.tanh()) + x.abs().sqrt() - x.sigmoid() * x.erf(), X),
    "more_unary": (lambda x: (torch.asinh(x), torch.atanh(x.tanh() * 0.9), torch.acosh(x.abs() + 1),
                              torch.log2(x.abs() + 1), torch.log10(x.abs() + 1), torch.trunc(x * 3)), X),
    "bitwise": (lambda i, j: (i & j, i | 6, i ^ j, (i > 3) & (j < 5), (i > 3) ^ True), torch.arange(12).reshape(3, 4),
                torch.arange(12, 0, -1).reshape(3, 4)),
    "rsqrt_log": (lambda x: (x.abs() + 1).rsqrt() + (x.abs() + 1).log(), X),
    "activations": (lambda x: F.gelu(x) + F.silu(x) + F.hardswish(x) + F.leaky_relu(x, 0.2), X),
    "more_activations": (lambda x: F.elu(x) + F.relu6(x) + F.hardsigmoid(x) + F.mish(x), X),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh") + F.softplus(x), X),
    "scalars": (lambda x: 2.5 - x * 3 / 1.5 + x**2 - (x + 1) ** 0.5 * 0, X),
    "pow_tensor": (lambda x, y: torch.pow(x.abs() + 0.5, y), randn(3, 4), randn(3, 4)),
    "int_float": (lambda i, x: i * x + i // 2 + (i % 3), torch.arange(12).reshape(3, 4), randn(3, 4)),
    "compare": (lambda x, y: torch.where((x > y) & (x != 0.5) | (y <= -1), x, y * 2), randn(4, 5),
                randn(4, 5)),
    "clamp": (lambda x: x.clamp(-0.5, 0.7) + x.clamp(min=0.1) + torch.maximum(x, -x), X),
    "reductions": (lambda x: (x.sum(1), x.mean((2, 3), keepdim=True), x.amax(-1), x.amin(0),
                              x.var(dim=2), x.prod(-1)), X),
    "max_dim": (lambda x: (x.max(dim=1).values, x.max(dim=2).indices, x.argmax(), x.argmin(-1)), X),
    "any_all": (lambda x: ((x > 0).any(-1), (x > -3).all(1)), X),
    "softmax": (lambda x: (x.softmax(1), F.log_softmax(x, -1)), X),
    "cumsum": (lambda x: x.cumsum(2), X),
    "sort_topk": (lambda x: (x.sort(-1).values, x.sort(1, descending=True).values, x.topk(3).values,
                             x.topk(2, dim=2, largest=False).indices), X),
    "norms": (lambda x: (x.norm(dim=-1), F.normalize(x, dim=1), torch.linalg.vector_norm(x, 1, (2, 3)),
                         torch.linalg.vector_norm(x, float("inf"), 1)), X),
    "views": (lambda x: x.view(2, -1).t().unsqueeze(0).squeeze(0).flatten(), X),
    "permute": (lambda x: x.permute(0, 2, 3, 1).transpose(1, 2).contiguous().reshape(6, -1), X),
    "slice_select": (lambda x: (x[:, 1:, ::2, -3], x[1, :, 1:5:2, 0], x[..., -2:]), X),
    "split": (lambda x: tuple(p * (i + 1) for i, p in enumerate(x.split(2, dim=3))), X),
    "chunk_unbind": (lambda x: (*x.chunk(3, 1), *x.unbind(0)), X),
    "cat_stack": (lambda x: (torch.cat([x, x * 2], 1), torch.stack([x, -x], 2)), X),
    "expand_repeat": (lambda x: (x[:, :1].expand(2, 5, 6, 7), x.repeat(1, 2, 1, 1)), X),
    "index": (lambda x, i: (x[:, i], x.index_select(2, i), torch.gather(x, 3, i.expand(2, 3, 6, 3)
                                                                          .contiguous())),
              X, torch.tensor([2, 0, 1])),
    "flip_roll": (lambda x: (x.flip(1, 3), x.roll(2, 3), x.roll(-1)), X),
    "pad": (lambda x: (F.pad(x, (1, 2, 0, 3)), F.pad(x, (1, 1, 2, 0), mode="reflect"),
                       F.pad(x, (2, 1, 1, 0), mode="replicate"), F.pad(x, (-1, 1), value=2.0)), X),
    "creation": (lambda x: x + torch.ones_like(x) * torch.arange(7.0) + torch.full((7,), 2.0), X),
    "to_dtype": (lambda x: (x * 10).to(torch.int32).to(torch.float32) + x.double().float(), X),
    "scatter": (lambda x, i: (x.clone().index_fill_(1, torch.tensor([0, 2]), 0.5) * 1, torch.zeros(3, 5).scatter(1, i, 1.5),
                              torch.zeros(3, 5).scatter_add(1, i, torch.ones(3, 2)), x.clone().fill_(2.0) * 1),
                randn(3, 5), torch.tensor([[0, 4], [1, 1], [3, 2]])),
    "slice_assign": (lambda x: _assigned(x), randn(4, 6)),
    "matmuls": (lambda a, b: (a @ b, torch.bmm(a, b), a[0] @ b[0], torch.einsum("bij,bjk->bik", a, b)),
                randn(2, 3, 4), randn(2, 4, 5)),
    "batched_matmul": (lambda a, b: a @ b, randn(2, 3, 4, 5), randn(2, 3, 5, 2)),
    "sdpa": (lambda q, m: (F.scaled_dot_product_attention(q, q * 2, q + 1, attn_mask=m),
                           F.scaled_dot_product_attention(q, q, q, is_causal=True)),
             randn(2, 2, 5, 4), randn(2, 1, 5, 5)),
    "max_pool": (lambda x: (F.max_pool2d(x, 3, 2, 1), F.max_pool2d(x, 2, ceil_mode=True),
                            F.max_pool2d(x, 3, 1, 1, dilation=2)), X),
    "avg_pool": (lambda x: (F.avg_pool2d(x, 3, 2, 1), F.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
                            F.avg_pool2d(x, 2, ceil_mode=True)), X),
    "adaptive": (lambda x: (F.adaptive_avg_pool2d(x, (3, 7)), F.adaptive_avg_pool2d(x, (4, 5)),
                            F.adaptive_max_pool2d(x, 2)), X),
    "pool1d": (lambda x: (F.max_pool1d(x, 3, 2), F.avg_pool1d(x, 2), F.adaptive_avg_pool1d(x, 1)),
               randn(2, 3, 9)),
    "grid_sample": (lambda x, g: (F.grid_sample(x, g, align_corners=False), F.grid_sample(x, g, mode="nearest", padding_mode="border", align_corners=True),
                                  F.grid_sample(x, g, padding_mode="reflection")), X, randn(2, 4, 5, 2) * 0.8),
    "adaptive3d": (lambda x: (F.adaptive_avg_pool3d(x, 1), F.adaptive_avg_pool3d(x, (2, 3, 2))), randn(1, 2, 4, 6, 5)),
    "upsample": (lambda x: (F.interpolate(x, scale_factor=2, mode="nearest"),
                            F.interpolate(x, size=(9, 4), mode="nearest"),
                            F.interpolate(x, scale_factor=1.5, mode="bilinear"),
                            F.interpolate(x, size=(5, 11), mode="bilinear", align_corners=True)), X),
}  # fmt: skip


def _assigned(x):
    """In-place slice and select assignments: slice_scatter / select_scatter in Core ATen."""
    y = x.clone()
    y[:, 1:3] = 0.5
    y[2] = -1.0
    y[:, ::2] = y[:, ::2] * 2
    y[y > 1.5] = 1.5
    y[torch.tensor([3, 0])] += torch.ones(6)
    return y


GROUPS = {
    "math": ["unary", "more_unary", "bitwise", "rsqrt_log", "activations", "more_activations", "gelu_tanh", "scalars",
             "pow_tensor", "int_float", "compare", "clamp"],
    "reduce": ["reductions", "max_dim", "any_all", "softmax", "cumsum", "sort_topk", "norms"],
    "shape": ["views", "permute", "slice_select", "split", "chunk_unbind", "cat_stack",
              "expand_repeat", "index", "flip_roll", "pad", "creation", "to_dtype", "scatter", "slice_assign"],
    "nn": ["matmuls", "batched_matmul", "sdpa", "max_pool", "avg_pool", "adaptive", "pool1d", "upsample", "grid_sample", "adaptive3d"],
}  # fmt: skip


def test_every_case_is_in_a_group():
    assert sorted(sum(GROUPS.values(), [])) == sorted(CASES)


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_ops_match_torch(group):
    check_cases({name: CASES[name] for name in GROUPS[group]})


LAYERS = {
    "conv1d": (nn.Conv1d(3, 4, 3, stride=2, padding=1, dilation=1), randn(2, 3, 10)),
    "conv2d_groups": (nn.Conv2d(4, 6, 3, padding=2, dilation=2, groups=2), randn(1, 4, 7, 6)),
    "conv2d_same": (nn.Conv2d(3, 4, (3, 5), padding="same", bias=False), randn(1, 3, 7, 6)),
    "conv3d": (nn.Conv3d(2, 3, 3, padding=1), randn(1, 2, 4, 5, 5)),
    "conv_transpose2d": (nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=1),
                         randn(1, 4, 5, 6)),
    "group_norm": (nn.GroupNorm(2, 6), randn(2, 6, 4, 5)),
    "layer_norm_2d": (nn.LayerNorm((4, 5)), randn(2, 3, 4, 5)),
    "batch_norm_1d": (nn.BatchNorm1d(5), randn(4, 5)),
    "instance_norm": (nn.InstanceNorm2d(3, affine=True), randn(2, 3, 4, 5)),
    "embedding": (nn.Embedding(10, 4), torch.tensor([[1, 9, 0], [3, 3, 2]])),
    "linear_3d": (nn.Linear(5, 3), randn(2, 4, 5)),
    "prelu": (nn.PReLU(3), randn(2, 3, 4)),
    "mha": (nn.MultiheadAttention(8, 2, batch_first=True), randn(2, 5, 8)),
    "transformer_layer": (nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True),
                          randn(2, 5, 8)),
    "conv_transpose1d": (nn.ConvTranspose1d(3, 2, 4, stride=2), randn(1, 3, 6)),
    "pixel_unshuffle": (nn.PixelUnshuffle(2), randn(1, 2, 4, 4)),
    "pixel_shuffle": (nn.PixelShuffle(2), randn(1, 8, 3, 3)),
}  # fmt: skip


class SelfAttention(nn.Module):
    def __init__(self, attention):
        super().__init__()
        self.attention = attention

    def forward(self, x):
        return self.attention(x, x, x)[0]


def test_layers_match_torch():
    cases = {}
    for name, (layer, x) in LAYERS.items():
        with torch.no_grad():
            for p in layer.parameters():
                p.copy_(randn(*p.shape))
        cases[name] = (SelfAttention(layer) if name == "mha" else layer, x)
    check_cases(cases)


def test_params_are_named_by_module_path_and_inputs_by_forward():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(16, 2))
    mod, params = check_module(model, (randn(1, 3, 4, 4),))
    func = mod["main"]
    assert func.params[0].name == "input"
    # Small vectors (a bias reshaped to broadcast) fold into constants; weights stay params.
    for name in ("0.weight", "3.weight"):
        assert np.array_equal(params[name], model.state_dict()[name].numpy()), name
    assert "1.num_batches_tracked" not in params  # unused buffers do not become params
    # Linear's weight stays untransposed: x @ W.t() becomes nn.dense(x, W).
    assert [c.op.name for c in func.body if c.op.name in ("nn.dense", "matmul")] == ["nn.dense"]


def test_nested_and_dict_outputs_flatten_in_order():
    class M(nn.Module):
        def forward(self, x, y):
            return {"a": x + y, "b": (x * y, [x - y])}

    mod, _ = check_module(M(), (randn(3), randn(3)))
    assert len(mod["main"].outputs) == 3


def test_unsupported_ops_reported_at_once_with_source_lines():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(2, 2, 1)

        def forward(self, x):
            y = torch.erfinv(self.conv(x))
            z = torch.fft.rfft(y).abs()
            return y.sum() + z.sum() + torch.erfinv(x).sum()

    with pytest.raises(UnsupportedOpError) as info:
        from_pytorch(M(), (randn(1, 2, 4, 4),))
    message = str(info.value)
    assert "3 node(s) of 2 unsupported op type(s) (aten._fft_r2c.default, aten.erfinv.default)" in (
        message
    )
    assert "test_pytorch.py" in message and "y = torch.erfinv(self.conv(x))" in message
    assert "z = torch.fft.rfft(y).abs()" in message
    assert [op for _, op, _ in info.value.nodes].count("aten.erfinv.default") == 2


def test_dynamic_dims_are_fixed_with_a_warning():
    class M(nn.Module):
        def forward(self, x):
            return x.reshape(x.shape[0], -1).softmax(-1)

    batch = torch.export.Dim("batch")
    ep = torch.export.export(M(), (randn(3, 2, 4),), dynamic_shapes={"x": {0: batch}})
    with pytest.warns(UserWarning, match=r"static shapes.*x\[0\] \(s\d+\) to 5") as record:
        mod, _ = from_pytorch(ep, (randn(5, 2, 4),))
    assert any("dynamic" in str(w.message) for w in record)
    assert mod["main"].params[0].type.shape == (5, 2, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mod, _ = from_pytorch(ep)  # the program's own example inputs
    assert mod["main"].params[0].type.shape == (3, 2, 4)


def test_exported_program_is_accepted_and_matches():
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
    x = randn(2, 4)
    mod, params = from_pytorch(torch.export.export(model, (x,)), (x,))
    from tessera.graph import run_function

    got = run_function(mod["main"], {mod["main"].params[0].name: x.numpy()}, params)[0]
    np.testing.assert_allclose(got, model(x).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_bad_arguments_give_clear_errors():
    with pytest.raises(TypeError, match="nn.Module or a torch.export.ExportedProgram"):
        from_pytorch("model.pt", ())
    with pytest.raises(ValueError, match="needs example_inputs"):
        from_pytorch(nn.ReLU())
    with pytest.raises(ValueError, match="torch.export could not export"):
        from_pytorch(Fn(lambda x: x.sum() if x.sum() > 0 else x.mean()), (randn(3),))


def test_batch_norm_exported_in_training_mode_uses_batch_statistics():
    bn = nn.BatchNorm2d(3).train()
    x = randn(4, 3, 5, 5)
    ep = torch.export.export(bn, (x,))
    mod, params = from_pytorch(ep, (x,))
    from tessera.graph import run_function

    got = run_function(mod["main"], {mod["main"].params[0].name: x.numpy()}, params)[0]
    expected = nn.BatchNorm2d(3).train()(x).detach().numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
