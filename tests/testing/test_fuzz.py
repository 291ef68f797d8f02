"""The fuzzer (tessera/testing/fuzz.py): a short run in the default suite, a bounded one under
`-m slow`; both must find no crash, hang, wrong answer or bare Python exception. And the
fuzzer's own classification: a child killed by a signal is a crash, one that never answers a
hang, a bare KeyError an internal error."""

import os
import signal

import numpy as np
import pytest

from tessera.testing import fuzz
from tessera.testing.fuzz_models import SEEDS, mutate_bytes, mutate_model


def _no_findings(counts):
    found = {k: n for k, n in counts.items() if k.split(":")[1] in fuzz.FINDINGS}
    assert found == {}, counts


def test_a_short_fuzz_run_finds_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path / "cache"))
    counts = fuzz.run(models=25, artifacts=25, seed=7, timeout=120, out=tmp_path / "findings")
    _no_findings(counts)
    assert sum(n for k, n in counts.items() if k.startswith("model:")) == 25
    assert sum(n for k, n in counts.items() if k.startswith("artifact:")) == 25


@pytest.mark.slow
def test_a_bounded_fuzz_run_finds_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path / "cache"))
    counts = fuzz.run(models=1500, artifacts=300, seed=11, timeout=120, out=tmp_path / "found")
    _no_findings(counts)


def test_the_classification_of_a_child():
    def crash(fd):
        os.kill(os.getpid(), signal.SIGSEGV)

    def hang(fd):
        signal.pause()

    def bare(fd):
        try:
            {}["x"]
        except KeyError as err:
            fuzz._send(fd, fuzz._verdict_of(err))

    def clean(fd):
        fuzz._send(fd, fuzz._verdict_of(ValueError("node 'a': bad")))

    assert fuzz._in_child(crash, (), 30)[0] == "crash"
    assert fuzz._in_child(hang, (), 1)[0] == "hang"
    assert fuzz._in_child(bare, (), 30)[0] == "internal"
    assert fuzz._in_child(clean, (), 30)[0] == "error"


def test_mutations_are_reproducible_and_change_something():
    model = SEEDS["conv_relu_pool"](np.random.default_rng(0))
    a, what_a = mutate_model(model, np.random.default_rng(3), edits=2)
    b, what_b = mutate_model(model, np.random.default_rng(3), edits=2)
    assert what_a == what_b and a.SerializeToString() == b.SerializeToString()
    data = bytes(range(256)) * 8
    damaged, what = mutate_bytes(data, np.random.default_rng(1))
    assert what and (damaged != data)


def test_a_negative_same_pad_crops_as_onnx_runtime_does():
    # SAME_UPPER with a stride past both the kernel and the input asks for a negative pad:
    # ONNX Runtime applies it (a crop), onnx.reference does not; tessera follows ORT (the fuzzer
    # once called this case disputed)
    import onnx
    from onnx import helper, numpy_helper

    w = numpy_helper.from_array(np.ones((2, 3, 3, 3), np.float32), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], auto_pad="SAME_UPPER", strides=[2, 8])
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 5, 7])
    y = helper.make_empty_tensor_value_info("y")
    graph = helper.make_graph([node], "g", [x], [y], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    verdict, info = fuzz._in_child(fuzz._model_case, (model.SerializeToString(), 0), 120)
    assert verdict == "correct", info


def test_where_onnx_runtime_differs_from_the_onnx_reference_the_case_is_disputed():
    messages = [{"tessera": "ran"}, {"ort": "disputed", "message": "ORT does not"}]
    verdict, info = fuzz._classify(messages, 0, False)
    assert verdict == "disputed" and info["message"] == "ORT does not"
