"""Every `tessera ...` command in the bash blocks of docs/cli.md runs and exits 0 (python blocks
are run by tests/test_docs.py). `model.onnx` is a small CNN with an input named `data`; the
commands run in order in one folder, so `model.so` and `prof.json` exist when later ones need
them. Commands on the built-in ResNet-50 (no model argument) are slow and run with -m slow."""

import os
import re
import shlex

import onnx
import pytest
from onnx import helper

from tessera.frontend.testing import make_model

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(ROOT, "docs", "cli.md")


def _commands():
    text = open(DOC).read()
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.splitlines():
            line = line.split("#")[0].strip()
            if line.startswith("tessera "):
                commands.append(shlex.split(line)[1:])
    return commands


def _uses_builtin(args):
    return args[0] in ("compile", "bench", "show") and not any(
        a.endswith((".onnx", ".so")) for a in args
    )


def _doc_model(path):
    import numpy as np

    rng = np.random.default_rng(0)
    w = (rng.standard_normal((4, 3, 3, 3)) * 0.2).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["data", "w"], ["c"], name="conv", strides=[4, 4]),
        helper.make_node("Relu", ["c"], ["y"], name="relu"),
    ]
    model = make_model(nodes, {"data": ((1, 3, 224, 224), "float32")}, ["y"], {"w": w})
    onnx.save(model, str(path))
    np.savez(path.parent / "in.npz", data=rng.standard_normal((1, 3, 224, 224)).astype("f4"))


COMMANDS = _commands()


def test_doc_has_commands():
    assert len(COMMANDS) >= 15


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("docs_cli")
    _doc_model(folder / "model.onnx")
    return folder


@pytest.mark.parametrize(
    "args",
    [pytest.param(a, marks=[pytest.mark.slow] if _uses_builtin(a) else []) for a in COMMANDS],
    ids=[" ".join(a) for a in COMMANDS],
)
def test_doc_command_runs(cli, workdir, args):
    if args[0] == "bench":
        args = [*args, "--duration", "0.3", "--warmup", "1"]
    result = cli(*args, cwd=workdir)
    assert result.returncode == 0, f"{' '.join(args)}\n{result.stdout}\n{result.stderr}"


def _shape_of_output(text: str) -> list[str]:
    """What a `tessera bench` output looks like, values aside: each table row's label, and the
    first words of every other line (the tables' borders dropped)."""
    shape = []
    for line in text.splitlines():
        cells = [c.strip() for c in re.split(r"[│┃]", line)]
        if len(cells) > 2:
            shape.append(f"row {cells[1]!r}")
        elif line.strip() and not set(line.strip()) <= set("┌┐└┘├┤┬┴┼─━┏┓┗┛┡┩╇┳┻ "):
            shape.append(" ".join(line.split()[:2]))
    return shape


def test_the_sample_output_is_what_bench_prints(cli, workdir):
    """docs/cli.md shows `tessera bench` on ResNet-50; the same command on the small model must
    print the same lines and table rows (the values differ)."""
    text = open(DOC).read()
    sample = re.search(r"```bash\ntessera bench\n```\n\n```text\n(.*?)```", text, re.S)
    assert sample, "docs/cli.md: no sample output after `tessera bench`"
    args = ["bench", "model.onnx", "--threads", "2", "--duration", "0.3", "--warmup", "2"]
    result = cli(*args, cwd=workdir)
    assert result.returncode == 0, result.stderr
    assert _shape_of_output(sample.group(1)) == _shape_of_output(result.stdout)
