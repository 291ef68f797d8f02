"""Which kernel taps of a conv read its input, and the rewrites that drop the others.

    call = trim_dead_taps(call)          # Note [dead taps]: taps that only ever read padding
    axes = live_tap_regions(call)        # Note [live-tap regions]: where a split pays, else None

alter_layout (transform/alter_layout.py) asks both before it blocks a conv; the split itself
(one conv per region, concatenated back) is its `live_tap_regions` method, since it emits the
blocked ops.
"""

from __future__ import annotations

import numpy as np

from tessera.graph.ir import Call, Constant
from tessera.transform.pass_context import PassContext

# Note [dead taps]
# A kernel tap that reads only padding for every output (a dilated conv on a map smaller than
# its dilation: DeepLabV3's ASPP, dilations 12/24/36 on a 28x28 map) adds zeros: the conv
# without it, its padding cut by the taps dropped before, is the same conv. Only leading and
# trailing taps can be dead (the taps of an axis read increasing positions), and they are
# dropped only where the padding that remains is >= 0 and gives the same output size.


def _live_range(i, k, stride, dilation, pad_before, size) -> tuple[int, int] | None:
    """[first, last] taps that output i of one spatial axis reads in bounds, or None (the
    position i * stride + t * dilation - pad_before is increasing in t, so they are a range)."""
    live = [t for t in range(k) if 0 <= i * stride + t * dilation - pad_before < size]
    return (live[0], live[-1]) if live else None


def _alive_taps(size, out, k, stride, dilation, pad_before) -> tuple[int, int]:
    """[first, last] taps of one spatial axis that read some input position."""
    ranges = [r for i in range(out) if (r := _live_range(i, k, stride, dilation, pad_before, size))]
    if not ranges:
        return 0, k - 1
    return min(r[0] for r in ranges), max(r[1] for r in ranges)


def trim_dead_taps(call: Call) -> Call:
    """`call` (nn.conv2d, constant weight) without the taps that read only padding."""
    (x, w), (y,) = call.inputs, call.outputs
    a = call.attrs
    pads, dilation, kernel = list(a["padding"]), list(a["dilation"]), list(w.type.shape[2:])
    cut = []
    for axis in range(2):
        size, out = x.type.shape[2 + axis], y.type.shape[2 + axis]
        s, d, k, pb = a["strides"][axis], dilation[axis], kernel[axis], pads[axis]
        if not isinstance(size, int):  # a symbolic size: which taps read it is not known
            cut.append(slice(0, k))
            continue
        first, last = _alive_taps(size, out, k, s, d, pb)
        before = pb - first * d
        after = max(0, (out - 1) * s + (last - first) * d + 1 - size - before)
        span = size + before + after - (last - first) * d - 1
        if (first, last) == (0, k - 1) or before < 0 or span // s + 1 != out:
            cut.append(slice(0, k))
            continue
        cut.append(slice(first, last + 1))
        pads[axis], pads[2 + axis], kernel[axis] = before, after, last - first + 1
        dilation[axis] = d if last > first else 1
    if cut == [slice(0, k) for k in w.type.shape[2:]]:
        return call
    weight = np.ascontiguousarray(w.array[:, :, cut[0], cut[1]])
    attrs = dict(a, padding=pads, dilation=dilation)
    return Call(call.op, (x, Constant.of(w.name, weight)), attrs, call.outputs, call.span)


# Note [live-tap regions]
# A dilated conv on a map not much larger than its dilation (DeepLabV3's ASPP: dilations 12 and
# 24 on a 28x28 map) reads padding with many taps at many outputs, yet no tap is dead
# everywhere (Note [dead taps]): at dilation 24 the top tap is live only for the bottom 4 rows.
# Along one axis, the taps output i reads in bounds form a range [t0(i), t1(i)] (the position
# i * stride + t * dilation - pad is increasing in t), so the outputs fall into intervals of
# equal ranges, and the conv into one region per pair of a row and a column interval: the conv
# of the region's input window (a slice) with only its live taps, with no padding at all. The
# regions are concatenated back along W, then H. The conv's MACs shrink to the live ones
# (dilation 24 on 28x28: 18%; 12: 51%), at the cost of a copy of each window and of the output,
# smaller convs and more kernels; so the split is made only for dilated convs (an undilated
# conv loses taps only at its border outputs: on a small map, e.g. a 3x3 conv over 3x3, that
# is a large share of tiny convs, and the split cost PP-OCR's classifier 45%), and only where it
# removes at least LIVE_TAPS_MIN_SAVING of the MACs (PassContext option
# "alter_layout.live_tap_saving"; 1 disables it). The small dilations of a backbone (2 or 4 on
# 28x28: 9% and 18%) stay one conv.

LIVE_TAPS_MIN_SAVING = 1 / 3


def _live_intervals(size, out, k, stride, dilation, pad_before) -> list[tuple[int, int, int, int]]:
    """(first output, end output, first live tap, last live tap) of the runs of outputs along one
    axis that read in bounds with the same taps; [] when some output reads no input at all."""
    runs: list[tuple[int, int, int, int]] = []
    for i in range(out):
        live = _live_range(i, k, stride, dilation, pad_before, size)
        if live is None:
            return []
        if runs and runs[-1][1] == i and runs[-1][2:] == live:
            runs[-1] = (runs[-1][0], i + 1, *live)
        else:
            runs.append((i, i + 1, *live))
    return runs


def live_tap_regions(call: Call) -> list[list[tuple[int, int, int, int]]] | None:
    """The row and column intervals of Note [live-tap regions] when splitting `call` there pays,
    else None."""
    (x, w), (y,) = call.inputs, call.outputs
    a = call.attrs
    if not all(isinstance(d, int) for d in (*x.type.shape[2:], *y.type.shape[2:])):
        return None  # symbolic sizes: which taps are live depends on the size
    if all(d == 1 for d in a["dilation"]):
        return None  # undilated: only the border outputs lose taps (a small map's whole conv)
    saving = PassContext.current().config.get("alter_layout.live_tap_saving", LIVE_TAPS_MIN_SAVING)
    axes = []
    for axis in range(2):
        runs = _live_intervals(
            x.type.shape[2 + axis], y.type.shape[2 + axis], w.type.shape[2 + axis],
            a["strides"][axis], a["dilation"][axis], a["padding"][axis],
        )  # fmt: skip
        if not runs:
            return None
        axes.append(runs)
    if len(axes[0]) * len(axes[1]) == 1:
        return None
    live = [sum((e - b) * (t1 - t0 + 1) for b, e, t0, t1 in runs) for runs in axes]
    full = [y.type.shape[2 + i] * w.type.shape[2 + i] for i in range(2)]
    if live[0] * live[1] > (1 - saving) * full[0] * full[1]:
        return None
    return axes
