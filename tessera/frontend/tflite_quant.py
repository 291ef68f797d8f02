"""Integer-exact int8/uint8 kernels of TFLite in graph ops: convolutions, fully connected, ADD,
MUL and average pooling compute their int32 accumulators exactly and requantize with TFLite's
fixed-point arithmetic (Note [fixed-point requantization]), so they agree with the interpreter
bit for bit instead of within a step.

    acc = conv(x - zp_x, w - zp_w) + bias              # exact integers, carried in float64
    y = MultiplyByQuantizedMultiplier(acc, M[c], shift[c]) + zp_y, clamped to the activation

Accumulators are exact in float64 up to 2**53 (products of 8-bit values: millions of terms),
then cast to int64 for the fixed-point steps.
"""

from __future__ import annotations

import math

import numpy as np

from tessera.frontend.tflite import Context
from tessera.frontend.tflite_reader import Quantization

# Note [fixed-point requantization]: TFLite turns a real multiplier m (e.g. s_x * s_w / s_y,
# computed in double) into a 31-bit mantissa M and a shift with QuantizeMultiplier, and applies
# it as RoundingDivideByPOT(SaturatingRoundingDoublingHighMul(x << max(shift, 0), M),
# max(-shift, 0)): a rounded high half of a 64-bit product (ties away from zero), then a
# rounding right shift (ties away from zero). Both are written here with int64 graph ops.

EIGHT_BIT = ("int8", "uint8")


def quantize_multiplier(m: float) -> tuple[int, int]:
    """TFLite's QuantizeMultiplier: m = M * 2**(shift - 31), M in [2**30, 2**31)."""
    if m == 0:
        return 0, 0
    q, shift = math.frexp(m)
    fixed = int(math.copysign(math.floor(abs(q) * (1 << 31) + 0.5), q))
    if fixed == 1 << 31:
        fixed //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    return fixed, shift


def _c(ctx: Context, values, shape):
    return ctx.const(np.asarray(values, np.int64).reshape(shape))


def _trunc_shift(ctx: Context, x, bits):
    """x / 2**bits rounded toward zero (C++ integer division by a power of two)."""
    down = ctx.call("bit_shift", x, bits, direction="RIGHT")
    neg = ctx.call("negative", ctx.call("bit_shift", ctx.call("negative", x), bits,
                                        direction="RIGHT"))  # fmt: skip
    return ctx.call("where", ctx.call("greater_equal", x, ctx.const(np.int64(0))), down, neg)


def multiply_by_quantized_multiplier(ctx: Context, x, multipliers, shifts, shape):
    """Per-element (or per-channel, broadcast with `shape`) fixed-point rescale of int64 x."""
    multipliers, shifts = np.asarray(multipliers, np.int64), np.asarray(shifts, np.int64)
    left, right = np.maximum(shifts, 0), np.maximum(-shifts, 0)
    if np.any(left):
        x = ctx.call("multiply", x, _c(ctx, 1 << left, shape))
    ab = ctx.call("multiply", x, _c(ctx, multipliers, shape))
    nudge = ctx.call("where", ctx.call("greater_equal", ab, ctx.const(np.int64(0))),
                     ctx.const(np.int64(1 << 30)), ctx.const(np.int64(1 - (1 << 30))))  # fmt: skip
    high = _trunc_shift(ctx, ctx.call("add", ab, nudge), ctx.const(np.int64(31)))
    if not np.any(right):
        return high
    mask = (1 << right) - 1
    remainder = ctx.call("bitwise_and", high, _c(ctx, mask, shape))
    negative = ctx.call("cast", ctx.call("less", high, ctx.const(np.int64(0))), dtype="int64")
    threshold = ctx.call("add", _c(ctx, mask >> 1, shape), negative)
    up = ctx.call("cast", ctx.call("greater", remainder, threshold), dtype="int64")
    shifted = ctx.call("bit_shift", high, _c(ctx, right, shape), direction="RIGHT")
    return ctx.call("add", shifted, up)


def activation_range(q: Quantization, dtype: str, code: int) -> tuple[int, int]:
    """CalculateActivationRangeQuantized: the fused activation as a clamp of quantized values."""
    info = np.iinfo(dtype)
    lo, hi = int(info.min), int(info.max)
    scale, zp = float(q.scale.reshape(-1)[0]), int(q.zero_point.reshape(-1)[0])

    def quantize(v):
        return zp + int(math.copysign(math.floor(abs(v / scale) + 0.5), v / scale))

    if code == 1:
        lo = max(lo, quantize(0.0))
    elif code == 2:
        lo, hi = max(lo, quantize(-1.0)), min(hi, quantize(1.0))
    elif code == 3:
        lo, hi = max(lo, quantize(0.0)), min(hi, quantize(6.0))
    elif code != 0:
        raise ValueError(f"a fused activation {code} on a quantized op is not supported")
    return lo, hi


def finish(ctx: Context, acc, out: int, multipliers, shifts, shape, code: int, layout: str):
    """Requantize int64 `acc` to output tensor `out` and store it."""
    q, dtype = ctx.quant(out), ctx.tensor(out).dtype
    y = multiply_by_quantized_multiplier(ctx, acc, multipliers, shifts, shape)
    zp = int(q.zero_point.reshape(-1)[0])
    if zp:
        y = ctx.call("add", y, ctx.const(np.int64(zp)))
    lo, hi = activation_range(q, dtype, code)
    y = ctx.call("clip", y, a_min=float(lo), a_max=float(hi))
    ctx.env[out] = {(layout, False): ctx.call("cast", y, dtype=dtype)}


def eligible(ctx: Context, *tensors: int) -> bool:
    """All of these tensors are 8-bit quantized with one zero point each for activations."""
    return all(
        i >= 0 and ctx.quant(i) is not None and ctx.tensor(i).dtype in EIGHT_BIT for i in tensors
    )


def centered(ctx: Context, i: int, layout: str):
    """Tensor i - its zero point, in float64 (exact)."""
    q = ctx.quant(i)
    x = ctx.call("cast", ctx.get(i, layout, real=False), dtype="float64")
    zp = ctx.per_axis(q.zero_point.astype(np.float64), q, x.type.ndim, layout)
    return ctx.call("subtract", x, ctx.const(zp)) if np.any(zp != 0) else x


def weight_centered(ctx: Context, i: int, axes):
    """A quantized weight minus its zero points, transposed by `axes`, as float64 constants."""
    q = ctx.quant(i)
    w = ctx.get(i, real=False)
    zp = ctx.per_axis(q.zero_point.astype(np.float64), q, w.type.ndim, "nhwc")
    w = ctx.call("cast", w, dtype="float64")
    if np.any(zp != 0):
        w = ctx.call("subtract", w, ctx.const(zp))
    return ctx.call("transpose", w, axes=axes) if axes else w


def output_multipliers(x_scale, w_scales, y_scale):
    """(multipliers, shifts) for real multipliers x_scale * w_scale[c] / y_scale, in double."""
    pairs = [quantize_multiplier(float(x_scale) * float(s) / float(y_scale)) for s in w_scales]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def add_bias(ctx: Context, acc, bias_i: int, shape):
    if bias_i < 0:
        return acc
    with ctx.named_after(bias_i):
        b = ctx.call("cast", ctx.get(bias_i, real=False), dtype="float64")
        b = ctx.call("reshape", b, newshape=shape)
    return ctx.call("add", acc, b)


def to_int64(ctx: Context, acc):
    # the float64 accumulator holds an exact integer
    return ctx.call("cast", acc, dtype="int64")


def exact_add_mul(ctx: Context, op, layout: str, operand) -> bool:
    """Quantized ADD/SUB/MUL as TFLite's integer kernels; False when not applicable."""
    a_i, b_i = op.inputs[:2]
    out = op.outputs[0]
    if op.name not in ("ADD", "SUB", "MUL") or not eligible(ctx, a_i, b_i, out):
        return False
    qa, qb, qy = ctx.quant(a_i), ctx.quant(b_i), ctx.quant(out)
    if qa.per_channel or qb.per_channel or qy.per_channel:
        return False
    sa, sb, sy = (float(q.scale.reshape(-1)[0]) for q in (qa, qb, qy))

    def offset(i, q):
        x = ctx.call("cast", operand(i, real=False), dtype="int64")
        zp = int(q.zero_point.reshape(-1)[0])
        return ctx.call("subtract", x, ctx.const(np.int64(zp))) if zp else x

    a, b = offset(a_i, qa), offset(b_i, qb)
    code = op.options.get("FusedActivationFunction", 0)
    if op.name == "MUL":
        m, s = quantize_multiplier(sa * sb / sy)
        finish(ctx, ctx.call("multiply", a, b), out, [m], [s], (), code, layout)
        return True
    left = 20  # TFLite's int8 ADD: inputs to a common scale with 20 bits of headroom
    twice_max = 2 * max(sa, sb)
    ma, sha = quantize_multiplier(sa / twice_max)
    mb, shb = quantize_multiplier(sb / twice_max)
    my, shy = quantize_multiplier(twice_max / ((1 << left) * sy))
    headroom = ctx.const(np.int64(1 << left))
    a = multiply_by_quantized_multiplier(ctx, ctx.call("multiply", a, headroom), [ma], [sha], ())
    b = multiply_by_quantized_multiplier(ctx, ctx.call("multiply", b, headroom), [mb], [shb], ())
    total = ctx.call("add" if op.name == "ADD" else "subtract", a, b)
    finish(ctx, total, out, [my], [shy], (), code, layout)
    return True


def exact_average_pool(ctx: Context, op, x_shape, pool_size, strides, pads) -> bool:
    """Quantized AVERAGE_POOL_2D as TFLite's integer kernel: the sum of the raw values over the
    window's valid positions, divided by their count rounding half away from zero."""
    x_i, out = op.inputs[0], op.outputs[0]
    if not eligible(ctx, x_i, out):
        return False
    x = ctx.call("cast", ctx.get(x_i, "nchw", real=False), dtype="float64")
    attrs = dict(pool_size=pool_size, strides=strides, padding=pads)
    mean = ctx.call("nn.avg_pool2d", x, **attrs)
    ones = np.ones((1, 1, *x_shape[2:]), np.float64)
    counts = ctx.call("nn.avg_pool2d", ctx.const(ones), **attrs, count_include_pad=True)
    counts = np.rint(counts.array * np.prod(pool_size))  # folded: the valid positions per window
    total = ctx.call("round", ctx.call("multiply", mean, ctx.const(counts)))
    half = ctx.const(np.floor(counts / 2))
    # (acc +- count/2) / count in C++: truncation toward zero
    rounded = ctx.call("where", ctx.call("greater", total, ctx.const(np.float64(0))),
                       ctx.call("add", total, half), ctx.call("subtract", total, half))  # fmt: skip
    q = ctx.call("divide", rounded, ctx.const(counts))
    q = ctx.call("multiply", ctx.call("sign", q), ctx.call("floor", ctx.call("abs", q)))
    lo, hi = activation_range(ctx.quant(out), ctx.tensor(out).dtype,
                              op.options.get("FusedActivationFunction", 0))  # fmt: skip
    q = ctx.call("clip", q, a_min=float(lo), a_max=float(hi))
    ctx.env[out] = {("nchw", False): ctx.call("cast", q, dtype=ctx.tensor(out).dtype)}
    return True


def exact_requantize(ctx: Context, op, layout: str) -> bool:
    """QUANTIZE from an 8-bit tensor to another (TFLite's Requantize): a fixed-point rescale of
    (x - zp_in) by s_in / s_out, plus zp_out."""
    x_i, out = op.inputs[0], op.outputs[0]
    if not eligible(ctx, x_i, out) or ctx.quant(x_i).per_channel or ctx.quant(out).per_channel:
        return False
    qx = ctx.quant(x_i)
    x = ctx.call("cast", ctx.get(x_i, layout, real=False), dtype="int64")
    zp = int(qx.zero_point.reshape(-1)[0])
    if zp:
        x = ctx.call("subtract", x, ctx.const(np.int64(zp)))
    m, s = quantize_multiplier(float(qx.scale.reshape(-1)[0]) / float(ctx.quant(out).scale[0]))
    finish(ctx, x, out, [m], [s], (), 0, layout)
    return True
