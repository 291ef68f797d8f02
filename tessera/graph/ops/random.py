"""`random`: samples of a uniform or normal distribution, fresh on every run of a model.

    %y = random(%call, shape=(4, 5), dtype="float32", distribution="normal", a=0.0, b=1.0,
                seed=42)

`%call` is the model's int64 run counter (Note [random call counter] in
runtime/run_counter.py); the samples are a pure function of (call, seed, position)
(Note [run-time random numbers] in topi/philox.py), so two calls with the same attributes
compute the same values and may be merged. Uniform: [a, b); normal: mean a, scale b.
Inside a loop body `%call` is the body's stream, `random_fold_in(%outer call, %iteration)`
(Note [random streams] in topi/philox.py).
"""

from __future__ import annotations

import numpy as np

from tessera.graph.ir import TensorType
from tessera.graph.op import OpKind, register_op
from tessera.graph.ops.common import type_error
from tessera.ir.dtype import DType
from tessera.tir.expr import Expr
from tessera.topi import philox

random = register_op("random", kind=OpKind.INJECTIVE)


@random.type_rule
def _(call: TensorType, shape, dtype, distribution, a, b, seed) -> TensorType:
    if call.dtype != DType.parse("int64") or call.shape != ():
        raise type_error("random", f"the run counter must be an int64 scalar, got {call}")
    if distribution not in philox.DISTRIBUTIONS:
        raise type_error("random", f"unknown distribution {distribution!r}")
    out = DType.parse(dtype)
    if not out.is_float or out.code == "bfloat":
        raise type_error("random", f"samples are float16, float32 or float64, not {out}")
    if any(not isinstance(d, int | Expr) or (isinstance(d, int) and d < 0) for d in shape):
        raise type_error(
            "random", f"the shape must be non-negative ints or symbolic dims, got {list(shape)}"
        )
    return TensorType(tuple(shape), out)


@random.reference
def _(call, shape, dtype, distribution, a, b, seed):
    return philox.random_numpy(int(call), shape, dtype, distribution, a, b, seed)


@random.compute
def _(call, shape, dtype, distribution, a, b, seed):
    return philox.random(call, shape, dtype, distribution, a, b, seed)


# %s = random_fold_in(%stream, %i): the stream of a loop body's iteration %i (Note [random
# streams] in topi/philox.py), read by the body's `random` calls as their run counter
random_fold_in = register_op("random_fold_in", kind=OpKind.OPAQUE)


@random_fold_in.type_rule
def _(stream: TensorType, data: TensorType) -> TensorType:
    scalar = TensorType((), "int64")
    if stream != scalar or data != scalar:
        raise type_error("random_fold_in", f"takes two int64 scalars, got {stream}, {data}")
    return scalar


@random_fold_in.reference
def _(stream, data):
    return np.asarray(philox.fold_in_numpy(int(stream), int(data)), np.int64)


@random_fold_in.compute
def _(stream, data):
    return philox.fold_in(stream, data)
