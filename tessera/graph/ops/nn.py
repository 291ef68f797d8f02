"""Neural-network ops: convolutions, pooling, dense/matmul, normalizations, softmax, activations.

Layouts are NCHW (channels first) with weights OIHW, as in ONNX. `padding` lists the begin pads
of every spatial axis, then the end pads (ONNX order). Ops exist for 1, 2 and 3 spatial dims
(`nn.conv1d`, `nn.conv2d`, `nn.conv3d`, ...), sharing one rule each.
"""

from __future__ import annotations

import inspect

import numpy as np

from tessera.graph.dims import dim_bounds, dim_vars, is_symbolic, lower_bound
from tessera.graph.ir import TensorType
from tessera.graph.op import OpKind, register_op
from tessera.graph.ops import nn_ref
from tessera.graph.ops.common import (
    broadcast_shapes,
    normalize_axis,
    require_float,
    same_dtype,
    type_error,
)
from tessera.topi import generic
from tessera.topi import nn as topi_nn
from tessera.topi.nn.pooling import pool_output_size as topi_pool_output_size


def _spatial_attrs(op, nd, strides, padding, dilation):
    if len(strides) != nd or len(dilation) != nd or len(padding) != 2 * nd:
        raise type_error(
            op,
            f"needs {nd} strides and dilations and {2 * nd} pads, got {strides}, {padding}, "
            f"{dilation}",
        )
    if min(strides) < 1 or min(dilation) < 1 or min(padding, default=0) < 0:
        raise type_error(op, "strides and dilations must be >= 1 and pads >= 0")


def _at_least(x: TensorType) -> str:
    """For a symbolic input: the dims' smallest sizes, which the user may raise in shape_dict."""
    found = dim_vars([x.shape])
    if not found:
        return ""
    mins = ", ".join(f"{v.name} >= {dim_bounds(v)[0]}" for v in found)
    return f" at the smallest sizes its dims allow ({mins}; raise them in shape_dict)"


def _conv_type(op, nd):
    def rule(x: TensorType, w: TensorType, strides, padding, dilation, groups=1):
        require_float(op, x)
        same_dtype(op, x, w)
        if x.ndim != nd + 2 or w.ndim != nd + 2:
            raise type_error(op, f"expects rank-{nd + 2} data and weight, got {x} and {w}")
        _spatial_attrs(op, nd, strides, padding, dilation)
        if groups < 1 or x.shape[1] != w.shape[1] * groups or w.shape[0] % groups:
            raise type_error(op, f"channels of data {x} and weight {w} disagree (groups={groups})")
        out = []
        for i in range(nd):
            size = x.shape[2 + i] + padding[i] + padding[i + nd]
            size -= dilation[i] * (w.shape[2 + i] - 1) + 1
            if lower_bound(size) < 0:  # at the smallest sizes a symbolic dim allows, too
                raise type_error(
                    op, f"kernel {w.shape[2:]} is larger than padded input {x}{_at_least(x)}"
                )
            out.append(size // strides[i] + 1)
        return TensorType((x.shape[0], w.shape[0], *out), x.dtype)

    return rule


def _conv_transpose_type(op, nd):
    def rule(
        x: TensorType, w: TensorType, strides, padding, dilation, groups=1, output_padding=None
    ):
        require_float(op, x)
        same_dtype(op, x, w)
        if x.ndim != nd + 2 or w.ndim != nd + 2:
            raise type_error(op, f"expects rank-{nd + 2} data and weight, got {x} and {w}")
        _spatial_attrs(op, nd, strides, padding, dilation)
        output_padding = output_padding or (0,) * nd
        if groups < 1 or x.shape[1] != w.shape[0] or w.shape[0] % groups:
            raise type_error(op, f"channels of data {x} and weight {w} disagree (groups={groups})")
        out = []
        for i in range(nd):
            size = strides[i] * (x.shape[2 + i] - 1) + output_padding[i]
            size += (w.shape[2 + i] - 1) * dilation[i] + 1 - padding[i] - padding[i + nd]
            if size <= 0:
                raise type_error(op, f"output size {size} along spatial axis {i} is not positive")
            out.append(size)
        return TensorType((x.shape[0], w.shape[1] * groups, *out), x.dtype)

    return rule


def pool_output_size(size, kernel, stride, pad_begin, pad_end, dilation, ceil_mode):
    """ONNX/PyTorch pooling output size; with ceil_mode the last window must start in bounds.
    A symbolic size gives the same rule as an expression (topi's pool_output_size)."""
    if is_symbolic(size):
        return topi_pool_output_size(size, kernel, stride, pad_begin, pad_end, dilation, ceil_mode)
    span = size + pad_begin + pad_end - ((kernel - 1) * dilation + 1)
    out = (-(-span // stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + pad_begin:
        out -= 1
    return out


def _pool_type(op, nd):
    def rule(
        x: TensorType,
        pool_size,
        strides,
        padding,
        dilation=None,
        ceil_mode=0,
        count_include_pad=0,
    ):
        dilation = dilation or (1,) * nd
        if x.ndim != nd + 2:
            raise type_error(op, f"expects rank-{nd + 2} data, got {x}")
        _spatial_attrs(op, nd, strides, padding, dilation)
        if len(pool_size) != nd:
            raise type_error(op, f"needs {nd} pool sizes, got {pool_size}")
        out = [
            pool_output_size(
                x.shape[2 + i],
                pool_size[i],
                strides[i],
                padding[i],
                padding[i + nd],
                dilation[i],
                ceil_mode,
            )
            for i in range(nd)
        ]
        # A window one stride (or less) larger than the padded input leaves no window: an
        # empty output, as ONNX's VALID rule and ONNX Runtime give; more is an error there too.
        if min(lower_bound(o) for o in out) < 0:
            raise type_error(
                op, f"pool window {pool_size} is larger than padded input {x}{_at_least(x)}"
            )
        return x.with_shape((*x.shape[:2], *out))

    return rule


def _global_pool_type(op, nd):
    def rule(x: TensorType):
        if x.ndim != nd + 2:
            raise type_error(op, f"expects rank-{nd + 2} data, got {x}")
        return x.with_shape((*x.shape[:2], *(1,) * nd))

    return rule


def _conv_compute(x, w, *, strides, padding, dilation, groups=1):
    return topi_nn.conv(x, w, strides, padding, dilation, groups)


def _conv_transpose_compute(x, w, *, strides, padding, dilation, groups=1, output_padding=None):
    return topi_nn.conv_transpose(x, w, strides, padding, dilation, groups, output_padding)


def _pool_compute(kind):
    def compute(x, *, pool_size, strides, padding, dilation=None, ceil_mode=0, count_include_pad=0):
        return topi_nn.pool(
            x, kind, pool_size, strides, padding, dilation, ceil_mode, count_include_pad
        )

    return compute


def _global_pool_compute(kind):
    return lambda x: topi_nn.global_pool(x, kind)


for _nd in (1, 2, 3):
    _op = register_op(f"nn.conv{_nd}d", kind=OpKind.OUT_ELEMWISE_FUSABLE)
    _op.type_rule(_conv_type(_op.name, _nd))
    _op.reference(nn_ref.conv)
    _op.compute(_conv_compute)
    _op.schedule("generic")(topi_nn.schedule_conv)
    _op = register_op(f"nn.conv{_nd}d_transpose", kind=OpKind.OUT_ELEMWISE_FUSABLE)
    _op.type_rule(_conv_transpose_type(_op.name, _nd))
    _op.reference(nn_ref.conv_transpose)
    _op.compute(_conv_transpose_compute)
    _op.schedule("generic")(topi_nn.schedule_conv)
    for _kind in ("max", "avg"):
        _op = register_op(f"nn.{_kind}_pool{_nd}d", kind=OpKind.OUT_ELEMWISE_FUSABLE)
        _op.type_rule(_pool_type(_op.name, _nd))
        _op.reference(nn_ref.max_pool if _kind == "max" else nn_ref.avg_pool)
        _op.compute(_pool_compute(_kind))
        _op.schedule("generic")(topi_nn.schedule_pool)
        _op = register_op(f"nn.global_{_kind}_pool{_nd}d", kind=OpKind.OUT_ELEMWISE_FUSABLE)
        _op.type_rule(_global_pool_type(_op.name, _nd))
        _op.reference(nn_ref.global_max_pool if _kind == "max" else nn_ref.global_avg_pool)
        _op.compute(_global_pool_compute(_kind))
        _op.schedule("generic")(topi_nn.schedule_pool)

# -- dense, matmul ----------------------------------------------------------------------------

dense = register_op("nn.dense", kind=OpKind.OUT_ELEMWISE_FUSABLE)


@dense.type_rule
def _(x: TensorType, w: TensorType) -> TensorType:
    same_dtype("nn.dense", x, w)
    if x.ndim < 1 or w.ndim != 2 or x.shape[-1] != w.shape[1]:
        raise type_error("nn.dense", f"data {x} and weight {w} (units, in) disagree")
    return x.with_shape((*x.shape[:-1], w.shape[0]))


@dense.reference
def _(x, w):
    return np.matmul(x, w.T).astype(x.dtype)


@dense.compute
def _(x, w):
    return topi_nn.dense(x, w)


dense.schedule("generic")(topi_nn.schedule_dense)


matmul = register_op("matmul", kind=OpKind.OUT_ELEMWISE_FUSABLE)


@matmul.type_rule
def _(a: TensorType, b: TensorType) -> TensorType:
    """numpy.matmul: 1-D operands are promoted and the added dim removed; batch dims broadcast."""
    same_dtype("matmul", a, b)
    if a.ndim == 0 or b.ndim == 0:
        raise type_error("matmul", f"operands must not be scalars, got {a} and {b}")
    sa = (1, *a.shape) if a.ndim == 1 else a.shape
    sb = (*b.shape, 1) if b.ndim == 1 else b.shape
    if sa[-1] != sb[-2]:
        raise type_error("matmul", f"inner dims of {a} and {b} disagree")
    batch = broadcast_shapes("matmul", sa[:-2], sb[:-2])
    shape = (*batch, *(() if a.ndim == 1 else (sa[-2],)), *(() if b.ndim == 1 else (sb[-1],)))
    return TensorType(shape, a.dtype)


@matmul.reference
def _(a, b):
    return np.matmul(a, b).astype(a.dtype)


@matmul.compute
def _(a, b):
    return topi_nn.matmul(a, b)


matmul.schedule("generic")(topi_nn.schedule_dense)


batch_matmul = register_op("nn.batch_matmul", kind=OpKind.OUT_ELEMWISE_FUSABLE)


@batch_matmul.type_rule
def _(a: TensorType, b: TensorType, transpose_a=False, transpose_b=False) -> TensorType:
    same_dtype("nn.batch_matmul", a, b)
    if a.ndim != 3 or b.ndim != 3:
        raise type_error("nn.batch_matmul", f"expects rank-3 operands, got {a} and {b}")
    m, k = (a.shape[2], a.shape[1]) if transpose_a else a.shape[1:]
    k2, n = (b.shape[2], b.shape[1]) if transpose_b else b.shape[1:]
    if k != k2:
        raise type_error("nn.batch_matmul", f"inner dims of {a} and {b} disagree")
    batch = broadcast_shapes("nn.batch_matmul", a.shape[:1], b.shape[:1])
    return TensorType((*batch, m, n), a.dtype)


@batch_matmul.reference
def _(a, b, transpose_a=False, transpose_b=False):
    a = a.transpose(0, 2, 1) if transpose_a else a
    b = b.transpose(0, 2, 1) if transpose_b else b
    return np.matmul(a, b).astype(a.dtype)


@batch_matmul.compute
def _(a, b, *, transpose_a=False, transpose_b=False):
    return topi_nn.batch_matmul(a, b, transpose_a, transpose_b)


batch_matmul.schedule("generic")(topi_nn.schedule_dense)


# -- normalization, softmax -------------------------------------------------------------------


def _check_channel_params(op, x, params, axis):
    c = x.shape[axis]
    for p in params:
        if p.ndim != 1 or p.shape[0] != c:
            raise type_error(op, f"parameter {p} must have shape [{c}] (channels of {x})")


batch_norm = register_op("nn.batch_norm", kind=OpKind.OUT_ELEMWISE_FUSABLE)


@batch_norm.type_rule
def _(x, gamma, beta, mean, var, epsilon=1e-5, axis=1) -> TensorType:
    require_float("nn.batch_norm", x)
    _check_channel_params(
        "nn.batch_norm", x, (gamma, beta, mean, var), normalize_axis("nn.batch_norm", axis, x.ndim)
    )
    return x


batch_norm.reference(nn_ref.batch_norm)


@batch_norm.compute
def _(x, gamma, beta, mean, var, *, epsilon=1e-5, axis=1):
    return topi_nn.batch_norm(x, gamma, beta, mean, var, epsilon, axis)


# element-wise in its data: the injective schedule (vectorized), not the reduction default
batch_norm.schedule("generic")(generic.schedule_injective)

instance_norm = register_op("nn.instance_norm", kind=OpKind.OPAQUE)


@instance_norm.type_rule
def _(x, gamma, beta, epsilon=1e-5) -> TensorType:
    require_float("nn.instance_norm", x)
    if x.ndim < 3:
        raise type_error("nn.instance_norm", f"expects data of rank >= 3, got {x}")
    _check_channel_params("nn.instance_norm", x, (gamma, beta), 1)
    return x


instance_norm.reference(nn_ref.instance_norm)


@instance_norm.compute
def _(x, gamma, beta, *, epsilon=1e-5):
    return topi_nn.instance_norm(x, gamma, beta, epsilon)


instance_norm.schedule("generic")(topi_nn.schedule_row_reduce)

layer_norm = register_op("nn.layer_norm", kind=OpKind.OPAQUE)


@layer_norm.type_rule
def _(x, gamma, beta, axis=-1, epsilon=1e-5) -> TensorType:
    require_float("nn.layer_norm", x)
    axis = normalize_axis("nn.layer_norm", axis, x.ndim)
    for p in (gamma, beta):
        broadcast_shapes("nn.layer_norm", x.shape[axis:], p.shape)
        if p.ndim > x.ndim - axis:
            raise type_error("nn.layer_norm", f"parameter {p} has more dims than {x}[{axis}:]")
    return x


layer_norm.reference(nn_ref.layer_norm)


@layer_norm.compute
def _(x, gamma, beta, *, axis=-1, epsilon=1e-5):
    return topi_nn.layer_norm(x, gamma, beta, axis, epsilon)


layer_norm.schedule("generic")(topi_nn.schedule_row_reduce)
# target-specific schedules are registered by the targets' strategy modules (topi/<key>/)

for _name, _fn in (("nn.softmax", nn_ref.softmax), ("nn.log_softmax", nn_ref.log_softmax)):
    _op = register_op(_name, kind=OpKind.OPAQUE)

    def _softmax_type(x: TensorType, axis=-1, _name=_name) -> TensorType:
        require_float(_name, x)
        normalize_axis(_name, axis, x.ndim)
        return x

    _op.type_rule(_softmax_type)
    _op.reference(_fn)
    _op.compute(topi_nn.softmax if _name == "nn.softmax" else topi_nn.log_softmax)
    _op.schedule("generic")(topi_nn.schedule_row_reduce)

lrn = register_op("nn.lrn", kind=OpKind.OPAQUE)


@lrn.type_rule
def _(x: TensorType, size, alpha=1e-4, beta=0.75, bias=1.0) -> TensorType:
    require_float("nn.lrn", x)
    if x.ndim < 3:
        raise type_error("nn.lrn", f"expects data of rank >= 3, got {x}")
    return x


lrn.reference(nn_ref.lrn)


@lrn.compute
def _(x, *, size, alpha=1e-4, beta=0.75, bias=1.0):
    return topi_nn.lrn(x, size, alpha, beta, bias)


lrn.schedule("generic")(topi_nn.schedule_lrn)


# -- activations ------------------------------------------------------------------------------

for _name, _fn in nn_ref.ACTIVATIONS.items():
    _op = register_op(f"nn.{_name}", kind=OpKind.ELEMWISE)

    def _activation_type(x: TensorType, _name=_name, _fn=_fn, **attrs) -> TensorType:
        require_float(f"nn.{_name}", x)
        try:  # the attributes are those of the reference
            inspect.signature(_fn).bind(x, **attrs)
        except TypeError as e:
            raise type_error(f"nn.{_name}", str(e)) from None
        return x

    _op.type_rule(_activation_type)
    _op.reference(_fn)
    _op.compute(topi_nn.ACTIVATIONS[_name])

prelu = register_op("nn.prelu", kind=OpKind.BROADCAST)


@prelu.type_rule
def _(x: TensorType, slope: TensorType) -> TensorType:
    same_dtype("nn.prelu", x, slope)
    if broadcast_shapes("nn.prelu", x.shape, slope.shape) != x.shape:
        raise type_error("nn.prelu", f"slope {slope} must broadcast to data {x}")
    return x


@prelu.reference
def _(x, slope):
    return np.where(x < 0, x * slope, x).astype(x.dtype)


@prelu.compute
def _(x, slope):
    return topi_nn.prelu(x, slope)
