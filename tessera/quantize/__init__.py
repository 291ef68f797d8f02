"""Post-training quantization (in the spirit of TVM's relay.quantize): a float graph module and a
few calibration feeds in, an int8 graph module and a per-layer report out.

    config = tessera.quantize.QConfig(calibrate="entropy", activation_dtype="uint8")
    result = tessera.quantize.quantize(mod, params, calibration=feeds, config=config)
    print(result.report)                    # per layer: ranges, SQNR (dB), quantized or kept
    lib = tessera.build(result.mod, target="llvm")

Steps: bind the weights and simplify (batch-norms folded into the weights), equalize the
channels of the activations (`equalize.py`: the same float function), choose each weight row's
scale (Note [weight scales]) and round the rows by GPTQ (`gptq.py`), calibrate the data input
of each layer (`calibrate.py`; by default each tensor's range method chosen on held-out feeds:
Note [range per tensor]), correct each layer's mean output error (Note [bias correction]), measure
each layer's own signal-to-quantization-noise on the first held-out feed (the first feed when
none is held out; its float output against its
int8 one, both from the same float input), keep float the layers below `keep_float_below_db`,
and rewrite the rest (`rewrite.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from tessera.graph.ir import Constant
from tessera.graph.op import get_op
from tessera.ir.module import IRModule
from tessera.quantize import calibrate, equalize, gptq, sensitivity
from tessera.quantize.rewrite import Layer, find_layers, rewrite
from tessera.topi import qnn as topi_qnn

__all__ = ["QConfig", "QuantizeResult", "quantize", "sqnr_db"]


@dataclass(frozen=True)
class QConfig:
    # "minmax" | "percentile" | "entropy" (KL) | "mse" | "auto": per tensor, the one of
    # `candidates` with the least output error on held-out feeds (Note [range per tensor])
    calibrate: str = "auto"
    percentile: float = 99.99
    activation_dtype: str = "uint8"  # or "int8" (symmetric), or "auto" (per tensor, as above)
    candidates: tuple[str, ...] = ("minmax", "percentile", "mse", "entropy")
    # what "auto" minimizes: "layer", the reading layers' own output error; "output", the
    # model output's error through the sensitivity probe (Note [range by the output])
    choose_by: str = "layer"
    holdout: int | None = None  # feeds held out to choose by (None: a quarter, 1 to 8)
    ops: tuple[str, ...] = ("nn.conv2d", "nn.dense", "matmul")
    skip: tuple[str, ...] = ()  # source node names (or output value names) to keep float
    # mixed precision: layer roles kept float (Note [mixed precision]): "depthwise",
    # "grouped", "pointwise", "conv", "dense"; "last": the last quantizable layer
    keep_float_roles: tuple[str, ...] = ()
    keep_float_below_db: float = 20.0  # a layer whose own SQNR is lower stays float
    max_samples: int | None = None  # calibration feeds used (None: all)
    share: bool = True  # other readers of a quantized value read its int8 copy (rewrite.py)
    keep_float_inputs: bool = True  # layers reading a model input stay float: Note [input layers]
    bias_correction: bool = True  # Note [bias correction]
    correction_samples: int | None = None  # feeds that measure it (None: the rule below)
    equalize: bool = True  # even out activation channels first: Note [activation equalization]
    equalize_floor: float = 1 / 64  # the smallest channel scale equalization applies
    equalize_power: float = 0.5  # s = (channel range / widest) ** power
    equalize_rectified: bool = False  # also classes with a ReLU / clip: Note [sparse channels]
    equalize_rectified_floor: float = 1 / 4  # their smallest scale (Note [sparse channels])
    weight_search: bool = True  # per-row weight scales by weighted error: Note [weight scales]
    weight_rounding: str = "gptq"  # or "nearest": Note [GPTQ rounding] (gptq.py)
    gptq_damp: float = 0.01  # added to the Hessian's diagonal, times its mean
    gptq_order: str = "natural"  # or "act": Note [GPTQ column order] (gptq.py)
    hessian_samples: int | None = None  # feeds whose layer inputs make the Hessians (None: all)
    # Note [layer sensitivity] (sensitivity.py): each layer's cost to the model's output SQNR
    # when it alone is int8, measured (and reported) when `sensitivity` or a target is set;
    # target_sqnr_db keeps float the costliest layers until the predicted output SQNR meets it
    # (None: no budget); Note [default budget]
    sensitivity: bool = False
    target_sqnr_db: float | None = None
    sensitivity_samples: int | None = None  # feeds that measure it (None: correction_feeds)
    target_rounds: int = 3  # builds that check the target on those feeds, aiming higher if short
    # Note [16-bit activations]: layers (source node or output value names) whose activation is
    # a 16-bit code, computed on the int8 kernels in two passes; budget_mode="a16": the budget
    # (target_sqnr_db) first gives the costliest layers 16-bit activations, keeping float only
    # where that is not enough, and the layers that keep_float_inputs / keep_float_below_db
    # would keep float get them too; "float": the budget keeps the costliest layers float
    activation_bits16: tuple[str, ...] = ()
    # layers whose int8 weight is split into two int8 weights (Note [16-bit weights by
    # splitting] in rewrite.py): "w16" (8-bit activation: two passes), or with
    # activation_bits16 too "a16w16" (three); budget_mode="a16" chooses among int8, a16, w16
    # and a16w16 by the noise each move removes per added pass (Note [precision levels] in
    # sensitivity.py)
    weight_bits16: tuple[str, ...] = ()
    budget_mode: str = "float"
    a16_headroom: float = 2.0  # a 16-bit range: the calibration's [min, max] times this


@dataclass
class LayerReport:
    name: str
    kind: str
    scale: float
    zero_point: int
    sqnr_db: float
    quantized: bool
    method: str = ""  # the range method and dtype of the layer's input (calibrate="auto")
    # the model's output SQNR with this layer alone int8 (Note [layer sensitivity]); nan: not
    # measured
    output_db: float = math.nan
    a16: bool = False  # its activation is 16-bit, two int8 passes (Note [16-bit activations])
    output16_db: float = math.nan  # the model's output SQNR with this layer alone a16
    w16: bool = False  # its weight is split (Note [16-bit weights by splitting]): two passes
    output_w16_db: float = math.nan  # ... with this layer alone w16 (8-bit activation)
    output_a16w16_db: float = math.nan  # ... with this layer alone a16w16 (three passes)

    @property
    def level(self) -> str:
        """Its precision level (Note [precision levels] in sensitivity.py)."""
        return sensitivity.LEVELS[sensitivity.level_of(self.a16, self.w16)]


@dataclass
class QuantizeResult:
    mod: IRModule
    params: dict
    report: list[LayerReport] = field(default_factory=list)
    config: QConfig = field(default_factory=QConfig)
    equalized: int = 0  # channel classes rescaled (Note [activation equalization])
    # the output SQNR predicted for the layers left int8 (Note [layer sensitivity]); None: not
    # measured
    predicted_db: float | None = None
    # with target_sqnr_db: the int8 module's output SQNR measured on the feeds that measured
    # the sensitivity (Note [layer sensitivity])
    measured_db: float | None = None

    def levels(self) -> str:
        """The layers at each level and float, and the int8 kernel passes in all against one
        per layer (Note [precision levels] in sensitivity.py), e.g. "5 int8 / 10 a16 / 0 w16 /
        35 a16w16 / 0 float, 165 passes (3.30x)"."""
        on = [r.level for r in self.report if r.quantized]
        order = ("int8", "a16", "w16", "a16w16")
        counts = " / ".join(f"{on.count(v)} {v}" for v in order)
        passes = sum(sensitivity.PASSES[sensitivity.LEVELS.index(v)] for v in on)
        n = max(len(self.report), 1)
        return (f"{counts} / {len(self.report) - len(on)} float, {passes} passes "
                f"({passes / n:.2f}x)")  # fmt: skip

    def __str__(self) -> str:
        rows = [f"tessera.quantize ({self.config.calibrate}, {self.config.activation_dtype} "
                f"activations, int8 per-channel weights): {len(self.report)} layers, "
                f"equalized {self.equalized} channel classes"]  # fmt: skip
        if self.predicted_db is not None:
            rows[0] += f", output SQNR predicted {self.predicted_db:.1f} dB"
        if self.measured_db is not None:
            rows[0] += f", measured {self.measured_db:.1f} dB"
        rows.append(f"  {'layer':<40} {'op':<7} {'range':<13} {'scale':>10} {'zp':>4} "
                    f"{'SQNR dB':>8} {'out dB':>7} {'out16':>6} {'w16':>6} {'a16w16':>6}"
                    "  int8")  # fmt: skip
        for r in self.report:
            mark = r.level if r.a16 or r.w16 else "yes"
            mark = mark if r.quantized else "kept float"
            name = r.name if len(r.name) <= 40 else "..." + r.name[-37:]
            rows.append(f"  {name:<40} {r.kind:<7} {r.method:<13} {r.scale:>10.4g} "
                        f"{r.zero_point:>4} {r.sqnr_db:>8.1f} {r.output_db:>7.1f} "
                        f"{r.output16_db:>6.1f} {r.output_w16_db:>6.1f} "
                        f"{r.output_a16w16_db:>6.1f}  {mark}")  # fmt: skip
        return "\n".join(rows)


def sqnr_db(reference: np.ndarray, approx: np.ndarray) -> float:
    """10 log10(sum ref^2 / sum (ref - approx)^2); inf when they are equal."""
    ref = np.asarray(reference, np.float64)
    noise = float(np.sum((ref - np.asarray(approx, np.float64)) ** 2))
    signal = float(np.sum(ref**2))
    return math.inf if noise == 0 else 10 * math.log10(max(signal, 1e-30) / noise)


def _prepare(mod, params):
    from tessera.transform import (
        bind_params,
        eliminate_dead_code,
        fold_constant,
        infer_types,
        simplify_inference,
    )

    mod = bind_params(mod, params or {})
    for p in (infer_types, simplify_inference, fold_constant, eliminate_dead_code, infer_types):
        mod = p(mod)
    return mod


def _integer_product(layer: Layer, wq: np.ndarray, xq: np.ndarray, pad_value: int):
    """The layer's product of uint8/int8 data xq and int8 weight wq (the qnn ops' numpy
    references), int64."""
    if layer.kind == "conv2d":
        attrs = {**dict(layer.call.attrs.items()), "pad_value": pad_value}
        acc = get_op("qnn.conv2d").evaluate([xq, topi_qnn.pack_conv_weight(wq)], attrs)[0]
    else:
        acc = get_op("qnn.dense").evaluate([xq, topi_qnn.pack_dense_weight(wq)],
                                           {"units": wq.shape[0]})[0]  # fmt: skip
    return acc.astype(np.int64)


def _layer_int8_output(layer: Layer, x: np.ndarray, act, split: bool = False) -> np.ndarray:
    """The dequantized int8 result of one layer from its float input (numpy references); with
    a uint16 act, from the two passes over the bytes of the 16-bit code (Note [16-bit
    activations by splitting] in topi/qnn.py), combined exactly in int64; with `split`, the
    sum over the two int8 weights of Note [16-bit weights by splitting] (rewrite.py)."""
    sx, zx, dtype = act
    if dtype == "uint16":
        code = get_op("qnn.quantize_byte")
        data = [(256**byte, code.evaluate([x], dict(scale=sx, zero_point=zx, byte=byte))[0],
                 (zx >> (8 * byte)) & 255) for byte in (1, 0)]  # fmt: skip
    else:
        zx_u = zx + (128 if dtype == "int8" else 0)
        xq = get_op("qnn.quantize").evaluate([x], dict(scale=sx, zero_point=zx, dtype=dtype))[0]
        data = [(1, xq, zx_u)]
    shape = (-1, 1, 1) if layer.kind == "conv2d" else (-1,)
    out = 0
    for part, (wq, sw) in enumerate(layer.weight_parts(split)):
        sums = wq.astype(np.int64).reshape(wq.shape[0], -1).sum(axis=1).reshape(shape)
        # the residual weight's product with the low byte is left out (Note [16-bit weights
        # by splitting] in rewrite.py)
        terms = data[:1] if part else data
        acc = sum(m * (_integer_product(layer, wq, xq, pad) - pad * sums)
                  for m, xq, pad in terms)  # fmt: skip
        scale = (np.float32(sx) * sw).reshape(shape)
        out = out + acc.astype(np.float32) * scale.astype(np.float32)
    return out


# Note [input layers]
# A layer that reads a model input directly (a CNN's stem) quantizes the raw input: an image
# normalized per colour channel lies on a grid per channel that one uint8 scale for the tensor
# does not match, and the rounding it adds is amplified by every layer after it. On a trained
# EfficientNet-Lite0 and real photographs, keeping only the stem float raised int8 top-1
# agreement with fp32 from 84% to 92% (bench/int8_accuracy.py). Such a layer has few input
# channels (3 for an image: a word of 4 holds 3), so int8 gains least there.

# Note [bias correction]
# Rounding the weights to int8 (and clipping the data to its range) shifts the mean of a
# layer's output: sum_k (w - w_q)[o, k] * E[x_k] is no noise that averages out but an offset per
# output channel, the same on every input, and deep networks add these offsets up layer after
# layer (MobileNetV2's 53 layers, each ~40 dB on its own, gave 20 dB at the output). As in
# Nagel et al.'s empirical bias correction, each quantized layer's mean error over the
# calibration feeds (its float output minus its int8 output from the same float input, averaged
# over everything but the output channel) is added back; it is folded into the integer
# zero-point compensation, so it costs nothing at run time.


def _second_moments(layer: Layer, xs) -> np.ndarray:
    """E[x^2] per input channel of layer's data over the arrays xs (Note [weight scales])."""
    axis = 1 if layer.kind == "conv2d" else -1
    rows = [np.moveaxis(np.asarray(x, np.float64), axis, -1) for x in xs]
    return np.mean([np.mean(r.reshape(-1, r.shape[-1]) ** 2, axis=0) for r in rows], axis=0)


def correction_feeds(count: int) -> int:
    """How many calibration feeds measure the corrections by default: a mean per channel over
    all positions settles in a few feeds, and each feed runs every layer in numpy."""
    return max(1, min(count, 4))


def _mean_error(layer: Layer, pairs, act, split: bool = False) -> np.ndarray:
    """The mean over feeds and all axes but the channel of float output - int8 output."""
    axis = 1 if layer.kind == "conv2d" else -1
    total, n = 0.0, 0
    for x, y in pairs:
        err = np.asarray(y, np.float64) - _layer_int8_output(layer, x, act, split)
        err = np.moveaxis(err, axis, -1).reshape(-1, err.shape[axis])
        total, n = total + err.sum(axis=0), n + err.shape[0]
    return (total / max(n, 1)).astype(np.float32)


# ops that move or pad data without computing on it: a layer behind them still reads the input
_MOVES = ("pad", "reshape", "transpose", "layout_transform", "squeeze", "expand_dims", "flatten")


def _read_from_inputs(func) -> set[int]:
    """ids of the model inputs and of the values made from one by data movement alone (the
    explicit Pad of an exported "same"-padded stem)."""
    out = {id(p) for p in func.params}
    for call in func.body:
        data = [v for v in call.inputs if not isinstance(v, Constant)]
        if call.op.name in _MOVES and len(data) == 1 and id(data[0]) in out:
            out.update(id(v) for v in call.outputs)
    return out


def _equalized(func, feeds, config: QConfig, target):
    """(func after cross-layer equalization of its activations, the number of channel classes
    rescaled) with the per-channel ranges of the values it would quantize from the calibration
    feeds (equalize.py)."""
    classes = [c for c in equalize.channel_classes(func)
               if config.equalize_rectified or not c.rectified]  # fmt: skip
    values = list({id(v): v for c in classes for v in c.quantized(func)}.values())
    if not values:
        return func, 0
    probe = calibrate.compile_probe(func, values, target)
    ranges = dict(zip(map(id, values), calibrate.channel_absmax(probe, feeds), strict=True))
    return equalize.equalize(func, classes, ranges, config.equalize_floor, config.equalize_power,
                             config.equalize_rectified,
                             config.equalize_rectified_floor)  # fmt: skip


# Note [range per tensor]
# No one range method is best for every tensor: min-max keeps a few large values that matter in
# one place and wastes the grid on an outlier in another, percentile / mse / entropy clip by
# rules that assume the tail does not matter. With calibrate="auto", the feeds are split: the
# first ones fill the statistics (min, max, histogram), the last `holdout` ones are held out,
# and each quantized tensor gets the candidate range (each method of `candidates`, and with
# activation_dtype="auto" both uint8 asymmetric and int8 symmetric for a tensor with negative
# values) whose readers' output error on the held-out feeds is least. The error is the
# layer's float output minus its output from the quantized input and the int8 weights, less
# its mean per output channel (bias correction removes that part), summed over the layers that
# read the tensor, relative to their output's energy. The evaluation data of a benchmark never
# enters the choice.


# Note [mixed precision]
# The bar is for int8 everywhere, but a deployment may trade some speed for accuracy by keeping
# the layers that lose most in float: `skip` names them one by one, `keep_float_below_db` by
# their own SQNR, `keep_float_roles` by what they are (depthwise convs, the 1x1 convs, the
# last layer: a classifier), and `target_sqnr_db` by what each costs the model's output, as
# few as meet an output SQNR (Note [layer sensitivity] in sensitivity.py). Their inputs are
# not quantized and they run the float kernels; the report marks them "kept float".
# docs/quantization.md has what each costs and gains on EfficientNet-Lite0.


# Note [default budget]
# Eight-bit activations hold ~40 dB of SQNR per tensor, and a network of ~50 layers adds their
# noise up at its output: 24.7 dB on EfficientNet-Lite0's logits, 21.1 dB on the suite's
# MobileNetV2, int8 throughout. An error near the input costs most, carried through every
# layer after it: EfficientNet-Lite0's first depthwise conv is 39.7 dB on its own and costs the
# logits 31.1 dB alone, its input the stem's ReLU6 output on [0, 6], where per-channel scales
# gain nothing (25 of its 32 channels reach 6). Equalizing the ReLU / ReLU6 outputs too
# (equalize_rectified) lost 10-11 dB on views outside the calibration set, with a floor of 1/4
# for quiet channels too (Note [sparse channels]); bias correction, GPTQ rounding and the
# range per tensor are on already. A budget (target_sqnr_db) keeps float the few layers that
# cost the output most until the output SQNR predicted on held-out calibration feeds, then
# measured on the built int8 model, reaches the target. It stays opt-in (None by default): a
# default of 30 dB kept 13 of 50 layers float on EfficientNet-Lite0 and 24 of 53 on the suite's
# MobileNetV2, but 56 of the 72 matmuls of the suite's BERT-base (26.3 dB int8 throughout,
# 30.8 dB with it), which would cost BERT its int8 speed. docs/quantization.md has the
# measurements.


def _mark16(report, alt, own) -> None:
    """The range and own SQNR of each row of `report` above int8 are those of its level (Note
    [precision levels] in sensitivity.py), of the others their 8-bit ones (alt: {position:
    {level: (act, correction)}}; own: {position: (layer, its float input, output, the row's
    8-bit (scale, zero point, method, SQNR))})."""
    for j, r in enumerate(report):
        if j not in own:
            continue
        level = sensitivity.level_of(r.a16, r.w16)
        (layer, x, y, eight) = own[j]
        name = sensitivity.LEVELS[level]
        if not level:
            r.scale, r.zero_point, r.method, r.sqnr_db = eight
        elif r.method != name:
            act, fix = alt[j][level]
            r.sqnr_db = sqnr_db(y, y + _int8_error(layer, x, y, act, fix,
                                                   sensitivity.SPLIT[level]))  # fmt: skip
            r.scale, r.zero_point = act[0], act[1]
            r.method = name


def _named(layer: Layer, names) -> bool:
    """Whether `names` holds layer's name, its output value's name or a source node's name."""
    return bool(layer.name in names or layer.call.outputs[0].name in names
                or set(layer.call.span) & set(names))  # fmt: skip


# Note [16-bit activations]
# Eight-bit activation grids are what limits int8 accuracy on deep networks (Note [default
# budget]); keeping the costliest layers float gives up their int8 kernels. A layer can instead
# read a 16-bit code of its input and run on the same int8 kernels twice, over the high and the
# low byte (Note [16-bit activations by splitting] in topi/qnn.py): the grid is 256 times finer
# (48 dB less noise from the activation; the int8 weights' rounding stays), at twice the
# layer's integer work. Its range is the calibration's [min, max] (0 included) widened by
# `a16_headroom` (2: 6 dB of the 16-bit grid's ~96 dB) so that a value past the calibration's
# range is not clipped: clipping, not rounding, is then what a 16-bit grid would lose. Such a
# layer ("a16") is named by `activation_bits16`; where the int8 weights limit a layer, its
# weight can be split too ("a16w16", three passes: Note [16-bit weights by splitting] in
# rewrite.py; `weight_bits16`). Or the budget chooses, with budget_mode="a16": the sensitivity
# probe (Note [layer sensitivity]) measures each layer's output noise alone as int8, a16,
# w16 and a16w16 (the report's `out dB`, `out16`, `w16` and `a16w16` columns), and
# choose_levels (sensitivity.py) raises one layer at a time, the move that removes the most
# predicted noise per added int8 pass (Note [precision levels]), until the prediction meets
# target_sqnr_db; only if every candidate is at the top and it is still short are layers kept
# float. In that mode the layers that
# keep_float_inputs or keep_float_below_db would keep float are a16 instead (a model input's
# per-channel normalized grid, Note [input layers], is what a 16-bit grid resolves), so every
# layer runs on the int8 kernels. A 16-bit code's other readers (a residual add) read the float
# value, not a dequantized copy; its bias correction is measured with the 16-bit grid and added
# in float after the high pass.


def _holdout(config: QConfig, count: int) -> int:
    if count < 2:
        return 0
    return max(1, min(count - 1, config.holdout or min(8, count // 4)))


def _candidates(config: QConfig, obs) -> list[tuple[str, str]]:
    methods = config.candidates if config.calibrate == "auto" else (config.calibrate,)
    if config.activation_dtype != "auto":
        dtypes = (config.activation_dtype,)
    else:  # symmetric only helps a tensor with negative values
        dtypes = ("uint8", "int8") if obs.min < 0 else ("uint8",)
    return [(m, d) for m in methods for d in dtypes]


def _choice_error(layer: Layer, xs, refs, act) -> float:
    """Output error of layer from input quantized by act and its int8 weights, its mean per
    channel removed, relative to the output's energy, over (x, y) pairs (Note [range per
    tensor]) on inputs xs, whose float outputs are refs (gptq.layer_output: float arithmetic,
    the same products as the int8 kernel's)."""
    sx, zx, dtype = act
    wq, sw = layer.quantized_weight()
    w = wq.astype(np.float32) * sw.reshape((-1,) + (1,) * (wq.ndim - 1))
    q = get_op("qnn.quantize")
    noise = signal = 0.0
    for x, ref in zip(xs, refs, strict=True):
        xq = q.evaluate([x], dict(scale=sx, zero_point=zx, dtype=dtype))[0]
        xd = (xq.astype(np.float32) - np.float32(zx)) * np.float32(sx)
        err = ref - gptq.layer_output(layer.kind, dict(layer.call.attrs.items()), xd, w)
        err = err - err.mean(axis=0)
        noise += float(np.sum(err.astype(np.float64) ** 2))
        signal += float(np.sum(np.asarray(ref, np.float64) ** 2))
    return noise / max(signal, 1e-30)


def _options(obs, config: QConfig) -> dict:
    """{(scale, zero point, dtype): label} of a tensor's candidate ranges, distinct ones only."""
    options = {}
    for method, dtype in _candidates(config, obs):
        lo, hi = calibrate.choose_range(obs, method, config.percentile, dtype)
        act = (*calibrate.activation_params(lo, hi, dtype), dtype)
        options.setdefault(act, f"{method}/{'u8' if dtype == 'uint8' else 's8'}")
    return options


def _choose_act(obs, readers: list[Layer], held, config: QConfig, by_output=None):
    """(scale, zero point, dtype) and its label for one tensor: the candidate with the least
    error on the held-out inputs `held` (Note [range per tensor]), or with `by_output` (an
    _OutputScorer) the least error of the model's output (Note [range by the output]); the
    only one when there is one candidate."""
    options = _options(obs, config)
    if len(options) == 1 or not held:
        act, label = next(iter(options.items()))
        return act, label
    if by_output is not None:
        scores = {act: by_output.score(readers, held, act) for act in options}
        best = min(scores, key=scores.get)
        return best, options[best]
    attrs = [dict(layer.call.attrs.items()) for layer in readers]
    refs = [[gptq.layer_output(layer.kind, a, x, layer.weight) for x in held]
            for layer, a in zip(readers, attrs, strict=True)]  # fmt: skip
    scores = {act: sum(_choice_error(layer, held, r, act)
                       for layer, r in zip(readers, refs, strict=True))
              for act in options}  # fmt: skip
    best = min(scores, key=scores.get)
    return best, options[best]


# Note [range by the output]
# Note [range per tensor] scores a tensor's candidate ranges by its readers' own output error,
# which weighs every element of every reader alike; the model's output does not: an error in an
# early layer passes through every layer after it, a clipped large value may matter where many
# small roundings average out. choose_by="output" scores each candidate by the model output's
# error instead, through the probe of Note [layer sensitivity] (the float function with an
# additive input after each layer): on each of the first held-out feeds (as many as measure the
# sensitivity), the inputs after the tensor's readers get their error with the tensor quantized
# by the candidate and the int8 weights (its mean per channel removed: bias correction takes
# that part), the shared copy (Note [shared quantized values]) its quantize-dequantize error,
# and the candidate with the least output error energy is kept. One more compile of the float
# model, and a run per tensor, candidate and feed.


class _OutputScorer:
    """Scores a tensor's candidate ranges by the model output's error (Note [range by the
    output])."""

    def __init__(self, func, layers, feeds, config: QConfig, target):
        shared, _ = _shared_values(func, layers, range(len(layers)), config.share)
        self.probe = sensitivity.NoiseProbe(func, layers, shared, target)
        self.feeds = feeds
        self.refs = self.probe.outputs(feeds)
        self.position = {id(layer): j for j, layer in enumerate(layers)}
        self.shared = {id(v): len(layers) + k for k, v in enumerate(shared)}

    def score(self, readers: list[Layer], held, act) -> float:
        """The output error energy over the feeds with the readers' input quantized by act
        (held: their input on each held-out feed, in the order of the feeds)."""
        sx, zx, dtype = act
        q = get_op("qnn.quantize")
        total = 0.0
        for feed, ref, x in zip(self.feeds, self.refs, held, strict=False):
            xq = q.evaluate([x], dict(scale=sx, zero_point=zx, dtype=dtype))[0]
            xd = (xq.astype(np.float32) - np.float32(zx)) * np.float32(sx)
            deltas = {self.position[id(layer)]: _error_of(layer, x, xd) for layer in readers}
            k = self.shared.get(id(readers[0].data))
            if k is not None:
                deltas[k] = xd - x
            total += self.probe.joint_noise(feed, ref, deltas)
        return total


def _error_of(layer: Layer, x: np.ndarray, xd: np.ndarray) -> np.ndarray:
    """layer's output from xd and its int8 weights minus its float output from x, the mean per
    output channel removed, in the output's shape."""
    wq, sw = layer.quantized_weight()
    w = wq.astype(np.float32) * sw.reshape((-1,) + (1,) * (wq.ndim - 1))
    attrs = dict(layer.call.attrs.items())
    err = (gptq.layer_output(layer.kind, attrs, xd, w)
           - gptq.layer_output(layer.kind, attrs, x, layer.weight))  # fmt: skip
    err = err - err.mean(axis=0)
    shape = tuple(layer.call.outputs[0].type.shape)
    if layer.kind == "conv2d":
        n, o, oh, ow = shape
        return err.reshape(n, oh, ow, o).transpose(0, 3, 1, 2)
    return err.reshape(shape)


def _hessians(probe, layers, where, feeds) -> list[np.ndarray]:
    """E[x x^T] of each layer's weight rows' inputs over the feeds (Note [GPTQ rounding])."""
    accs = [gptq.HessianAccumulator(layer.kind, dict(layer.call.attrs.items()), layer.weight.shape)
            for layer in layers]  # fmt: skip
    for arrays in calibrate.run_values(probe, feeds):
        for layer, acc in zip(layers, accs, strict=True):
            acc.add(arrays[where[id(layer.data)]])
    return [acc.hessian() for acc in accs]


def _int8_error(layer: Layer, x, y, act, fix, split: bool = False) -> np.ndarray:
    """The layer's int8 output (bias-corrected by `fix`, or None) minus its float output y."""
    y8 = _layer_int8_output(layer, x, act, split)
    if fix is not None:
        y8 = y8 + fix.reshape((-1, 1, 1) if layer.kind == "conv2d" else (-1,))
    return y8 - y


@dataclass
class _Sensitivity:
    probe: sensitivity.NoiseProbe
    feeds: list
    signal: float
    noise: np.ndarray
    groups: list
    candidates: list[int]
    # each layer's noise alone at the levels above int8 (a16, a16w16, w16: Note [precision
    # levels] in sensitivity.py; nan: not measured), the levels to start from, whether to
    # upgrade (Note [16-bit activations])
    upper: list = field(default_factory=list)
    start: dict = field(default_factory=dict)
    upgrade: bool = False

    def choose(self, report, aim: float | None) -> float:
        """Mark in `report` the candidates that choose_levels keeps float or raises to reach
        `aim` (None: only the start levels); the predicted output SQNR of the rest."""
        levels = [self.noise, *self.upper]
        keep, level = [], dict(self.start)
        if aim is not None:
            keep, level = sensitivity.choose_levels(
                levels, self.signal, aim, self.candidates, self.groups, self.start, self.upgrade
            )
        for j in self.candidates:
            report[j].quantized = j not in keep
            report[j].a16 = sensitivity.ACT16[level.get(j, 0)]
            report[j].w16 = sensitivity.SPLIT[level.get(j, 0)]
        on = {j: level.get(j, 0) for j in self.candidates if j not in keep}
        int8 = [j for j, v in on.items() if not v]
        eight = [j for j, v in on.items() if not sensitivity.ACT16[v]]
        upper = {j: levels[v][j] for j, v in on.items() if v}
        return sensitivity.db(
            self.signal, sensitivity.predicted_noise(self.noise, int8, self.groups, upper, eight)
        )


def _sensitivity(func, layers, report, feeds, values, act, fixes, n_inputs, where, config,
                 target, alt=None) -> _Sensitivity:  # fmt: skip
    """Each int8 layer's output SQNR alone, into its report row, and what choosing the layers to
    keep float needs (Note [layer sensitivity]); alt: {position: {level: (act, correction)}} of
    the layers that may be at a level above int8 (1: a16, 2: a16w16, 3: w16; Note [precision
    levels] in sensitivity.py), whose output SQNR alone at those levels is measured too."""
    candidates = [j for j, r in enumerate(report) if r.quantized]
    alt = {j: w for j, w in (alt or {}).items() if j in candidates}
    shared, groups = _shared_values(func, layers, candidates, config.share)
    probe = sensitivity.NoiseProbe(func, layers, shared, target)
    q = get_op("qnn.quantize")

    def deltas(f, level=0):
        arrays = values[f]
        for j, layer in enumerate(layers):
            if j not in candidates or (level and level not in alt.get(j, {})):
                yield None
                continue
            x = arrays[where[id(layer.data)]]
            a, fix = alt[j][level] if level else (act[id(layer.data)], fixes.get(layer.index))
            yield _int8_error(layer, x, arrays[n_inputs + j], a, fix, sensitivity.SPLIT[level])
        for v in shared:  # the int8 copy that other readers read: Note [shared quantized values]
            if level:
                yield None
                continue
            x, (sx, zx, dtype) = arrays[where[id(v)]], act[id(v)]
            xq = q.evaluate([x], dict(scale=sx, zero_point=zx, dtype=dtype))[0]
            yield (xq.astype(np.float32) - np.float32(zx)) * np.float32(sx) - x

    start = {j: sensitivity.level_of(report[j].a16, report[j].w16) for j in candidates
             if report[j].a16 or report[j].w16}  # fmt: skip
    signal, noise = probe.measure(feeds, deltas)
    upper = []
    for level in range(1, len(sensitivity.LEVELS)):
        n = np.full(len(noise), np.nan)
        if any(level in w for w in alt.values()):
            _, n = probe.measure(feeds, lambda f, level=level: deltas(f, level))
            have = np.array([level in alt.get(j, {}) for j in range(len(n))])
            n = np.where(have, n, np.nan)
        upper.append(n)
    groups = [(noise[len(layers) + k], readers) for k, readers in enumerate(groups)]
    columns = (None, "output16_db", "output_a16w16_db", "output_w16_db")
    for j in candidates:
        report[j].output_db = sensitivity.db(signal, noise[j])
        for level in alt.get(j, {}):
            setattr(report[j], columns[level], sensitivity.db(signal, upper[level - 1][j]))
    return _Sensitivity(probe, feeds, signal, noise, groups, candidates, upper, start,
                        config.budget_mode == "a16")  # fmt: skip


def _output_db(func, feeds, refs, target) -> float:
    """The output SQNR of func (compiled) on the feeds against the outputs refs."""
    m = calibrate.compile_probe(func, func.outputs, target)
    outs = [np.concatenate([a.astype(np.float64).ravel() for a in arrays])
            for arrays in calibrate.run_values(m, feeds)]  # fmt: skip
    noise = sum(float(np.sum((r - o) ** 2)) for r, o in zip(refs, outs, strict=True))
    return sensitivity.db(sum(float(np.sum(r**2)) for r in refs), noise)


def _shared_values(func, layers, candidates, share: bool):
    """(the values that int8 layers among `candidates` quantize and other ops read, for each
    the positions of the candidates that read it): with share=True those ops read the int8
    copy (rewrite.py)."""
    if not share:
        return [], []
    calls = {id(layer.call) for layer in layers}
    readers: dict[int, list[int]] = {}
    values = {}
    for j in candidates:
        v = layers[j].data
        if v not in func.outputs:
            readers.setdefault(id(v), []).append(j)
            values[id(v)] = v
    other = {id(v) for c in func.body if id(c) not in calls for v in c.inputs}
    shared = [v for key, v in values.items() if key in other]
    return shared, [readers[id(v)] for v in shared]


def quantize(mod, params=None, calibration=(), config: QConfig | None = None, target="llvm"):
    """Quantize `mod`'s convs and dense/matmuls to int8 from the calibration feeds (an iterable
    of {input name: array}); returns a QuantizeResult (mod, params={}, report)."""
    config = config or QConfig()
    if config.activation_dtype not in ("uint8", "int8", "auto"):
        raise ValueError(f"activation_dtype must be uint8, int8 or auto, got "
                         f"{config.activation_dtype}")  # fmt: skip
    if config.gptq_order not in ("natural", "act"):
        raise ValueError(f"gptq_order must be natural or act, got {config.gptq_order}")
    if config.choose_by not in ("layer", "output"):
        raise ValueError(f"choose_by must be layer or output, got {config.choose_by}")
    if config.budget_mode not in ("float", "a16"):
        raise ValueError(f"budget_mode must be float or a16, got {config.budget_mode}")
    if config.weight_rounding not in ("nearest", "gptq"):
        raise ValueError(f"weight_rounding must be nearest or gptq, got {config.weight_rounding}")
    feeds = list(calibration)[: config.max_samples]
    if not feeds:
        raise ValueError("tessera.quantize needs at least one calibration feed")
    mod = _prepare(mod, params)
    func = mod["main"]
    equalized = 0
    if config.equalize:
        func, equalized = _equalized(func, feeds, config, target)
        mod = IRModule({**dict(mod.functions.items()), "main": func})
    layers = find_layers(func, config.ops, config.skip)
    if not layers:
        return QuantizeResult(mod, {}, [], config, equalized)
    choosing = config.calibrate == "auto" or config.activation_dtype == "auto"
    n_held = _holdout(config, len(feeds)) if choosing else 0
    fit, held_feeds = feeds[: len(feeds) - n_held], feeds[len(feeds) - n_held :]
    inputs = list({id(v): v for v in (layer.data for layer in layers)}.values())
    outputs = [layer.call.outputs[0] for layer in layers]
    probe = calibrate.compile_probe(func, inputs + outputs, target)
    n_fix = config.correction_samples or correction_feeds(len(fit))
    samples = list(calibrate.run_values(probe, fit[: max(1, n_fix)]))
    first = samples[0]
    histograms = config.calibrate != "minmax"
    stats = calibrate.observe(probe, len(inputs), fit, histograms)
    where = {id(v): k for k, v in enumerate(inputs)}
    if config.weight_search:
        for layer in layers:
            layer.importance = _second_moments(layer, [s[where[id(layer.data)]] for s in samples])
    if config.weight_rounding == "gptq":
        h_feeds = fit[: config.hessian_samples or len(fit)]
        for layer, h in zip(layers, _hessians(probe, layers, where, h_feeds), strict=True):
            layer.hessian, layer.damp, layer.gptq_order = h, config.gptq_damp, config.gptq_order
    held_values = list(calibrate.run_values(probe, held_feeds))
    held = [a[: len(inputs)] for a in held_values]
    act, label = {}, {}
    scorer = None
    if config.choose_by == "output" and held_feeds:
        n = min(len(held_feeds), config.sensitivity_samples or correction_feeds(len(held_feeds)))
        scorer = _OutputScorer(func, layers, held_feeds[:n], config, target)
    for k, (v, obs) in enumerate(zip(inputs, stats, strict=True)):
        readers = [layer for layer in layers if layer.data is v]
        act[id(v)], label[id(v)] = _choose_act(obs, readers, [h[k] for h in held], config,
                                               scorer)  # fmt: skip
    # each layer's own SQNR on a feed that fitted nothing when there is one (else the first)
    measured = held_values[0] if held_values else first
    x_of = {id(v): a for v, a in zip(inputs, measured[: len(inputs)], strict=True)}
    model_inputs = _read_from_inputs(func)
    report, fixes, alt = [], {}, {}
    upgrade = config.budget_mode == "a16" and config.target_sqnr_db is not None
    for j, (layer, y) in enumerate(zip(layers, measured[len(inputs) :], strict=True)):
        a = act[id(layer.data)]
        pairs = [(s[where[id(layer.data)]], s[len(inputs) + j]) for s in samples]
        if config.bias_correction:
            fixes[layer.index] = _mean_error(layer, pairs, a)
        err = _int8_error(layer, x_of[id(layer.data)], y, a, fixes.get(layer.index))
        db = sqnr_db(y, y + err)
        ok = db >= config.keep_float_below_db
        if config.keep_float_inputs and id(layer.data) in model_inputs:
            ok = False
        # Note [16-bit activations]: named, or kept float by these two rules in budget_mode a16
        w16 = _named(layer, config.weight_bits16)
        sixteen = _named(layer, config.activation_bits16)
        sixteen = sixteen or (config.budget_mode == "a16" and not ok)
        roles = config.keep_float_roles
        if layer.role in roles or ("last" in roles and j == len(layers) - 1):
            ok = sixteen = w16 = False
        method = label[id(layer.data)]
        report.append(LayerReport(layer.name, layer.kind, a[0], a[1], db, ok or sixteen or w16,
                                  method, a16=sixteen, w16=w16))  # fmt: skip
        named = sensitivity.level_of(sixteen, w16)
        levels = range(1, len(sensitivity.LEVELS)) if upgrade and (ok or sixteen) else (
            [named] if named else [])  # fmt: skip
        if levels:
            obs = stats[where[id(layer.data)]]
            h = config.a16_headroom
            a16 = (*calibrate.activation_params(min(obs.min, 0.0) * h, max(obs.max, 0.0) * h,
                                                "uint16"), "uint16")  # fmt: skip
            alt[j] = {}
            for level in levels:
                act_l = a16 if sensitivity.ACT16[level] else a
                fix = (_mean_error(layer, pairs, act_l, sensitivity.SPLIT[level])
                       if config.bias_correction else None)  # fmt: skip
                alt[j][level] = (act_l, fix)
    outs = measured[len(inputs) :]
    own = {j: (layers[j], x_of[id(layers[j].data)], outs[j],
               (report[j].scale, report[j].zero_point, report[j].method, report[j].sqnr_db))
           for j in alt}  # fmt: skip
    _mark16(report, alt, own)
    predicted = measured = sens = None
    if config.sensitivity or config.target_sqnr_db is not None:
        # on feeds that fitted nothing when there are some (as the own SQNR above)
        values, on = (held_values, held_feeds) if held_values else (samples, fit)
        n = min(len(values), config.sensitivity_samples or correction_feeds(len(values)))
        sens = _sensitivity(func, layers, report, on[:n], values[:n], act, fixes, len(inputs),
                            where, config, target, alt)  # fmt: skip
        predicted = sens.choose(report, config.target_sqnr_db)
        _mark16(report, alt, own)

    def rewritten():
        keep = [layer for layer, r in zip(layers, report, strict=True) if r.quantized]
        up = {layers[j].index: alt[j][sensitivity.level_of(r.a16, r.w16)]
              for j, r in enumerate(report) if r.quantized and (r.a16 or r.w16)}  # fmt: skip
        corrections = {**fixes, **{k: fix for k, (_, fix) in up.items() if fix is not None}}
        wide = {k: a for k, (a, _) in up.items() if a[2] == "uint16"}
        split = {layers[j].index for j, r in enumerate(report) if r.quantized and r.w16}
        return rewrite(func, keep, act, config.share, corrections, wide, split)

    new = rewritten()
    if config.target_sqnr_db is not None:  # Note [layer sensitivity]: measured, and met
        refs = sens.probe.outputs(sens.feeds)
        aim = config.target_sqnr_db
        for attempt in range(config.target_rounds):
            measured = _output_db(new, sens.feeds, refs, target)
            if measured >= config.target_sqnr_db or attempt + 1 == config.target_rounds:
                break
            if not any(r.quantized for r in report):
                break
            aim += config.target_sqnr_db - measured
            predicted = sens.choose(report, aim)
            _mark16(report, alt, own)
            new = rewritten()
    return QuantizeResult(IRModule({**dict(mod.functions.items()), "main": new}), {}, report,
                          config, equalized, predicted, measured)  # fmt: skip
