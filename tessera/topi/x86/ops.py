"""The x86 strategies' own graph ops: blocked (NCHW[x]c) convolutions and pools, and dense
with a pre-packed weight; with their x86 schedules, and the x86 schedules of the core ops.

    %2 = nn.conv2d_nchwc(%1, %w, strides=[1, 1], padding=[1, 1, 1, 1], dilation=[1, 1])
    %3 = nn.max_pool2d_nchwc(%2, pool_size=[3, 3], strides=[2, 2], padding=[1, 1, 1, 1])
    %4 = nn.dense_packed(%x, %wp, units=3072)

Graph passes write them when the x86 strategy (topi/x86/strategy.py) asks for them; users
rarely do. A blocked tensor (N, C/b, H, W, b) holds channel c at [:, c // b, :, :, c % b]; the
block b is its last dim, so these ops take no layout attribute: the shapes say it (conv data of
block 1 may be plain NCHW, rank 4: the same memory). Blocked weights are (O/ob, I/ib, KH, KW,
ib, ob) (layout "OIHW{ib}i{ob}o"). Attributes are those of the NCHW ops (`nn.conv2d`,
`nn.max_pool2d`, ...) plus `config` (the strategy's chosen knobs, read by the schedule), and
each reference is the NCHW op's between transforms.
"""

from __future__ import annotations

import itertools

import numpy as np

from tessera.graph.dims import dim_bounds, dim_vars, lower_bound
from tessera.graph.ir import TensorType
from tessera.graph.op import OpKind, get_op, register_op
from tessera.graph.ops import nn_ref
from tessera.graph.ops.common import require_float, same_dtype, type_error
from tessera.topi import layout as topi_layout
from tessera.topi.strategy import Config
from tessera.topi.x86 import batch_matmul as x86_bmm
from tessera.topi.x86 import conv2d as x86_conv2d
from tessera.topi.x86 import dense as x86_dense
from tessera.topi.x86 import int8_conv2d, int8_dense
from tessera.topi.x86 import norm as x86_norm
from tessera.topi.x86 import pooling as x86_pooling
from tessera.topi.x86 import reduce as x86_reduce
from tessera.topi.x86 import softmax as x86_softmax
from tessera.topi.x86 import winograd as x86_winograd


def _config(config) -> Config | None:
    return None if config is None else Config.from_attr(config)


def data_layout(shape) -> str:
    """The layout of a blocked data tensor of this (5-d) shape: 'NCHW16c'; 'NCHW' for 4-d."""
    return "NCHW" if len(shape) == 4 else f"NCHW{shape[4]}c"


def weight_layout(shape) -> str:
    """The layout of a blocked weight of this (6-d) shape: 'OIHW16i16o'."""
    return f"OIHW{shape[4]}i{shape[5]}o"


def _static_channels(x: TensorType) -> bool:
    """Blocked data whose channel blocks and block are ints; the batch and the sizes may be
    symbolic dims (graph/dims.py; Note [symbolic blocks] in transform/alter_layout.py)."""
    return all(isinstance(x.shape[i], int) for i in (1, *range(4, x.ndim)))


def _check_symbolic_sizes(op, x: TensorType, shape, window: str, size) -> None:
    """A symbolic output size must be >= 1 at the smallest sizes its dims allow (the static
    ones are checked by the shape functions)."""
    if any(lower_bound(d) < 1 for d in shape[2:4] if not isinstance(d, int)):
        mins = ", ".join(f"{v.name} >= {dim_bounds(v)[0]}" for v in dim_vars([x.shape]))
        raise type_error(
            op,
            f"{window} {tuple(size)} is larger than the padded input {x} at the smallest "
            f"sizes its dims allow ({mins}; raise them in shape_dict)",
        )


# -- conv2d ------------------------------------------------------------------------------------

conv2d_nchwc = register_op("nn.conv2d_nchwc", kind=OpKind.OUT_ELEMWISE_FUSABLE)


def _check_spatial(op, strides, padding, dilation):
    if len(strides) != 2 or len(dilation) != 2 or len(padding) != 4:
        raise type_error(
            op, f"needs 2 strides and dilations and 4 pads, got {strides}, {padding}, {dilation}"
        )
    if min(strides) < 1 or min(dilation) < 1 or min(padding) < 0:
        raise type_error(op, "strides and dilations must be >= 1 and pads >= 0")


@conv2d_nchwc.type_rule
def _(
    x: TensorType, w: TensorType, strides, padding, dilation, groups=1, share=1, config=None
) -> TensorType:
    op = "nn.conv2d_nchwc"
    require_float(op, x)
    same_dtype(op, x, w)
    if x.ndim not in (4, 5) or w.ndim != 6 or not (_static_channels(x) and w.is_static):
        raise type_error(
            op,
            f"expects blocked data (rank 5, or rank 4 for blocks of 1; channels and block "
            f"static) and a static weight (rank 6), got {x} and {w}",
        )
    _check_spatial(op, strides, padding, dilation)
    try:
        shape, _ = x86_conv2d.conv2d_nchwc_shape(
            x.shape, w.shape, strides, padding, dilation, groups, share
        )
    except ValueError as err:
        raise type_error(op, str(err)) from None
    _check_symbolic_sizes(op, x, shape, "kernel", w.shape[2:4])
    return x.with_shape(shape)


@conv2d_nchwc.reference
def _(x, w, strides, padding, dilation, groups=1, share=1, config=None):
    xn = topi_layout.transform_array(x, data_layout(x.shape), "NCHW")
    ib, ob = w.shape[4], w.shape[5]
    ic, oc = xn.shape[1], w.shape[0] * ob
    if groups > 1 and not (groups == ic == oc and w.shape[1] == 1):
        wn = x86_conv2d.GroupWindow.of(ic, oc, groups, ib, ob, share).unpack(w)
    else:
        wn = topi_layout.transform_array(w, weight_layout(w.shape), "OIHW")
    y = nn_ref.conv(xn, wn, strides, padding, dilation, groups)
    return topi_layout.transform_array(y, "NCHW", f"NCHW{w.shape[5]}c")


@conv2d_nchwc.compute
def _(x, w, *, strides, padding, dilation, groups=1, share=1, config=None):
    return x86_conv2d.conv2d_nchwc(x, w, strides, padding, dilation, groups, share)


conv2d_nchwc.schedule("x86")(x86_conv2d.schedule_conv2d_nchwc)
conv2d_nchwc.schedule("generic")(x86_conv2d.schedule_conv2d_nchwc)


# -- winograd conv2d ---------------------------------------------------------------------------
# A stride-1 3x3 conv whose weights alter_layout transformed at compile time
# (topi/x86/winograd.py): %y = nn.conv2d_winograd_nchwc(%x, %u, padding=[1, 1, 1, 1], tile=4,
# channels=64, out_block=16, rows=6), %u (a, a, K/nr, C, nr) = G w Gt in panels; `rows`: the
# products' row count is rounded up to a multiple of it (the micro-kernel's rows).

conv2d_winograd = register_op("nn.conv2d_winograd_nchwc", kind=OpKind.OUT_ELEMWISE_FUSABLE)


@conv2d_winograd.type_rule
def _(
    x: TensorType, u: TensorType, padding, tile, channels, out_block, rows=1, config=None
) -> TensorType:
    op = "nn.conv2d_winograd_nchwc"
    require_float(op, x)
    same_dtype(op, x, u)
    ok = x.ndim == 5 and _static_channels(x) and u.is_static
    if not ok or len(padding) != 4 or min(padding) < 0:
        raise type_error(
            op,
            f"expects blocked data (channels static), static weights and 4 pads >= 0, got "
            f"{x}, {u}, {padding}",
        )
    try:
        shape = x86_winograd.winograd_shape(x.shape, u.shape, padding, tile, channels, out_block)
    except ValueError as err:
        raise type_error(op, str(err)) from None
    _check_symbolic_sizes(op, x, shape, "kernel", (3, 3))
    return x.with_shape(shape)


@conv2d_winograd.reference
def _(x, u, padding, tile, channels, out_block, rows=1, config=None):
    xn = topi_layout.transform_array(x, data_layout(x.shape), "NCHW")
    y = x86_winograd.winograd_reference(xn, u, padding, tile, channels)
    return topi_layout.transform_array(y, "NCHW", f"NCHW{out_block}c")


@conv2d_winograd.compute
def _(x, u, *, padding, tile, channels, out_block, rows=1, config=None):
    return x86_winograd.conv2d_winograd_nchwc(x, u, padding, tile, channels, out_block, rows)


conv2d_winograd.schedule("x86")(x86_winograd.schedule_conv2d_winograd_nchwc)
conv2d_winograd.schedule("generic")(x86_winograd.schedule_conv2d_winograd_nchwc)


# -- pools -------------------------------------------------------------------------------------


def _pool_type(op):
    def rule(
        x: TensorType,
        pool_size,
        strides,
        padding,
        dilation=None,
        ceil_mode=0,
        count_include_pad=0,
        config=None,
    ):
        if x.ndim != 5 or not _static_channels(x):
            raise type_error(op, f"expects blocked data (rank 5, channels static), got {x}")
        _check_spatial(op, strides, padding, dilation or (1, 1))
        if len(pool_size) != 2:
            raise type_error(op, f"needs 2 pool sizes, got {pool_size}")
        try:
            shape = x86_pooling.pool_nchwc_shape(
                x.shape, pool_size, strides, padding, dilation, ceil_mode
            )
        except ValueError as err:
            raise type_error(op, str(err)) from None
        _check_symbolic_sizes(op, x, shape, "pool window", pool_size)
        return x.with_shape(shape)

    return rule


def _blocked_reference(fn):
    def reference(x, **attrs):
        layout = data_layout(x.shape)
        y = fn(topi_layout.transform_array(x, layout, "NCHW"), **attrs)
        return topi_layout.transform_array(y, "NCHW", layout)

    return reference


def _pool_compute(kind):
    def compute(
        x,
        *,
        pool_size,
        strides,
        padding,
        dilation=None,
        ceil_mode=0,
        count_include_pad=0,
        config=None,
    ):
        return x86_pooling.pool_nchwc(
            x, kind, pool_size, strides, padding, dilation, ceil_mode, count_include_pad
        )

    return compute


def _global_pool_type(op):
    def rule(x: TensorType):
        if x.ndim != 5:
            raise type_error(op, f"expects blocked data (rank 5), got {x}")
        return x.with_shape((x.shape[0], x.shape[1], 1, 1, x.shape[4]))

    return rule


_REFERENCES = {
    "max": nn_ref.max_pool,
    "avg": nn_ref.avg_pool,
    "global_max": nn_ref.global_max_pool,
    "global_avg": nn_ref.global_avg_pool,
}

for _kind in ("max", "avg"):
    _op = register_op(f"nn.{_kind}_pool2d_nchwc", kind=OpKind.OUT_ELEMWISE_FUSABLE)
    _op.type_rule(_pool_type(_op.name))
    _ref = _blocked_reference(_REFERENCES[_kind])
    _op.reference(lambda x, _ref=_ref, config=None, **attrs: _ref(x, **attrs))
    _op.compute(_pool_compute(_kind))
    _op.schedule("x86")(x86_pooling.schedule_pool_nchwc)
    _op.schedule("generic")(x86_pooling.schedule_pool_nchwc)
    _op = register_op(f"nn.global_{_kind}_pool2d_nchwc", kind=OpKind.OUT_ELEMWISE_FUSABLE)
    _op.type_rule(_global_pool_type(_op.name))
    _gref = _blocked_reference(_REFERENCES[f"global_{_kind}"])
    _op.reference(lambda x, _gref=_gref: _gref(x))
    _op.compute(lambda x, _kind=_kind: x86_pooling.global_pool_nchwc(x, _kind))
    _op.schedule("x86")(x86_pooling.schedule_pool_nchwc)
    _op.schedule("generic")(x86_pooling.schedule_pool_nchwc)


# -- dense with a pre-packed weight (tessera/transform/pack_weights.py) ------------------------
# A constant weight of dense/matmul is re-packed once, at compile time, into the panels the
# register-blocked kernel streams: wp is (ceil(units / nr), K, nr), zero-padded past units.

dense_packed = register_op("nn.dense_packed", kind=OpKind.OUT_ELEMWISE_FUSABLE)


@dense_packed.type_rule
def _(x: TensorType, wp: TensorType, units, config=None) -> TensorType:
    same_dtype("nn.dense_packed", x, wp)
    if x.ndim < 1 or wp.ndim != 3 or x.shape[-1] != wp.shape[1]:
        raise type_error("nn.dense_packed", f"data {x} and packed weight {wp} disagree")
    if not (wp.shape[0] - 1) * wp.shape[2] < units <= wp.shape[0] * wp.shape[2]:
        raise type_error("nn.dense_packed", f"{units} units do not fill packed weight {wp}")
    return x.with_shape((*x.shape[:-1], units))


@dense_packed.reference
def _(x, wp, units, config=None):
    w = wp.transpose(1, 0, 2).reshape(wp.shape[1], -1)[:, :units]
    return np.matmul(x, w).astype(x.dtype)


@dense_packed.compute
def _(x, wp, *, units, config=None):
    return x86_dense.dense_packed(x, wp, units)


# the micro-kernel's rules are over the vector width and registers: right for any CPU
dense_packed.schedule("generic")(x86_dense.schedule_dense_packed)
dense_packed.schedule("x86")(x86_dense.schedule_dense_packed)


# -- x86 schedules of the core ops ------------------------------------------------------------

for _name in ("nn.batch_matmul", "matmul", "nn.dense"):
    get_op(_name).schedule("x86")(x86_bmm.schedule_matmul)
get_op("nn.layer_norm").schedule("x86")(x86_norm.schedule_layer_norm)
for _name in ("nn.softmax", "nn.log_softmax"):
    get_op(_name).schedule("x86")(x86_softmax.schedule_rows)
for _name in ("sum", "mean", "prod", "max", "min"):  # Note [reduction vectors]
    get_op(_name).schedule("x86")(x86_reduce.schedule_reduce)
for _kind, _nd in itertools.product(("max", "avg"), (1, 2, 3)):  # pools in NC[D]HW
    get_op(f"nn.global_{_kind}_pool{_nd}d").schedule("x86")(x86_reduce.schedule_reduce)
    get_op(f"nn.{_kind}_pool{_nd}d").schedule("x86")(x86_pooling.schedule_pool_nchw)


# -- CPU schedules of the int8 ops (graph/ops/qnn.py) -------------------------------------------
# the VNNI/AVX-512/AVX2 micro-kernels' rules are over the vector width and registers (the C
# target's portable dot product takes the same loops): right for any CPU, as dense_packed's

for _name, _schedule in (
    ("qnn.dense", int8_dense.schedule_qnn_dense),
    ("qnn.batch_matmul", int8_dense.schedule_qnn_batch_matmul),
    ("qnn.conv2d", int8_conv2d.schedule_qnn_conv2d),
    ("qnn.conv2d_packed", int8_conv2d.schedule_qnn_conv2d_packed),
    ("qnn.conv2d_nchwc", int8_conv2d.schedule_qnn_conv2d_packed),
):
    get_op(_name).schedule("generic")(_schedule)
    get_op(_name).schedule("x86")(_schedule)
