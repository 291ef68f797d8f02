"""x86 schedule of layer_norm over the last axis: the row schedule of softmax.py.

    y = topi.nn.layer_norm(x, gamma, beta)       # (rows..., n), normalized over n
    s = schedule_layer_norm([y], target)
    # parallel (row) {
    #   moments_partial[0:16] += (d, d*d), d = x[row, 16k + l] - x[row, 0]   (float64 vectors)
    #   moments = the 16 lanes and the tail;  stats = (mean of d, 1 / std)        (one row)
    #   y[row, 0:n] = (x[row] - x[row, 0] - mean) * rstd * gamma + beta          (vectorized)
    # }

The sums are float64, shifted by the row's first element (robust when the mean is large
against the spread, topi/nn/norm.py); the normalize pass runs in x's dtype at the full vector
width. layer_norm over several trailing axes gets the generic row schedule.
"""

from __future__ import annotations

from tessera import te
from tessera.topi.x86.softmax import schedule_rows


def schedule_layer_norm(outs, target=None, config=None) -> te.Schedule:
    """A group anchored by layer_norm: its rows in parallel, each row's stages inside
    (`config`: the x86 row strategy's, as for softmax)."""
    return schedule_rows(outs, target, config)
