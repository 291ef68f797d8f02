"""bench/model_zoo.py's builders: valid ONNX that ONNX Runtime runs, and that tessera's frontend
and graph interpreter agree with (small configs); the full configs have the published
architectures (layer counts, parameter counts of torchvision / Hugging Face). No timings."""

import numpy as np
import onnx
import pytest
from bench_modules import load_bench

from tessera.frontend import from_onnx
from tessera.frontend.testing import run_ort
from tessera.graph import run_function


def _load(name: str):
    return load_bench(name)


zoo = _load("model_zoo")


def _ops(model) -> dict[str, int]:
    counts: dict[str, int] = {}
    for n in model.graph.node:
        counts[n.op_type] = counts.get(n.op_type, 0) + 1
    return counts


def _image(model, seed=0):
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    return {"input": np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}


def _agree(model, feeds, rtol=1e-4):
    """ORT (no graph optimizations) vs tessera's interpreter, relative to the output's scale."""
    onnx.checker.check_model(model, full_check=True)
    expected = run_ort(model, feeds)
    mod, params = from_onnx(model)
    got = run_function(mod["main"], feeds, params)
    assert len(got) == len(expected) == 1
    g, e = got[0], expected[0]
    assert g.shape == e.shape and g.dtype == e.dtype == np.float32
    assert np.isfinite(e).all() and e.std() > 0.1  # random weights that neither vanish nor blow up
    np.testing.assert_allclose(g, e, rtol=0, atol=rtol * np.abs(e).max())
    return e


# -- MobileNetV2 -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "width, resolution, batch", [(0.25, 32, 1), (0.35, 33, 2), (0.5, 7, 1), (1.4, 17, 1)]
)
def test_mobilenet_v2_small_configs_agree_with_ort(width, resolution, batch):
    model = zoo.mobilenet_v2(width, resolution, num_classes=10, batch=batch)
    y = _agree(model, _image(model))
    assert y.shape == (batch, 10)


def test_mobilenet_v2_full_is_the_standard_architecture():
    model = zoo.mobilenet_v2()
    ops = _ops(model)
    # stem + 17 inverted residual blocks (the first without expansion) + the last 1x1 conv
    assert ops["Conv"] == 1 + 2 + 16 * 3 + 1 == 52
    assert ops["BatchNormalization"] == 52
    assert ops["Clip"] == 1 + 1 + 16 * 2 + 1  # ReLU6 after stem, expansions, depthwise, last
    assert ops["Add"] == 10  # residuals where stride 1 and channels unchanged
    assert ops["Gemm"] == 1 and ops["GlobalAveragePool"] == 1
    depthwise = [n for n in model.graph.node if n.op_type == "Conv" and _attr(n, "group") > 1]
    assert len(depthwise) == 17
    assert zoo.count_parameters(model) == 3_504_872  # torchvision.models.mobilenet_v2()
    dims = [[d.dim_value for d in v.type.tensor_type.shape.dim] for v in model.graph.input]
    assert dims == [[1, 3, 224, 224]]
    onnx.checker.check_model(model, full_check=True)


def _attr(node, name):
    return next(onnx.helper.get_attribute_value(a) for a in node.attribute if a.name == name)


def test_make_divisible_follows_torchvision():
    assert [zoo.make_divisible(c * 0.35) for c in (32, 16, 24, 96, 320)] == [16, 8, 8, 32, 112]
    assert zoo.make_divisible(1280 * 1.4) == 1792
    assert zoo.make_divisible(3.0) == 8


# -- BERT --------------------------------------------------------------------------------------

SMALL_BERT = dict(layers=2, hidden=32, heads=4, seq=8, vocab=50, max_position=16)


@pytest.mark.parametrize("batch, seq", [(1, 8), (2, 5)])
def test_bert_small_configs_agree_with_ort(batch, seq):
    model = zoo.bert_encoder(**{**SMALL_BERT, "seq": seq, "batch": batch})
    feeds = zoo.bert_inputs(model, seed=1)
    assert {k: v.dtype for k, v in feeds.items()} == dict.fromkeys(feeds, np.dtype(np.int64))
    assert feeds["attention_mask"][:, -1].sum() == 0  # some keys are masked
    y = _agree(model, feeds)
    assert y.shape == (batch, seq, 32)


def test_bert_mask_matters():
    """Changing a masked token changes nothing; changing an attended one changes the output."""
    model = zoo.bert_encoder(**SMALL_BERT)
    feeds = zoo.bert_inputs(model)
    base = run_ort(model, feeds)[0]
    masked = dict(feeds, input_ids=feeds["input_ids"].copy())
    masked["input_ids"][0, -1] = (masked["input_ids"][0, -1] + 1) % 50
    attended = dict(feeds, input_ids=feeds["input_ids"].copy())
    attended["input_ids"][0, 0] = (attended["input_ids"][0, 0] + 1) % 50
    # the masked position's own row changes; every other row keeps its value
    np.testing.assert_allclose(run_ort(model, masked)[0][0, :-1], base[0, :-1], atol=1e-5)
    assert np.abs(run_ort(model, attended)[0][0, 1:] - base[0, 1:]).max() > 1e-3


def test_bert_graph_is_written_the_way_pytorch_exports_it():
    model = zoo.bert_encoder(**{**SMALL_BERT, "layers": 3})
    ops = _ops(model)
    assert ops["Gather"] == 3 and ops["Erf"] == 3 and ops["Softmax"] == 3
    assert ops["LayerNormalization"] == 1 + 2 * 3
    assert ops["MatMul"] == 3 * (4 + 2 + 2)  # q, k, v, out; QK^T, PV; FFN in and out
    types = {v.name: v.type.tensor_type.elem_type for v in model.graph.input}
    assert types == dict.fromkeys(
        ["input_ids", "token_type_ids", "attention_mask"], onnx.TensorProto.INT64
    )
    assert [o.name for o in model.graph.output] == ["last_hidden_state"]


def test_bert_parameter_count_matches_bert_base():
    # Per layer and embeddings of BertModel (without pooler); vocab kept small to stay fast.
    h, i, vocab = 768, 3072, 100
    model = zoo.bert_encoder(layers=1, hidden=h, heads=12, seq=4, vocab=vocab)
    per_layer = 4 * (h * h + h) + 2 * h + (h * i + i) + (i * h + h) + 2 * h
    embeddings = (vocab + 512 + 2) * h + 2 * h
    assert zoo.count_parameters(model) == embeddings + per_layer
    # BERT-base: 12 such layers and a 30522-word vocabulary make Hugging Face's 108,891,648
    assert (30522 + 512 + 2) * h + 2 * h + 12 * per_layer == 108_891_648


def test_builders_are_reproducible_and_seeded():
    a, b = zoo.mobilenet_v2(0.25, 32, seed=3), zoo.mobilenet_v2(0.25, 32, seed=3)
    assert a.SerializeToString() == b.SerializeToString()
    assert a.SerializeToString() != zoo.mobilenet_v2(0.25, 32, seed=4).SerializeToString()
    c, d = zoo.bert_encoder(**SMALL_BERT, seed=5), zoo.bert_encoder(**SMALL_BERT, seed=5)
    assert c.SerializeToString() == d.SerializeToString()


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: zoo.mobilenet_v2(width=0), "width"),
        (lambda: zoo.mobilenet_v2(resolution=0), "resolution"),
        (lambda: zoo.bert_encoder(hidden=30, heads=4), "multiple of heads"),
        (lambda: zoo.bert_encoder(seq=600), "max_position"),
        (lambda: zoo.bert_encoder(layers=0), "layers"),
    ],
)
def test_bad_arguments_are_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# -- bench/models.py: the pieces that are not timings ------------------------------------------

bench_models = _load("models")


def test_model_flops_count_published_macs():
    # MobileNetV2 at 224: 300.77 M multiply-adds (as thop/fvcore count torchvision's model)
    assert bench_models.model_flops(zoo.mobilenet_v2()) == 2 * 300_774_272
    h, s, i = 32, 8, 128
    bert = zoo.bert_encoder(**{**SMALL_BERT, "layers": 1})
    macs = s * h * h * 4 + 2 * s * s * h + 2 * s * h * i  # q,k,v,out; QK^T, PV; FFN
    assert bench_models.model_flops(bert) == 2 * macs


def test_model_flops_sees_weights_listed_as_inputs():
    from tessera.models import light_model

    assert round(bench_models.model_flops(light_model("squeezenet")) / 1e9, 2) == 0.70


def test_relative_error():
    e = [np.array([1.0, -4.0], np.float32)]
    assert bench_models.relative_error([np.array([1.0, -3.0], np.float32)], e) == 0.25
    assert bench_models.relative_error([np.zeros(3, np.float32)], e) == np.inf


def test_failure_summary_names_the_exception_and_the_compiler_error():
    stderr = """Traceback (most recent call last):
  File "x.py", line 3, in <module>
RuntimeError: the C compiler failed (exit 1):
tessera_rt.c:12:5: error: 'x' undeclared
   12 |     x = 1;
      |     ^
"""
    summary = bench_models.failure_summary(stderr, 1)
    assert summary == (
        "RuntimeError: the C compiler failed (exit 1): / tessera_rt.c:12:5: error: 'x' undeclared"
    )
    assert bench_models.failure_summary("", -9) == "exit status -9"
    assert bench_models.failure_summary("killed\n", 1) == "killed"


def _tiny_case(name, op="Relu", domain=""):
    from onnx import TensorProto, helper

    def build():
        w = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)
        nodes = [
            helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
            helper.make_node(op, ["c"], ["y"], name="act", domain=domain),
        ]
        graph = helper.make_graph(
            nodes,
            name,
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
            [onnx.numpy_helper.from_array(w, "w")],
        )
        opsets = [helper.make_opsetid("", 17)] + [helper.make_opsetid(domain, 1)] * bool(domain)
        model = helper.make_model(graph, opset_imports=opsets)
        model.ir_version = 8
        return model

    return bench_models.Case(name, build)


def _args(**kw):
    base = dict(threads=1, repeat=2, warmup=1, max_seconds=5.0, compile_timeout=120.0)
    base.update(save_models=None, target="llvm")
    return type("Args", (), {**base, **kw})()


def test_run_case_measures_a_model_and_reports_a_failing_one(tmp_path, monkeypatch):
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path / "outer"))
    ok = bench_models.run_case(_tiny_case("tiny"), _args(), tmp_path)
    assert not ok.notes and ok.cold_s > 0 and len(ok.tessera_s) == len(ok.ort_s) == 2
    assert ok.rel_err < 1e-5 and ok.ratio > 0 and ok.gflop > 0
    if bench_models.cache_stats() is not None:  # a second fresh process timed on the warm cache
        assert ok.cached_s > 0 and set(ok.cache) >= {"hits", "misses"}
    # an op tessera does not convert: the error lands in the row, nothing is raised
    # (ORT's contrib Inverse: square 8x8 matrices here)
    bad = bench_models.run_case(_tiny_case("bad", "Inverse", "com.microsoft"), _args(), tmp_path)
    assert bad.ratio is None and "Inverse" in bad.notes[0]
    text = bench_models.report([ok, bad], _args(), {1: 10.0}, "bench/models.py --models tiny,bad")
    rows = [ln for ln in text.splitlines() if ln.startswith("| tiny") or ln.startswith("| bad")]
    assert len(rows) == 2 and "Inverse" in rows[1] and rows[1].count("—") >= 5
    assert "Geometric mean of tessera/ORT over 1 model(s)" in text
    assert "ResNet-50 tessera/ORT: not measured" in text


def test_command_line_rejects_unknown_models(capsys):
    with pytest.raises(SystemExit):
        bench_models.parse_args(["--models", "resnet50,alexnet9"])
    assert "alexnet9" in capsys.readouterr().err
    assert bench_models.parse_args(["--models", "bert_base"]).models == ["bert_base"]
    with pytest.raises(SystemExit):
        bench_models.parse_args(["--target", "llvm -mcpu=pentium9"])
    assert "--target" in capsys.readouterr().err


# -- compiled by tessera (slow: a few compiles) -------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
def test_small_configs_compiled_by_tessera_agree_with_ort(target):
    import tessera
    from tessera.runtime import GraphModule, cpu

    mobilenet = zoo.mobilenet_v2(0.35, 33, num_classes=10, batch=2)
    bert = zoo.bert_encoder(**{**SMALL_BERT, "hidden": 64, "seq": 12})
    for model, feeds in [(mobilenet, _image(mobilenet)), (bert, zoo.bert_inputs(bert))]:
        mod, params = from_onnx(model)
        module = GraphModule(tessera.build(mod, target=target, params=params)["default"](cpu(0)))
        module.set_input(**feeds)
        module.run()
        got, expected = module.get_output(0).numpy(), run_ort(model, feeds)[0]
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4 * np.abs(expected).max())
