"""TFLite converters: one function per builtin op (or family), registered with `tflite_op`.

    @tflite_op("RELU6")
    def relu6(ctx, op):
        layout = ctx.layout_of(op.inputs[0])
        ctx.set(op.outputs[0], ctx.call("clip", ctx.get(op.inputs[0], layout), ...), layout)

A converter reads its inputs with `ctx.get(index, layout)` (the float view of quantized
tensors), writes each output with `ctx.set(index, value, layout)`, and finds its options in
`op.options` under the schema's field names ("StrideW", "FusedActivationFunction", ...).
Convolutions and pools run in NCHW; elementwise ops in the layout their inputs have.
"""

from __future__ import annotations

import struct

import numpy as np

from tessera.frontend import tflite_quant as tq
from tessera.frontend.conv_transpose import conv_transpose as emit_conv_transpose
from tessera.frontend.tflite import Context, tflite_op
from tessera.frontend.tflite_reader import Operator
from tessera.graph.ir import Constant

_NHWC_TO_NCHW_AXIS = (0, 2, 3, 1)  # position of NHWC axis k in NCHW


def _f32(v) -> np.ndarray:
    return np.asarray(v, np.float32)


def activation(ctx: Context, y, code: int):
    """A fused activation (ActivationFunctionType)."""
    if code == 0:
        return y
    if code == 1:
        return ctx.call("nn.relu", y)
    if code == 2:
        return ctx.call("clip", y, a_min=-1.0, a_max=1.0)
    if code == 3:
        return ctx.call("clip", y, a_min=0.0, a_max=6.0)
    # TFLite's kernels clamp to the range of RELU, RELU_N1_TO_1 and RELU6 only, and ignore a
    # fused TANH or SIGN_BIT (converters never emit them); guessing either way could be wrong
    name = {4: "TANH", 5: "SIGN_BIT"}.get(code, str(code))
    raise ValueError(f"a fused {name} activation is not supported")


def same_padding(size: int, kernel: int, stride: int, dilation: int, padding: int):
    """(begin, end) pads of TFLite's SAME (padding=0) or VALID (1) along one axis."""
    if padding == 1:
        return 0, 0
    out = -(-size // stride)
    total = max((out - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


def _spatial(x_shape, kh, kw, opts, dil=(1, 1)):
    sh, sw = opts.get("StrideH", 1), opts.get("StrideW", 1)
    ph = same_padding(x_shape[2], kh, sh, dil[0], opts.get("Padding", 0))
    pw = same_padding(x_shape[3], kw, sw, dil[1], opts.get("Padding", 0))
    return (sh, sw), (ph[0], pw[0], ph[1], pw[1])


def _bias(ctx: Context, y, i: int):
    if i < 0:
        return y
    with ctx.named_after(i):
        b = ctx.get(i)
        b = ctx.call("reshape", b, newshape=(b.type.shape[0], 1, 1))
    return ctx.call("add", y, b)


@tflite_op("CONV_2D", "DEPTHWISE_CONV_2D")
def conv_2d(ctx: Context, op: Operator):
    opts = op.options
    bias = op.inputs[2] if len(op.inputs) > 2 else -1
    exact = tq.eligible(ctx, *op.inputs[:2], op.outputs[0]) and ctx.is_const(op.inputs[1])
    axes = (3, 0, 1, 2) if op.name == "DEPTHWISE_CONV_2D" else (0, 3, 1, 2)  # -> OIHW
    if exact:
        x, w = tq.centered(ctx, op.inputs[0], "nchw"), tq.weight_centered(ctx, op.inputs[1], axes)
    else:
        x, w = ctx.get(op.inputs[0], "nchw"), ctx.weight(op.inputs[1], axes)
    cin = x.type.shape[1]
    groups = cin if op.name == "DEPTHWISE_CONV_2D" else cin // w.type.shape[1]
    dil = (opts.get("DilationHFactor", 1), opts.get("DilationWFactor", 1))
    strides, pads = _spatial(x.type.shape, *w.type.shape[2:], opts, dil)
    y = ctx.call("nn.conv2d", x, w, strides=strides, padding=pads, dilation=dil, groups=groups)
    code = opts.get("FusedActivationFunction", 0)
    if exact:
        c = w.type.shape[0]
        acc = tq.to_int64(ctx, tq.add_bias(ctx, y, bias, (c, 1, 1)))
        m, s = tq.output_multipliers(ctx.quant(op.inputs[0]).scale[0],
                                     ctx.quant(op.inputs[1]).scale.reshape(-1),
                                     ctx.quant(op.outputs[0]).scale[0])  # fmt: skip
        tq.finish(ctx, acc, op.outputs[0], m, s, (len(m), 1, 1) if len(m) > 1 else (), code,
                  "nchw")  # fmt: skip
        return
    y = _bias(ctx, y, bias)
    ctx.set(op.outputs[0], activation(ctx, y, code), "nchw")


@tflite_op("TRANSPOSE_CONV")
def transpose_conv(ctx: Context, op: Operator):
    opts = op.options
    out_shape = tuple(int(d) for d in ctx.const_value(op.inputs[0], "output_shape"))
    w = ctx.weight(op.inputs[1], (3, 0, 1, 2))  # OHWI -> IOHW
    x = ctx.get(op.inputs[2], "nchw")
    strides = (opts.get("StrideH", 1), opts.get("StrideW", 1))
    pads, extra = [], []
    for axis in (0, 1):
        size, k, s = x.type.shape[2 + axis], w.type.shape[2 + axis], strides[axis]
        o = out_shape[1 + axis]
        full = (size - 1) * s + k
        total = max(full - o, 0)
        begin = total // 2 if opts.get("Padding", 0) == 0 else 0
        pads.append((begin, total - begin))
        extra.append(max(o - full, 0))
    y = emit_conv_transpose(ctx, x, w, strides=strides,
                            padding=(pads[0][0], pads[1][0], pads[0][1], pads[1][1]),
                            dilation=(1, 1), groups=1, output_padding=tuple(extra))  # fmt: skip
    y = _bias(ctx, y, op.inputs[3] if len(op.inputs) > 3 else -1)
    ctx.set(op.outputs[0], activation(ctx, y, opts.get("FusedActivationFunction", 0)), "nchw")


@tflite_op("CUSTOM:Convolution2DTransposeBias")
def transpose_conv_bias(ctx: Context, op: Operator):
    """MediaPipe's transposed conv with a bias (segmentation decoders): inputs (data NHWC,
    weights OHWI, bias), options a raw TfLiteTransposeConvParams (int32 padding — 1 SAME, 2
    VALID — stride_w, stride_h). SAME trims k - 1 - (in - 1) % s of the full output, the
    smaller half at the start, so the output is s * (in - 1) + k minus that."""
    if len(op.custom_options) < 12 or len(op.inputs) != 3:
        raise ValueError(
            "Convolution2DTransposeBias takes (data, weights, bias) and 12 bytes of options "
            f"(padding, stride_w, stride_h); got {len(op.inputs)} inputs and "
            f"{len(op.custom_options)} bytes"
        )
    padding, stride_w, stride_h = struct.unpack("<iii", op.custom_options[:12])
    if padding not in (1, 2) or stride_w < 1 or stride_h < 1:
        raise ValueError(
            f"Convolution2DTransposeBias: padding {padding} (1 SAME or 2 VALID) and strides "
            f"({stride_h}, {stride_w}) must be positive"
        )
    w = ctx.weight(op.inputs[1], (3, 0, 1, 2))  # OHWI -> IOHW
    x = ctx.get(op.inputs[0], "nchw")
    strides = (stride_h, stride_w)
    trim = []
    for axis in (0, 1):
        size, k, st = x.type.shape[2 + axis], w.type.shape[2 + axis], strides[axis]
        total = max(0, k - (size - 1) % st - 1) if padding == 1 else 0
        trim.append((total // 2, total - total // 2))
    y = emit_conv_transpose(ctx, x, w, strides=strides,
                            padding=(trim[0][0], trim[1][0], trim[0][1], trim[1][1]),
                            dilation=(1, 1), groups=1, output_padding=(0, 0))  # fmt: skip
    ctx.set(op.outputs[0], _bias(ctx, y, op.inputs[2]), "nchw")


@tflite_op("AVERAGE_POOL_2D", "MAX_POOL_2D")
def pool_2d(ctx: Context, op: Operator):
    opts = op.options
    x = ctx.get(op.inputs[0], "nchw")
    kh, kw = opts.get("FilterHeight", 1), opts.get("FilterWidth", 1)
    strides, pads = _spatial(x.type.shape, kh, kw, opts)
    kind = "avg" if op.name == "AVERAGE_POOL_2D" else "max"
    if kind == "avg" and tq.exact_average_pool(ctx, op, x.type.shape, (kh, kw), strides, pads):
        return
    y = ctx.call(f"nn.{kind}_pool2d", x, pool_size=(kh, kw), strides=strides, padding=pads)
    ctx.set(op.outputs[0], activation(ctx, y, opts.get("FusedActivationFunction", 0)), "nchw")


@tflite_op("FULLY_CONNECTED")
def fully_connected(ctx: Context, op: Operator):
    bias = op.inputs[2] if len(op.inputs) > 2 else -1
    exact = tq.eligible(ctx, *op.inputs[:2], op.outputs[0]) and ctx.is_const(op.inputs[1])
    if exact:
        x, w = tq.centered(ctx, op.inputs[0], "nhwc"), tq.weight_centered(ctx, op.inputs[1], None)
    else:
        x, w = ctx.get(op.inputs[0]), ctx.get(op.inputs[1])
    units, depth = w.type.shape
    rows = int(np.prod(x.type.shape)) // depth
    y = ctx.call("nn.dense", ctx.call("reshape", x, newshape=(rows, depth)), w)
    out_shape = ctx.shape(op.outputs[0])
    if op.options.get("KeepNumDims", False):
        out_shape = (*x.type.shape[:-1], units)
    code = op.options.get("FusedActivationFunction", 0)
    if exact:
        acc = tq.to_int64(ctx, tq.add_bias(ctx, y, bias, (units,)))
        acc = ctx.call("reshape", acc, newshape=tuple(out_shape))
        m, s = tq.output_multipliers(ctx.quant(op.inputs[0]).scale[0],
                                     ctx.quant(op.inputs[1]).scale.reshape(-1),
                                     ctx.quant(op.outputs[0]).scale[0])  # fmt: skip
        tq.finish(ctx, acc, op.outputs[0], m, s, (len(m),) if len(m) > 1 else (), code, "nhwc")
        return
    if bias >= 0:
        y = ctx.call("add", y, ctx.get(bias))
    y = activation(ctx, y, code)
    ctx.set(op.outputs[0], ctx.call("reshape", y, newshape=tuple(out_shape)))


def _operand(ctx: Context, i: int, layout: str, real: bool = True):
    """Input i for an elementwise op computed in `layout` (rank < 4 operands broadcast along
    TFLite's trailing axes, so in NCHW they are padded to rank 4 and transposed)."""
    if layout == "nhwc" or len(ctx.shape(i)) > 4:
        return ctx.get(i, real=real)
    if len(ctx.shape(i)) == 4 and ctx.has(i, "nchw"):
        return ctx.get(i, "nchw", real=real)
    v = ctx.get(i, real=real)
    if v.type.ndim < 4:
        v = ctx.call("reshape", v, newshape=(1,) * (4 - v.type.ndim) + tuple(v.type.shape))
    return ctx.call("transpose", v, axes=(0, 3, 1, 2))


_BINARY = {"ADD": "add", "SUB": "subtract", "MUL": "multiply", "DIV": "divide",
           "MAXIMUM": "maximum", "MINIMUM": "minimum", "POW": "power",
           "SQUARED_DIFFERENCE": None, "FLOOR_DIV": None}  # fmt: skip


@tflite_op(*_BINARY)
def binary(ctx: Context, op: Operator):
    a_i, b_i = op.inputs[:2]
    out_nd = len(ctx.shape(op.outputs[0]))
    layout = ctx.layout_of(a_i, b_i) if out_nd == 4 else "nhwc"
    if tq.exact_add_mul(ctx, op, layout, lambda i, real: _operand(ctx, i, layout, real)):
        return
    a, b = _operand(ctx, a_i, layout), _operand(ctx, b_i, layout)
    if op.name == "SQUARED_DIFFERENCE":
        d = ctx.call("subtract", a, b)
        y = ctx.call("multiply", d, d)
    elif op.name == "FLOOR_DIV":
        if not a.type.dtype.is_float:
            raise ValueError("integer FLOOR_DIV is not supported")
        y = ctx.call("floor", ctx.call("divide", a, b))
    else:
        y = ctx.call(_BINARY[op.name], a, b)
    y = activation(ctx, y, op.options.get("FusedActivationFunction", 0))
    ctx.set(op.outputs[0], y, layout)


_UNARY = {"RELU": "nn.relu", "LOGISTIC": "sigmoid", "TANH": "tanh", "HARD_SWISH": "nn.hardswish",
          "ELU": "nn.elu", "EXP": "exp", "LOG": "log", "SQRT": "sqrt", "RSQRT": "rsqrt",
          "ABS": "abs", "NEG": "negative", "SIN": "sin", "COS": "cos", "FLOOR": "floor",
          "CEIL": "ceil", "ROUND": "round"}  # fmt: skip


@tflite_op(*_UNARY, "RELU6", "RELU_N1_TO_1", "RELU_0_TO_1", "LEAKY_RELU", "SQUARE", "GELU",
           "QUANTIZE", "DEQUANTIZE")  # fmt: skip
def unary(ctx: Context, op: Operator):
    layout = ctx.layout_of(op.inputs[0])
    if op.name == "QUANTIZE" and tq.exact_requantize(ctx, op, layout):
        return
    x = ctx.get(op.inputs[0], layout)
    name = op.name
    if name in _UNARY:
        y = ctx.call(_UNARY[name], x)
    elif name in ("RELU6", "RELU_N1_TO_1", "RELU_0_TO_1"):
        lo, hi = {"RELU6": (0.0, 6.0), "RELU_N1_TO_1": (-1.0, 1.0), "RELU_0_TO_1": (0.0, 1.0)}[name]
        y = ctx.call("clip", x, a_min=lo, a_max=hi)
    elif name == "LEAKY_RELU":
        y = ctx.call("nn.leaky_relu", x, alpha=float(op.options.get("Alpha", 0.2)))
    elif name == "SQUARE":
        y = ctx.call("multiply", x, x)
    elif name == "GELU":
        approximate = "tanh" if op.options.get("Approximate", False) else "none"
        y = ctx.call("nn.gelu", x, approximate=approximate)
    else:  # QUANTIZE, DEQUANTIZE: `set` quantizes (or widens float16) for the output's type
        y = x
    ctx.set(op.outputs[0], y, layout)


@tflite_op("PRELU")
def prelu(ctx: Context, op: Operator):
    layout = ctx.layout_of(op.inputs[0])
    x, alpha = ctx.get(op.inputs[0], layout), _operand(ctx, op.inputs[1], layout)
    ctx.set(op.outputs[0], ctx.call("nn.prelu", x, alpha), layout)


@tflite_op("RESHAPE", "SQUEEZE", "EXPAND_DIMS")
def reshape(ctx: Context, op: Operator):
    # the output tensor's stored shape is the result (a -1 in the new shape is resolved there)
    shape = ctx.shape(op.outputs[0])
    x = ctx.get(op.inputs[0])
    if int(np.prod(shape)) != int(np.prod(x.type.shape)) or any(d < 0 for d in shape):
        raise ValueError(f"cannot reshape {list(x.type.shape)} to {list(shape)}")
    ctx.set(op.outputs[0], ctx.call("reshape", x, newshape=tuple(shape)))


@tflite_op("CONCATENATION")
def concatenation(ctx: Context, op: Operator):
    nd = len(ctx.shape(op.outputs[0]))
    axis = op.options.get("Axis", 0) % nd
    layout = ctx.layout_of(*op.inputs) if nd == 4 else "nhwc"
    xs = [_operand(ctx, i, layout) for i in op.inputs]
    if layout == "nchw":
        axis = _NHWC_TO_NCHW_AXIS[axis]
    y = ctx.call("concatenate", *xs, axis=axis)
    ctx.set(op.outputs[0], activation(ctx, y, op.options.get("FusedActivationFunction", 0)),
            layout)  # fmt: skip


@tflite_op("PAD", "PADV2", "MIRROR_PAD")
def pad(ctx: Context, op: Operator):
    pads = ctx.const_value(op.inputs[1], "paddings").astype(int).reshape(-1, 2)
    nd = len(pads)
    layout = ctx.layout_of(op.inputs[0]) if nd == 4 else "nhwc"
    if layout == "nchw":
        pads = pads[[0, 3, 1, 2]]
    x = ctx.get(op.inputs[0], layout)
    value, mode = 0.0, "constant"  # a quantized tensor pads with its zero point: real 0
    if op.name == "PADV2" and len(op.inputs) > 2 and op.inputs[2] >= 0:
        v = ctx.get(op.inputs[2])
        if not isinstance(v, Constant):
            raise ValueError("a PADV2 constant_values input must be a constant")
        value = float(v.array.reshape(-1)[0])
    if op.name == "MIRROR_PAD":
        if op.options.get("Mode", 0) != 0:
            raise ValueError("MIRROR_PAD in SYMMETRIC mode is not supported")
        mode = "reflect"
    width = tuple(int(p) for p in pads[:, 0]) + tuple(int(p) for p in pads[:, 1])
    ctx.set(op.outputs[0], ctx.call("pad", x, pad_width=width, mode=mode, value=value), layout)


_REDUCE = {"MEAN": "mean", "SUM": "sum", "REDUCE_MAX": "max", "REDUCE_MIN": "min",
           "REDUCE_PROD": "prod"}  # fmt: skip


@tflite_op(*_REDUCE)
def reduce(ctx: Context, op: Operator):
    nd = len(ctx.shape(op.inputs[0]))
    axes = sorted({int(a) % nd for a in ctx.const_value(op.inputs[1], "axis").reshape(-1)})
    keep = bool(op.options.get("KeepDims", False))
    layout = ctx.layout_of(op.inputs[0]) if keep else "nhwc"
    if layout == "nchw":
        axes = sorted(_NHWC_TO_NCHW_AXIS[a] for a in axes)
    x = ctx.get(op.inputs[0], layout)
    ctx.set(op.outputs[0], ctx.call(_REDUCE[op.name], x, axis=tuple(axes), keepdims=keep), layout)


@tflite_op("SOFTMAX", "LOG_SOFTMAX")
def softmax(ctx: Context, op: Operator):
    nd = len(ctx.shape(op.inputs[0]))
    layout = ctx.layout_of(op.inputs[0]) if nd == 4 else "nhwc"
    x = ctx.get(op.inputs[0], layout)
    beta = float(op.options.get("Beta", 1.0))
    if beta != 1.0:
        x = ctx.call("multiply", x, ctx.const(np.float32(beta)))
    kind = "nn.softmax" if op.name == "SOFTMAX" else "nn.log_softmax"
    ctx.set(op.outputs[0], ctx.call(kind, x, axis=1 if layout == "nchw" else -1), layout)


@tflite_op("RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR")
def resize(ctx: Context, op: Operator):
    x = ctx.get(op.inputs[0], "nchw")
    n, c, h, w = x.type.shape
    oh, ow = (int(v) for v in ctx.const_value(op.inputs[1], "size").reshape(-1))
    align, half = op.options.get("AlignCorners", False), op.options.get("HalfPixelCenters", False)
    linear = op.name == "RESIZE_BILINEAR"
    if align:
        mode, nearest = "align_corners", "round_prefer_ceil"
    elif half:
        mode, nearest = ("half_pixel" if linear else "tf_half_pixel_for_nn"), "floor"
    else:
        mode, nearest = "asymmetric", "floor"
    y = ctx.call("image.resize", x, size=(n, c, oh, ow), scales=(1.0, 1.0, oh / h, ow / w),
                 mode="linear" if linear else "nearest", coordinate_transformation_mode=mode,
                 nearest_mode=nearest)  # fmt: skip
    ctx.set(op.outputs[0], y, "nchw")


@tflite_op("DEPTH_TO_SPACE", "SPACE_TO_DEPTH")
def depth_space(ctx: Context, op: Operator):
    x = ctx.get(op.inputs[0], "nchw")
    block = int(op.options.get("BlockSize", 2))
    if op.name == "DEPTH_TO_SPACE":  # TensorFlow's order is ONNX's DCR
        y = ctx.call("nn.depth_to_space", x, block_size=block, mode="DCR")
    else:
        y = ctx.call("nn.space_to_depth", x, block_size=block)
    ctx.set(op.outputs[0], y, "nchw")


@tflite_op("TRANSPOSE")
def transpose(ctx: Context, op: Operator):
    perm = tuple(int(a) for a in ctx.const_value(op.inputs[1], "perm").reshape(-1))
    ctx.set(op.outputs[0], ctx.call("transpose", ctx.get(op.inputs[0]), axes=perm))


@tflite_op("STRIDED_SLICE", "SLICE")
def strided_slice(ctx: Context, op: Operator):
    x = ctx.get(op.inputs[0])
    shape = x.type.shape
    begin = [int(v) for v in ctx.const_value(op.inputs[1], "begin").reshape(-1)]
    if op.name == "SLICE":
        size = [int(v) for v in ctx.const_value(op.inputs[2], "size").reshape(-1)]
        end = [d if s < 0 else b + s for b, s, d in zip(begin, size, shape, strict=True)]
        strides, opts = [1] * len(shape), {}
    else:
        end = [int(v) for v in ctx.const_value(op.inputs[2], "end").reshape(-1)]
        strides = [int(v) for v in ctx.const_value(op.inputs[3], "strides").reshape(-1)]
        opts = op.options
    if opts.get("EllipsisMask", 0) or opts.get("NewAxisMask", 0):
        raise ValueError("ellipsis_mask and new_axis_mask are not supported")
    lo, hi, st = [], [], []
    for k, d in enumerate(shape):
        s = strides[k] if k < len(strides) else 1
        b = None if (opts.get("BeginMask", 0) >> k) & 1 or k >= len(begin) else begin[k]
        e = None if (opts.get("EndMask", 0) >> k) & 1 or k >= len(end) else end[k]
        if (opts.get("ShrinkAxisMask", 0) >> k) & 1:
            e, s = (b + 1 if b != -1 else None), 1
        if s < 1:
            raise ValueError("negative slice strides are not supported")
        start, stop, _ = slice(b, e, s).indices(d)
        lo.append(start)
        hi.append(max(stop, start))
        st.append(s)
    y = ctx.call("slice", x, begin=tuple(lo), end=tuple(hi), strides=tuple(st))
    ctx.set(op.outputs[0], ctx.call("reshape", y, newshape=tuple(ctx.shape(op.outputs[0]))))


@tflite_op("SPLIT", "SPLIT_V")
def split(ctx: Context, op: Operator):
    if op.name == "SPLIT":
        axis_i, x_i = op.inputs[0], op.inputs[1]
        sizes = None
    else:
        x_i, axis_i = op.inputs[0], op.inputs[2]
        sizes = [int(v) for v in ctx.const_value(op.inputs[1], "size_splits").reshape(-1)]
    x = ctx.get(x_i)
    axis = int(ctx.const_value(axis_i, "axis").reshape(-1)[0]) % x.type.ndim
    dim = x.type.shape[axis]
    if sizes is None:
        sizes = [dim // len(op.outputs)] * len(op.outputs)
    if sizes.count(-1) == 1:
        sizes[sizes.index(-1)] = dim - (sum(sizes) + 1)
    parts = ctx.call("split", x, axis=axis, sections=tuple(sizes))
    for i, part in zip(op.outputs, parts if isinstance(parts, tuple) else (parts,), strict=True):
        ctx.set(i, part)


@tflite_op("BATCH_MATMUL")
def batch_matmul(ctx: Context, op: Operator):
    a, b = ctx.get(op.inputs[0]), ctx.get(op.inputs[1])
    if op.options.get("AdjX", False):
        a = ctx.call(
            "transpose", a, axes=(*range(a.type.ndim - 2), a.type.ndim - 1, a.type.ndim - 2)
        )
    if op.options.get("AdjY", False):
        b = ctx.call(
            "transpose", b, axes=(*range(b.type.ndim - 2), b.type.ndim - 1, b.type.ndim - 2)
        )
    ctx.set(op.outputs[0], ctx.call("matmul", a, b))


@tflite_op("CAST")
def cast(ctx: Context, op: Operator):
    ctx.set(op.outputs[0], ctx.call("cast", ctx.get(op.inputs[0]),
                                    dtype=ctx.tensor(op.outputs[0]).dtype))  # fmt: skip


@tflite_op("DENSIFY")
def densify(ctx: Context, op: Operator):
    from tessera.frontend.tflite_sparse import densify as to_dense

    t = ctx.tensor(op.inputs[0])
    if t.data is None or t.sparsity is None:
        raise ValueError("DENSIFY needs a sparse constant input")
    ctx.env[op.outputs[0]] = {("nhwc", False): ctx.const(to_dense(t))}


@tflite_op("ARG_MAX", "ARG_MIN")
def arg_max(ctx: Context, op: Operator):
    axis = int(ctx.const_value(op.inputs[1], "axis").reshape(-1)[0])
    kind = "argmax" if op.name == "ARG_MAX" else "argmin"
    y = ctx.call(kind, ctx.get(op.inputs[0]), axis=axis, keepdims=False)
    ctx.set(op.outputs[0], y)


@tflite_op("L2_NORMALIZATION")
def l2_normalization(ctx: Context, op: Operator):
    x = ctx.get(op.inputs[0])
    ss = ctx.call("sum", ctx.call("multiply", x, x), axis=(x.type.ndim - 1,), keepdims=True)
    ss = ctx.call("maximum", ss, ctx.const(np.float32(1e-6)))
    y = ctx.call("multiply", x, ctx.call("rsqrt", ss))
    ctx.set(op.outputs[0], activation(ctx, y, op.options.get("FusedActivationFunction", 0)))
