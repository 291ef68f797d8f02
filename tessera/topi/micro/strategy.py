"""The strategies of microcontroller targets (key "micro"): qnn.conv2d as register tiles of int32
accumulators on a Cortex-M (compute and schedule in topi/micro/int8.py).

    conv = register_strategy("qnn.conv2d", "micro")
    implementations: "dot4" (channels per group a multiple of 4: packed words, SMLAD on DSP
                     cores) and "bytes" (any other channel count: one MLA per product);
                     on cores with MVE (the M55) "mve" first (topi/micro/mve.py: the weight
                     re-packed by transform/pack_qnn_weights.py, Note [MVE tile rule] below)
    knobs:           ocb (output channels per tile), nw (output pixels per tile)

Note [micro tile rule]: the default tile is the one with the fewest instructions per product
over the layer, counting per reduction step the loads, widenings and multiply-accumulates, and
two more (a store and a load) for each live value beyond the core's integer registers
(`CORE_REGISTERS`: r0-r12 and lr of the Arm M-profile, less `POINTERS` for the data, weight
and output addresses). A dot4 step loads and widens (2 instructions) each of its ocb weight
words and nw data words and runs 2 SMLADs per accumulator: 3 (ocb + nw) + 2 ocb nw
instructions for 4 ocb nw products, with ocb nw accumulators, the widened words of the smaller
side and one of the other live. A bytes step loads ocb weights and nw data bytes and runs
ocb nw MLAs. The layer's cost weighs full tiles and the smaller tiles at the ends of its rows
and channels. A depthwise conv (one output channel per group) keeps ocb = 1. The rule is over
the architecture's register file and instruction counts, not measured constants (for DS-CNN's
pointwise convs it picks 2 x 3, which took the fewest instructions on the board among the
tiles 1x5, 2x3, 2x5, 3x1, 4x1 and 4x5); `tessera.build(..., configs=)` and `tessera.micro.tune`
may pick any other tile of the space.
"""

from __future__ import annotations

from tessera.graph.op import get_op
from tessera.topi.micro import int8
from tessera.topi.strategy import ConfigSpace, Knob, Workload, register_strategy

CORE_REGISTERS = 14  # r0-r12 and lr: the M-profile's general registers other than sp and pc
POINTERS = 3  # data, weights and output addresses, live across the tile's reduction
OCB = (1, 2, 3, 4, 6, 8)
NW = (1, 2, 3, 4, 5, 6, 8)


SPILL = 2  # a live value that does not fit: one store and one load per reduction step


def _step(words: bool, ocb: int, nw: int) -> tuple[int, int]:
    """(instructions, products) of one reduction step of an ocb x nw tile."""
    if words:
        live = ocb * nw + 2 * min(ocb, nw) + 2
        instructions, products = 3 * (ocb + nw) + 2 * ocb * nw, 4 * ocb * nw
    else:
        live = ocb * nw + min(ocb, nw) + 1
        instructions, products = ocb + nw + ocb * nw, ocb * nw
    spills = max(0, live + POINTERS - CORE_REGISTERS)
    return instructions + SPILL * spills, products


def _parts(n: int, block: int) -> list[tuple[int, int]]:
    """(tile size, how many) covering n: full tiles and the one at the end."""
    full, rest = divmod(n, block)
    return [(block, full)] + ([(rest, 1)] if rest else [])


def tile_cost(words: bool, ocb: int, nw: int, oc: int, ow: int) -> float:
    """Instructions per product of the layer's tiles (Note [micro tile rule])."""
    instructions = products = 0
    for co, count_c in _parts(oc, ocb):
        for cw, count_w in _parts(ow, nw):
            i, p = _step(words, co, cw)
            instructions += i * count_c * count_w
            products += p * count_c * count_w
    return instructions / products


def default_tile(words: bool, oc: int, ow: int, per_group: int) -> dict:
    """{"ocb", "nw"}: Note [micro tile rule] (ties: the larger tile)."""
    scored = [
        (tile_cost(words, ocb, nw, oc, ow), -ocb * nw, ocb, nw)
        for ocb in _ocb_candidates(oc, per_group)
        for nw in _nw_candidates(ow)
    ]
    _, _, ocb, nw = min(scored)
    return {"ocb": ocb, "nw": nw}


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
            [Knob("ocb", ocb, default=default("ocb")), Knob("nw", nw, default=default("nw"))]
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
    return ConfigSpace([nb])


get_op("qnn.dense").schedule("micro")(int8.schedule_qnn_dense_micro)


# -- MVE (Helium) on the Cortex-M55: qnn.conv2d_mve and qnn.dense_mve (topi/micro/mve.py) --------
# Note [MVE tile rule]: one chunk of an ocb x nw tile loads ocb weight vectors and nw data
# vectors (VLDRB, 16 bytes each) and runs ocb * nw VMLADAVAs, 16 products each. VMLADAVA sums
# into a general register that must be even-numbered (r0, r2, ... r14: `EVEN_REGISTERS`), less
# lr (the count of the low-overhead loop, DLS/LE) and two that the loop's addresses take
# (`MVE_ACCUMULATORS`); each accumulator beyond them costs a store and a load (SPILL) per
# chunk. The vectors of the smaller side stay in MVE's 8 Q registers while the other side's
# stream through one more; beyond that, the other side is loaded again per use. As for the
# scalar tiles, the layer's cost weighs full and end tiles, and the larger tile wins ties.

EVEN_REGISTERS = 8  # r0, r2, ..., r12, r14: VMLADAVA's accumulator is an even register
MVE_ACCUMULATORS = EVEN_REGISTERS - 3  # less lr (the loop count) and two addresses
Q_REGISTERS = 8  # MVE's q0-q7


def _mve_step(ocb: int, nw: int) -> tuple[int, int]:
    """(instructions, products) of one 16-byte chunk of an ocb x nw tile."""
    spills = max(0, ocb * nw - MVE_ACCUMULATORS)
    reloads = max(0, min(ocb, nw) + 1 - Q_REGISTERS) * max(ocb, nw)
    return ocb + nw + ocb * nw + SPILL * spills + reloads, 16 * ocb * nw


def mve_tile_cost(ocb: int, nw: int, oc: int, ow: int) -> float:
    instructions = products = 0
    for co, count_c in _parts(oc, ocb):
        for cw, count_w in _parts(ow, nw):
            i, p = _mve_step(co, cw)
            instructions += i * count_c * count_w
            products += p * count_c * count_w
    return instructions / products


def default_mve_tile(oc: int, ow: int, depthwise: bool) -> dict:
    """{"ocb", "nw"}: Note [MVE tile rule] (ties: the larger tile)."""
    scored = [
        (mve_tile_cost(ocb, nw, oc, ow), -ocb * nw, ocb, nw)
        for ocb in _ocb_candidates(oc, 1 if depthwise else 2)
        for nw in _nw_candidates(ow)
    ]
    _, _, ocb, nw = min(scored)
    return {"ocb": ocb, "nw": nw}


MVE_COLUMNS = (1, 2, 3, 4, 5, 6, 7, 8)


def default_mve_columns(cols: int) -> int:
    """A dense tile's columns (Note [MVE tile rule]): per chunk one data vector, nb weight
    vectors and nb VMLADAVAs, nb accumulators in even registers; the cheapest per product
    over the layer's full and end tiles, ties to the larger."""
    return min(
        (c for c in MVE_COLUMNS if c <= max(cols, 1)),
        key=lambda nb: (_mve_columns_cost(nb, cols), -nb),
    )


def _mve_columns_cost(nb: int, cols: int) -> float:
    instructions = products = 0
    for c, count in _parts(cols, nb):
        spills = max(0, c - MVE_ACCUMULATORS)
        instructions += (1 + 2 * c + SPILL * spills) * count
        products += 16 * c * count
    return instructions / products


def _has_mve(target) -> bool:
    return "mve" in getattr(target, "features", ())


def _static_workload(wl: Workload) -> bool:
    return all(isinstance(d, int) for s, _ in wl.inputs for d in s)


@conv2d.implementation("mve", priority=1, layout=lambda *a: _mve_conv_layout(*a))
def _(wl: Workload, target) -> ConfigSpace | None:
    """Cores with MVE (the M55), a constant weight: qnn.conv2d_mve (Note [MVE layouts])."""
    if not _has_mve(target) or not _static_workload(wl) or not wl.constant[1:2] == (True,):
        return None
    cg, oc, ow, opg = _geometry(wl)
    depthwise = opg == 1 and cg == 1
    default = default_mve_tile(oc, ow, depthwise)
    return ConfigSpace(
        [
            Knob("ocb", _ocb_candidates(oc, 1 if depthwise else 2),
                 default=lambda wl, t, c: default["ocb"]),  # fmt: skip
            Knob("nw", _nw_candidates(ow), default=lambda wl, t, c: default["nw"]),
        ]
    )


def _mve_conv_layout(wl: Workload, config, context, target, w4) -> dict | None:
    from tessera.topi import qnn as topi_qnn
    from tessera.topi.micro import mve

    if w4 is None:
        return None
    groups = int(wl.attr("groups", 1))
    cg = wl.shape(0)[1] // groups
    dilation = wl.attr("dilation")
    w = topi_qnn.unpack_conv_weight(w4, cg)
    wm, comp = mve.pack_conv(w, groups, int(dilation[1]))
    attrs = {k: wl.attr(k) for k in ("strides", "padding", "dilation")}
    attrs.update(groups=groups, pad_value=int(wl.attr("pad_value", 0)),
                 kernel=[int(w.shape[2]), int(w.shape[3])], config=config.as_attr())  # fmt: skip
    return {"op": "qnn.conv2d_mve", "weight": wm, "constants": (comp,), "attrs": attrs}


@register_strategy("qnn.dense", "micro").implementation(
    "mve", priority=1, layout=lambda *a: _mve_dense_layout(*a)
)
def _(wl: Workload, target) -> ConfigSpace | None:
    if not _has_mve(target) or not _static_workload(wl) or not wl.constant[1:2] == (True,):
        return None
    cols = wl.output[-1]
    nb = Knob("nb", tuple(c for c in MVE_COLUMNS if c <= cols) or (1,),
              default=lambda wl, t, c: default_mve_columns(cols))  # fmt: skip
    return ConfigSpace([nb])


def _mve_dense_layout(wl: Workload, config, context, target, wp) -> dict | None:
    from tessera.topi import qnn as topi_qnn
    from tessera.topi.micro import mve

    if wp is None:
        return None
    units = int(wl.attr("units"))
    wm, comp = mve.pack_dense(topi_qnn.unpack_dense_weight(wp, units, wl.shape(0)[-1]))
    attrs = {"units": units, "config": config.as_attr()}
    return {"op": "qnn.dense_mve", "weight": wm, "constants": (comp,), "attrs": attrs}


# qnn.sum_pool2d (int8 average pools): "mve" on cores with MVE for windows whose rows are
# contiguous (Note [MVE pool] in topi/micro/mve.py), else the generic window loops
pool = register_strategy("qnn.sum_pool2d", "micro")


@pool.implementation("generic")
def _(wl: Workload, target) -> ConfigSpace | None:
    return ConfigSpace()


@pool.implementation("mve", priority=1)
def _(wl: Workload, target) -> ConfigSpace | None:
    dilation = wl.attr("dilation", (1, 1))
    if not _has_mve(target) or not _static_workload(wl) or int(dilation[1]) != 1:
        return None
    return ConfigSpace()


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
