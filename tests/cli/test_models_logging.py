"""The built-in example model (reproducible, finite outputs) and the logging contract: the
library prints nothing unless asked."""

import re
import subprocess
import sys

import numpy as np
import pytest

from tessera.models import example_model, light_model_names, random_inputs


def test_example_model_is_reproducible_and_finite():
    a, b = example_model(), example_model()
    wa = {t.name: t.raw_data for t in a.graph.initializer}
    wb = {t.name: t.raw_data for t in b.graph.initializer}
    assert wa == wb and len(wa) > 200
    assert not any(n.op_type == "ConstantOfShape" for n in a.graph.node)
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(a.SerializeToString(), providers=["CPUExecutionProvider"])
    y = session.run(None, random_inputs(a))[0]
    assert y.shape == (1, 1000) and np.isfinite(y).all()  # variances positive: no NaN
    assert y.std() > 0


def test_light_model_names():
    assert "resnet50" in light_model_names() and "squeezenet" in light_model_names()


def _run(code, env=None):
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )


def test_library_prints_nothing_unless_asked():
    code = "import tessera, logging; logging.getLogger('tessera.x').warning('hello')"
    quiet = _run(code, env={"PATH": "/usr/bin:/bin"})
    assert quiet.returncode == 0 and quiet.stdout == "" and quiet.stderr == ""
    loud = _run(code, env={"PATH": "/usr/bin:/bin", "TESSERA_LOG_LEVEL": "info"})
    assert "WARNING tessera.x: hello" in loud.stderr


def test_configure_levels():
    code = (
        "import io, tessera.logging as L; s = io.StringIO(); L.configure(-1, s);"
        "log = L.get_logger('cli'); log.warning('w'); log.error('e');"
        "L.configure(2, s); log.debug('d'); print(repr(s.getvalue()))"
    )
    out = _run(code).stdout
    assert "e\\n" in out and "w\\n" not in out and "DEBUG tessera.cli: d" in out


def test_show_builtin_example(cli):
    result = cli("show", "--kernels")
    assert result.returncode == 0, result.stderr
    assert "built-in example" in result.stdout and "resnet50" in result.stdout
    assert "BatchNormalization" in result.stdout
    rows = {line.split()[1]: line for line in result.stdout.splitlines() if line.startswith("│")}
    assert "nn.batch_norm 53" in rows["import"]
    # batch-norm folds into the conv weights (a bias add each): 17 adds + 53 = 70
    assert (
        "nn.batch_norm" not in rows["simplify_inference"] and "add 70" in rows["simplify_inference"]
    )
    kernels = int(re.search(r"fuse_ops\s+│\s+[\d.]+\s+│\s+(\d+)\s", rows["fuse_ops"]).group(1))
    assert kernels < 177 // 2  # conv + bias + relu (+ residual add) fuse into one kernel


@pytest.mark.slow
def test_builtin_example_compile_run_matches_onnxruntime(cli, tmp_path):
    import onnxruntime as ort

    so, out = tmp_path / "resnet50.so", tmp_path / "out.npz"
    assert cli("compile", "-o", so, "-q").returncode == 0
    model = example_model()
    feeds = random_inputs(model)
    np.savez(tmp_path / "in.npz", **feeds)
    assert cli("run", so, "--inputs", tmp_path / "in.npz", "--outputs", out, "-q").returncode == 0
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, feeds)[0]
    np.testing.assert_allclose(np.load(out)["gpu_0/softmax_1"], expected, rtol=1e-3, atol=1e-5)
