"""The strategies of microcontroller targets (key "micro"): qnn.conv2d as register tiles of int32
accumulators on a Cortex-M (compute and schedule in topi/micro/int8.py).

    conv = register_strategy("qnn.conv2d", "micro")
    implementations: "dot4" (channels per group a multiple of 4: packed words, SMLAD on DSP
                     cores) and "bytes" (any other channel count: one MLA per product)
    knobs:           ocb (output channels per tile), nw (output pixels per tile)

Note [micro tile rule]: the default tile is the one with the fewest instructions per product
whose live values fit the core's integer registers (`CORE_REGISTERS`: r0-r12 and lr of the
Arm M-profile; sp and pc are taken; 3 more hold the data, weight and output pointers). Per
reduction step a dot4 tile loads and widens (2 instructions) each of its ocb weight words and
nw data words, then runs 2 SMLADs per accumulator: cost (3 (ocb + nw) + 2 ocb nw) per 4 ocb nw
products, live ocb nw accumulators + 2 ocb widened weights + 2 widened data. A bytes tile loads
ocb weights and nw data bytes and runs ocb nw MLAs: cost (ocb + nw + ocb nw) per ocb nw
products, live ocb nw + ocb + 1. A depthwise conv (one output channel per group) keeps ocb = 1
so that its padded input is one channel's plane at a time. The rule is over the architecture's
register file, not measured constants; `tessera.build(..., configs=)` and the tuner may pick
any other tile of the space (measured on the board by tessera.micro.Session).
"""

from __future__ import annotations

from tessera.graph.op import get_op
from tessera.topi.micro import int8
from tessera.topi.strategy import ConfigSpace, Knob, Workload, register_strategy

CORE_REGISTERS = 14  # r0-r12 and lr: the M-profile's general registers other than sp and pc
POINTERS = 3  # data, weights and output addresses, live across the tile's reduction
OCB = (1, 2, 3, 4, 6, 8)
NW = (1, 2, 3, 4, 5, 6, 8)


def _cost(words: bool, ocb: int, nw: int) -> tuple[float, int]:
    """(instructions per product, live registers) of an ocb x nw tile (Note [micro tile rule])."""
    if words:
        return (3 * (ocb + nw) + 2 * ocb * nw) / (4 * ocb * nw), ocb * nw + 2 * ocb + 2
    return (ocb + nw + ocb * nw) / (ocb * nw), ocb * nw + ocb + 1


def _fits(words: bool, ocb: int, nw: int) -> bool:
    return _cost(words, ocb, nw)[1] + POINTERS <= CORE_REGISTERS


def default_tile(words: bool, oc: int, ow: int, per_group: int) -> dict:
    """{"ocb", "nw"}: Note [micro tile rule] over the candidates that fit the layer."""
    best = None
    for ocb in _ocb_candidates(oc, per_group):
        for nw in _nw_candidates(ow):
            if not _fits(words, ocb, nw):
                continue
            # ties: the tile with fewer idle accumulators at the row's end, then the larger
            waste = (-ow % nw) / ow + (-oc % ocb) / oc
            key = (_cost(words, ocb, nw)[0] + waste, -ocb * nw)
            if best is None or key < best[0]:
                best = (key, {"ocb": ocb, "nw": nw})
    return best[1] if best else {"ocb": 1, "nw": 1}


def _ocb_candidates(oc: int, per_group: int) -> tuple[int, ...]:
    if per_group == 1:  # depthwise: one channel's padded plane at a time
        return (1,)
    return tuple(c for c in OCB if c <= oc) or (1,)


def _nw_candidates(ow: int) -> tuple[int, ...]:
    return tuple(n for n in NW if n <= ow) or (1,)


def _geometry(wl: Workload) -> tuple[int, int, int, int]:
    """(input channels per group, output channels, output columns, output channels per group)."""
    groups = int(wl.attr("groups", 1))
    cin, oc = wl.shape(0)[1], wl.shape(1)[0]
    return cin // groups, oc, wl.output[3], oc // groups


def _space(words: bool):
    def space(wl: Workload, target) -> ConfigSpace | None:
        cg, oc, ow, opg = _geometry(wl)
        if int8.uses_words(cg) != words:
            return None

        def default(name):
            return lambda wl, target, context: default_tile(words, oc, ow, opg)[name]

        ocb = _ocb_candidates(oc, opg)
        nw = _nw_candidates(ow)
        return ConfigSpace(
            [Knob("ocb", ocb, default=default("ocb")), Knob("nw", nw, default=default("nw"))],
            [lambda v: _fits(words, v["ocb"], v["nw"])],
        )

    return space


def default_columns(cols: int) -> int:
    """A dense tile's columns (Note [micro tile rule]): live nb accumulators + 2 widened data +
    2 widened weights; cost (3 + 5 nb) per 4 nb products falls with nb: the largest that fits,
    then the one with fewer idle columns at the end."""
    fits = [nb for nb in _dense_candidates(cols) if nb + 4 + POINTERS <= CORE_REGISTERS]
    return min(fits, key=lambda nb: ((3 + 5 * nb) / (4 * nb) + (-cols % nb) / cols, -nb))


def _dense_candidates(cols: int) -> tuple[int, ...]:
    # divisors of the weight panel's 16 columns: a tile's weights sit side by side at each k
    return tuple(nb for nb in (1, 2, 4, 8) if nb <= cols) or (1,)


conv2d = register_strategy("qnn.conv2d", "micro")
conv2d.implementation("dot4")(_space(True))
conv2d.implementation("bytes")(_space(False))

_op = get_op("qnn.conv2d")
_op.rules["compute:micro"] = int8.qnn_conv2d_micro
_op.schedule("micro")(int8.schedule_qnn_conv2d_micro)


@register_strategy("qnn.dense", "micro").implementation("dot4")
def _(wl: Workload, target) -> ConfigSpace | None:
    cols = wl.output[-1]
    nb = Knob("nb", _dense_candidates(cols), default=lambda wl, t, c: default_columns(cols))
    return ConfigSpace([nb], [lambda v: v["nb"] + 4 + POINTERS <= CORE_REGISTERS])


get_op("qnn.dense").schedule("micro")(int8.schedule_qnn_dense_micro)


# -- qnn.requantize: float (ORT's arithmetic) or fixed point (Note [fixed-point requantize]) ----
# "fixed" is the default where the scale is a constant: a Cortex-M's epilogue in integers is
# several times shorter than in float32, and on cores without an FPU float is software.

requantize = register_strategy("qnn.requantize", "micro")


@requantize.implementation("float")
def _(wl: Workload, target) -> ConfigSpace | None:
    return ConfigSpace()


def _fixed_layout(wl: Workload, config, context, target, scale) -> dict | None:
    """What transform/fixed_point_requantize.py emits: qnn.requantize_fixed with the scale as
    (multiplier, shift) constants; None (keep the float op) when it has no exact form."""
    from tessera.topi.micro.requantize import fixed_point

    form = None if scale is None else fixed_point(scale)
    if form is None:
        return None
    return {"op": "qnn.requantize_fixed", "weight": form, "attrs": dict(wl.attrs)}


@requantize.implementation("fixed", priority=1, layout=_fixed_layout)
def _(wl: Workload, target) -> ConfigSpace | None:
    constant_scale = len(wl.constant) > 1 and wl.constant[1]
    return ConfigSpace() if constant_scale else None


from tessera.topi.micro import ops as _ops  # noqa: E402,F401  (registers qnn.requantize_fixed)
