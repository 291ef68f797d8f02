"""The tensor-expression DSL: tensors, computes, reductions, schedules, and `lower` to tir.

    from tessera import te
    n = te.var("n")
    A = te.placeholder((n,), name="A"); B = te.placeholder((n,), name="B")
    C = te.compute(A.shape, lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=64)
    f = te.lower(s, [A, B, C], name="myadd")          # a tir.PrimFunc

Everything a kernel author needs is exported here, including the math intrinsics of tir.op.
"""

# ruff: noqa: F401 - this module re-exports the DSL
from tessera.ir.dtype import DType
from tessera.te.bound import BoundInfo, infer_bound
from tessera.te.lower import lower
from tessera.te.reduction import Reducer, argmax, argmin, comm_reducer, max, min, sum  # noqa: A004
from tessera.te.schedule import (
    AttachType,
    FuseRelation,
    Schedule,
    SizeDispatch,
    SplitRelation,
    Stage,
    create_schedule,
)
from tessera.te.steps import (
    Bind,
    CacheRead,
    CacheWrite,
    ClampTails,
    ComputeAt,
    ComputeInline,
    ComputeRoot,
    Fuse,
    Parallel,
    Pragma,
    Prefetch,
    Reorder,
    SetScope,
    Split,
    Step,
    Tile,
    Unroll,
    Vectorize,
    step_from_json,
    steps_from_json,
    steps_to_json,
)
from tessera.te.tensor import (
    ComputeOp,
    Operation,
    PlaceholderOp,
    ProducerLoad,
    Tensor,
    TensorSlice,
    compute,
    placeholder,
    reduce_axis,
    size_var,
    thread_axis,
    var,
)
from tessera.tir.expr import IterVar, Range, const
from tessera.tir.op import (
    abs,  # noqa: A004
    acos,
    acosh,
    all,  # noqa: A004
    any,  # noqa: A004
    asin,
    asinh,
    atan,
    atan2,
    atanh,
    bitwise_and,
    bitwise_not,
    bitwise_or,
    bitwise_xor,
    cast,
    ceil,
    cos,
    cosh,
    erf,
    exp,
    exp2,
    floor,
    floordiv,
    floormod,
    fma,
    fmod,
    if_then_else,
    isinf,
    isnan,
    likely,
    log,
    log2,
    log10,
    logical_and,
    logical_not,
    logical_or,
    max_value,
    min_value,
    popcount,
    pow,  # noqa: A004
    power,
    reinterpret,
    round,  # noqa: A004
    rsqrt,
    select,
    shift_left,
    shift_right,
    sigmoid,
    sin,
    sinh,
    sqrt,
    tan,
    tanh,
    trunc,
    truncdiv,
    truncmod,
)

__all__ = [name for name in dir() if not name.startswith("_")]
