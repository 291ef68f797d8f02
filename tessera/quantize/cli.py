"""`tessera compile --quantize int8 --calibrate data.npz`: the CLI's call of tessera.quantize."""

from __future__ import annotations

import logging

import click

log = logging.getLogger("tessera")


def quantize_for_cli(mod, params, scheme: str, calibrate, target):
    """(quantized mod, params) with the per-layer report logged; errors as click errors."""
    from tessera.quantize import QConfig, quantize
    from tessera.quantize.feeds import feeds_from_npz

    if scheme != "int8":
        raise click.UsageError(f"--quantize {scheme}: only int8 is supported")
    if calibrate is None:
        raise click.UsageError("--quantize int8 needs --calibrate data.npz (calibration feeds)")
    try:
        feeds = feeds_from_npz(calibrate, mod, params)
        result = quantize(mod, params, feeds, QConfig(), target=target)
    except ValueError as e:
        raise click.UsageError(str(e)) from e
    log.info("%s", result)
    kept = sum(not r.quantized for r in result.report)
    click.echo(f"quantized {len(result.report) - kept} of {len(result.report)} layers to int8 "
               f"({kept} kept float), calibrated on {len(feeds)} samples", err=True)  # fmt: skip
    return result.mod, result.params
