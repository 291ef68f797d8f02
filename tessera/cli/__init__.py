"""The `tessera` command: compile, run, bench, show, ops.

    tessera bench                          # the built-in example (ResNet-50) next to ONNX Runtime
    tessera compile model.onnx -o model.so
    tessera run model.so --profile
    tessera show model.onnx --html graph.html

Exit codes: 0 success, 2 usage error (click's), 1 a model, compile or input problem, reported in
one paragraph without a traceback (`-v` shows it). `main` is the console script's entry point;
`python -m tessera.cli` runs it too.
"""

from __future__ import annotations

import sys
import traceback

import click

from tessera.cli.options import VERBOSITY, verbosity_options


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="tessera", prog_name="tessera")
@verbosity_options
def cli():
    """tessera: a deep-learning compiler. From a model file to a fast, saved, verified artifact.

    With no MODEL, `compile` and `bench` use a built-in example: ResNet-50 (the onnx package's
    light model with reproducible random weights).
    """


def _register():
    from tessera.cli import bench, build, show, tune

    cli.add_command(build.compile_cmd, "compile")
    cli.add_command(build.run)
    cli.add_command(bench.bench)
    cli.add_command(show.show)
    cli.add_command(show.ops)
    cli.add_command(tune.tune)
    from tessera.cli.detect import detect

    cli.add_command(detect)


_register()


def _report(e: BaseException) -> int:
    """One paragraph on stderr; the traceback only when verbose. Returns the exit code."""
    if VERBOSITY["level"] > 0:
        traceback.print_exception(e)
    if isinstance(e, click.ClickException):
        e.show()
        return e.exit_code
    if isinstance(e, (ValueError, TypeError, NotImplementedError, OSError)):
        click.echo(f"error: {e}", err=True)
    else:
        click.echo(
            f"internal error: {type(e).__name__}: {e}\n"
            "This is a bug in tessera; run again with --verbose and report the traceback.",
            err=True,
        )
    return 1


def main(argv=None) -> None:
    """Run the command line `argv` (default: sys.argv[1:]) and exit with its code."""
    try:
        code = cli.main(args=argv, prog_name="tessera", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        code = 1
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        code = 130
    except Exception as e:  # every error ends here: a message and an exit code, never a crash
        code = _report(e)
    sys.exit(code if isinstance(code, int) else 0)


__all__ = ["cli", "main"]
