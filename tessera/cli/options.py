"""Options that several commands take: `-v/--verbose`, `-q/--quiet`, `--input-shape`, `--threads`,
`--target`, `--opt-level`.

`-v`/`-q` are accepted before and after the command name (`tessera -v compile m.onnx` and
`tessera compile m.onnx -v`); they set the level of tessera's loggers and whether an error shows
its traceback (`VERBOSITY`, read by `tessera.cli.main`).
"""

from __future__ import annotations

import click

# The verbosity of this process: -1 quiet, 0 default, 1 -v, 2 -vv.
VERBOSITY = {"level": 0}


def _set_verbose(ctx, param, value):
    if value:
        VERBOSITY["level"] = max(VERBOSITY["level"], 0) + value
        _configure()


def _set_quiet(ctx, param, value):
    if value:
        VERBOSITY["level"] = -1
        _configure()


def _configure():
    from tessera import logging as tlog

    tlog.configure(VERBOSITY["level"])


def verbosity_options(fn):
    fn = click.option(
        "-q",
        "--quiet",
        is_flag=True,
        expose_value=False,
        callback=_set_quiet,
        help="Print only results and errors.",
    )(fn)
    return click.option(
        "-v",
        "--verbose",
        count=True,
        expose_value=False,
        callback=_set_verbose,
        help="Log what the compiler does (-vv: debug); show tracebacks.",
    )(fn)


input_shape_option = click.option(
    "--input-shape",
    "input_shape",
    multiple=True,
    metavar="NAME:DIMS",
    help="Shape of an input with dynamic dims, e.g. data:1x3x224x224 (repeatable).",
)

threads_option = click.option(
    "--threads",
    type=click.IntRange(min=1),
    default=None,
    help="Threads for tessera (and ONNX Runtime when compared). Default: all cores.",
)

run_threads_option = click.option(
    "--threads",
    type=click.IntRange(min=1),
    default=None,
    help="Threads of tessera's runtime. Default: TESSERA_NUM_THREADS, else all cores.",
)


def opt_level_option(default: int):
    return click.option(
        "--opt-level",
        type=click.IntRange(0, 3),
        default=default,
        show_default=True,
        help="0: every op alone; 1: simplify and fold; 2: fuse ops; 3: also merge duplicates.",
    )


def quiet() -> bool:
    return VERBOSITY["level"] < 0


class TargetType(click.ParamType):
    """A target string ("llvm", "c", "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a76"),
    checked when the command line is read: a bad one is a usage error that says why."""

    name = "TARGET"

    def __init__(self, allow_micro: bool = False):
        self.allow_micro = allow_micro  # `compile --target micro`: C sources for a Cortex-M

    def convert(self, value, param, ctx):
        from tessera.target import Target

        if isinstance(value, Target) or (self.allow_micro and value == "micro"):
            return value
        try:
            return Target(value)
        except ValueError as err:
            self.fail(str(err), param, ctx)


def target_option(fn):
    help_text = 'What to compile for: "llvm", "c", or a full target string (docs/arm.md).'
    return click.option(
        "--target", type=TargetType(), default="llvm", show_default=True, help=help_text
    )(fn)
