"""Blocked data layouts (TVM's spelling): parse them, map shapes and arrays, and the te compute of
`layout_transform`.

    Layout("NCHW16c")          # primal axes N, C, H, W; C split into C/16 blocks of 16 (sub-axis c)
    transform_shape((1, 64, 56, 56), "NCHW", "NCHW16c")      # (1, 4, 56, 56, 16)
    transform_array(w, "OIHW", "OIHW16i16o")                 # numpy, for weights packed at compile
    layout_transform(x, "NCHW", "NCHW16c")                   # te tensor, tag "injective"

An uppercase letter is a primal axis, `<n><lowercase>` its inner sub-axis of n elements (at most
one per primal axis, like TVM); the primal axis then counts blocks. Both layouts of a transform
name the same primal axes; a primal extent must be a multiple of every block it is split into.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from tessera import te
from tessera.topi.generic import inline_injective, schedule_elementwise_stage

_TOKEN = re.compile(r"(\d*)([A-Za-z])")


@dataclass(frozen=True)
class Layout:
    """A layout string parsed: `axes` in order, each (letter, block) with block None for primal."""

    name: str
    axes: tuple[tuple[str, int | None], ...]

    def __init__(self, name: str):
        if not isinstance(name, str) or not name:
            raise ValueError(f"a layout is a string like 'NCHW16c', got {name!r}")
        axes, pos = [], 0
        for m in _TOKEN.finditer(name):
            if m.start() != pos:
                break
            digits, letter = m.groups()
            if letter.isupper() and digits:
                raise ValueError(f"layout {name!r}: a primal axis ({letter}) takes no size")
            if letter.islower() and (not digits or int(digits) < 1):
                raise ValueError(
                    f"layout {name!r}: sub-axis {letter} needs a size, like 16{letter}"
                )
            axes.append((letter, int(digits) if digits else None))
            pos = m.end()
        if pos != len(name):
            raise ValueError(f"layout {name!r}: cannot read {name[pos:]!r}")
        letters = [a for a, _ in axes]
        if len(set(letters)) != len(letters):
            raise ValueError(f"layout {name!r}: an axis appears twice")
        for a, _ in axes:
            if a.islower() and a.upper() not in letters:
                raise ValueError(f"layout {name!r}: sub-axis {a} has no primal axis {a.upper()}")
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "axes", tuple(axes))

    def __str__(self) -> str:
        return self.name

    @property
    def primal(self) -> str:
        """The primal axes in their order here: "NCHW" for "NCHW16c"."""
        return "".join(a for a, _ in self.axes if a.isupper())

    def block(self, primal: str) -> int:
        """The sub-axis size of a primal axis (1 when it is not split)."""
        return next((b for a, b in self.axes if a == primal.lower()), 1)

    def index(self, letter: str) -> int:
        return next(k for k, (a, _) in enumerate(self.axes) if a == letter)


def _layouts(src, dst) -> tuple[Layout, Layout]:
    src = src if isinstance(src, Layout) else Layout(src)
    dst = dst if isinstance(dst, Layout) else Layout(dst)
    if sorted(src.primal) != sorted(dst.primal):
        raise ValueError(f"layout_transform: {src} and {dst} do not name the same primal axes")
    return src, dst


def primal_shape(shape, layout) -> dict[str, int]:
    """Extent of every primal axis of a tensor of `shape` in `layout`."""
    layout = layout if isinstance(layout, Layout) else Layout(layout)
    if len(shape) != len(layout.axes):
        raise ValueError(
            f"shape {tuple(shape)} has {len(shape)} dims, layout {layout} has {len(layout.axes)}"
        )
    out = {}
    for (a, b), d in zip(layout.axes, shape, strict=True):
        if a.isupper():
            out[a] = out.get(a, 1) * d
        elif d != b:
            raise ValueError(f"shape {tuple(shape)}: sub-axis {b}{a} of {layout} has extent {d}")
        else:
            out[a.upper()] = out.get(a.upper(), 1) * b
    return out


def transform_shape(shape, src, dst) -> tuple[int, ...]:
    """The shape of a `src`-layout tensor of `shape` once transformed to `dst`."""
    src, dst = _layouts(src, dst)
    primal = primal_shape(shape, src)
    out = []
    for a, b in dst.axes:
        if a.islower():
            out.append(b)
            continue
        block = dst.block(a)
        if block == 1:  # an unblocked axis (may be a symbolic dim: graph/dims.py)
            out.append(primal[a])
            continue
        if primal[a] % block:
            raise ValueError(
                f"layout {dst}: axis {a} of extent {primal[a]} is not a multiple "
                f"of its block {block}"
            )
        out.append(primal[a] // block)
    return tuple(out)


def _to_primal(array: np.ndarray, layout: Layout) -> np.ndarray:
    """`array` in the primal layout order of `layout` (sub-axes merged into their primal axis)."""
    order = []
    for a, _ in layout.axes:
        if a.isupper():
            order.append(layout.index(a))
            if layout.block(a) > 1 or a.lower() in dict(layout.axes):
                order.append(layout.index(a.lower()))
    merged = np.transpose(array, order)
    shape = [array.shape[layout.index(a)] * layout.block(a) for a in layout.primal]
    return merged.reshape(shape)


def transform_array(array, src, dst) -> np.ndarray:
    """numpy: `array` (in layout `src`) in layout `dst`, a new contiguous array."""
    src, dst = _layouts(src, dst)
    array = np.asarray(array)
    transform_shape(array.shape, src, dst)  # checks
    primal = _to_primal(array, src)
    # primal axes in dst's primal order, each split into (outer, block)
    perm = [src.primal.index(a) for a in dst.primal]
    primal = np.transpose(primal, perm)
    split_shape = []
    for a in dst.primal:
        b = dst.block(a)
        split_shape += [primal.shape[len(split_shape) // 2] // b, b]
    split = primal.reshape(split_shape)
    order = []
    for a, _ in dst.axes:
        k = dst.primal.index(a.upper())
        order.append(2 * k + (1 if a.islower() else 0))
    rest = [2 * k + 1 for k, a in enumerate(dst.primal) if a.lower() not in dict(dst.axes)]
    out = np.transpose(split, order + rest)  # the unsplit blocks have extent 1: dropped below
    return np.ascontiguousarray(out.reshape(transform_shape(array.shape, src, dst)))


def layout_transform(x: te.Tensor, src, dst) -> te.Tensor:
    """te: x (in layout `src`) in layout `dst`; an injective stage that inlines into consumers."""
    src, dst = _layouts(src, dst)
    shape = tuple(int(d.value) if hasattr(d, "value") else d for d in x.shape)  # symbolic N, H, W
    out_shape = transform_shape(shape, src, dst)

    def f(*idx):
        coord = {}
        for a in dst.primal:
            outer = idx[dst.index(a)]
            b = dst.block(a)
            coord[a] = outer * b + idx[dst.index(a.lower())] if b > 1 or _has_sub(dst, a) else outer
        src_idx = []
        for a, b in src.axes:
            if a.islower():
                src_idx.append(coord[a.upper()] % b)
            else:
                sb = src.block(a)
                src_idx.append(coord[a] // sb if sb > 1 else coord[a])
        return x(*src_idx)

    return te.compute(out_shape, f, name="layout_transform", tag="injective")


def _has_sub(layout: Layout, primal: str) -> bool:
    return any(a == primal.lower() for a, _ in layout.axes)


def blocked(layout: str, block: int) -> str:
    """'NCHW', 16 -> 'NCHW16c': the layout with its C axis split into blocks of `block`."""
    return f"{layout}{block}c"


def channel_shuffle_source(channel, groups: int, channels: int):
    """The input channel that output channel `channel` of a channel shuffle reads: the
    channels as (groups, channels / groups) transposed, c' = j * groups + i <- i * cpg + j."""
    return channel % groups * (channels // groups) + channel // groups


def channel_shuffle(x: te.Tensor, groups: int) -> te.Tensor:
    """te: ShuffleNet's channel shuffle of NCHW (4-d) or blocked NCHW[x]c (5-d) data, one
    injective stage: y[.., c', ..] = x[.., c' % groups * (C / groups) + c' // groups, ..]."""
    shape = tuple(int(d.value) for d in x.shape)
    block = shape[4] if len(shape) == 5 else 1
    channels = shape[1] * block

    def f(n, c, *rest):
        if block == 1:
            return x(n, channel_shuffle_source(c, groups, channels), *rest)
        *hw, k = rest
        src = channel_shuffle_source(c * block + k, groups, channels)
        return x(n, src // block, *hw, src % block)

    return te.compute(shape, f, name="channel_shuffle", tag="injective")


def schedule_channel_shuffle(outs, target=None) -> te.Schedule:
    """A group anchored on `channel_shuffle`: blocked outputs loop over (n, c block) in
    parallel, then the positions, a block's lanes innermost as one vector: the lanes' source
    offsets (a division and a remainder each) form one index vector per block, each position
    reads its lanes from it (a gather, or per-lane loads where the CPU's gathers are slow) and
    stores one vector. (Lanes outermost, a strided scalar copy per lane, took 1.45x as long:
    112 channels of 56 x 56 in blocks of 8, 0.255 against 0.175 ms, AMD EPYC, AVX2 code.)
    Plain outputs as any injective group."""
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    s = te.create_schedule([t.op for t in outs])
    inline_injective(s, outs)
    for t in outs:
        if len(t.shape) != 5:
            schedule_elementwise_stage(s, t, target)
            continue
        n, c, h, w, k = s[t].op.axis
        s[t].parallel(s[t].fuse(n, c))
        s[t].vectorize(k)
    return s
