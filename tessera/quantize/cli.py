"""`tessera compile --quantize int8 --calibrate data.npz`: the CLI's call of tessera.quantize."""

from __future__ import annotations

import logging

import click

log = logging.getLogger("tessera")


def quantize_for_cli(mod, params, scheme: str, calibrate, target, target_sqnr=None,
                     budget_mode: str = "float"):  # fmt: skip
    """(quantized mod, params) with the per-layer report logged; errors as click errors.
    target_sqnr: QConfig.target_sqnr_db (Note [layer sensitivity]); None: QConfig's default,
    0: none (every layer int8 that the other rules allow); budget_mode: QConfig.budget_mode
    (Note [16-bit activations])."""
    from tessera.quantize import QConfig, quantize
    from tessera.quantize.feeds import feeds_from_npz

    if scheme != "int8":
        raise click.UsageError(f"--quantize {scheme}: only int8 is supported")
    if calibrate is None:
        raise click.UsageError("--quantize int8 needs --calibrate data.npz (calibration feeds)")
    try:
        feeds = feeds_from_npz(calibrate, mod, params)
        config = QConfig(budget_mode=budget_mode)
        if target_sqnr is not None:
            config = QConfig(target_sqnr_db=target_sqnr or None, budget_mode=budget_mode)
        result = quantize(mod, params, feeds, config, target=target)
    except ValueError as e:
        raise click.UsageError(str(e)) from e
    log.info("%s", result)
    kept = sum(not r.quantized for r in result.report)
    line = (f"quantized {len(result.report) - kept} of {len(result.report)} layers to int8 "
            f"({kept} kept float), calibrated on {len(feeds)} samples")  # fmt: skip
    if any(r.quantized and r.level != "int8" for r in result.report):
        line += f"; levels: {result.levels()}"  # Note [precision levels] in sensitivity.py
    if result.measured_db is not None:
        line += (f"; output SQNR {result.measured_db:.1f} dB on held-out samples (target "
                 f"{config.target_sqnr_db:g})")  # fmt: skip
    click.echo(line, err=True)
    return result.mod, result.params
