"""The CLI's side of issue 14: every option has help text, `run --help` speaks of tessera only,
`show -q` prints no tables, an input name the model lacks is reported in the user's terms (the
option, not the frontend's `input_values`), and a damaged artifact is one clear error."""

import click

from tessera.cli import cli as tessera_cli


def test_every_option_has_help_text():
    missing = [
        f"{name} {'/'.join(p.opts)}"
        for name, cmd in tessera_cli.commands.items()
        for p in cmd.params
        if isinstance(p, click.Option) and not p.help
    ]
    assert missing == []


def test_run_help_does_not_mention_onnx_runtime(cli):
    result = cli("run", "--help")
    assert result.returncode == 0 and "--threads" in result.stdout
    assert "ONNX Runtime" not in result.stdout and "onnxruntime" not in result.stdout


def test_show_quiet_prints_one_line_and_no_table(cli, cnn_path, cnn_so):
    result = cli("show", cnn_path, "-q")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1 and "input(s)" in lines[0] and "kernel calls" in lines[0]
    assert not any(c in result.stdout for c in "┃│┏┌")
    result = cli("show", cnn_so, "-q")
    assert result.returncode == 0 and len(result.stdout.strip().splitlines()) == 1


def test_an_unknown_input_name_speaks_of_the_option(cli, cnn_path):
    result = cli("compile", cnn_path, "--input-shape", "nosuch:1x3x8x8")
    assert result.returncode == 1
    assert "--input-shape NAME:DIMS names 'nosuch', which is not an input" in result.stderr
    assert "input_values" not in result.stderr and "shape_dict" not in result.stderr


def test_a_damaged_artifact_is_one_clear_error(cli, cnn_so, tmp_path):
    so = tmp_path / "m.so"
    data = cnn_so.read_bytes()
    so.write_bytes(data[: len(data) // 2])
    result = cli("run", so)
    assert result.returncode == 1
    assert "cannot load" in result.stderr and "truncated" in result.stderr
    assert "Traceback" not in result.stderr


def test_compile_sign_and_run_key(cli, cnn_path, tmp_path):
    key, other = tmp_path / "key", tmp_path / "other"
    key.write_text("s3cret\n")
    other.write_text("guess\n")
    so = tmp_path / "signed.so"
    assert cli("compile", cnn_path, "-o", so, "--sign", key, "-q").returncode == 0
    assert cli("run", so, "--key", key, "-q").returncode == 0
    result = cli("run", so, "--key", other)
    assert result.returncode == 1 and "signature does not match the key" in result.stderr
