"""Compile-time limits on sizes: no tensor, and no executor arena, larger than the current
PassContext allows, so that a model that would need terabytes is refused while it compiles,
with the node to blame, instead of spinning or failing in the executor.

    with PassContext(config={"limits.max_tensor_bytes": 1 << 30}):   # 1 GiB per tensor
        lib = tessera.build(mod, target="llvm", params=params)

    check_tensor(TensorType((10**6, 10**6), "float32"), "output of node 'expand' (Expand)")
    ValueError: output of node 'expand' (Expand) would be float32[1000000, 1000000]: 4.0 TB,
      over the limit of 16 GiB per tensor (PassContext config "limits.max_tensor_bytes")

The frontend checks every value as it is made (before a constant is folded with numpy), the
driver checks every value of the optimized graph (`check_limits`) and the arena of the executor
plan (`check_arena`). Sizes are counted with Python ints, which do not overflow.
"""

from __future__ import annotations

import math

from tessera.graph.ir import Function, TensorType
from tessera.ir.module import IRModule
from tessera.transform.pass_context import PassContext

TENSOR_KEY = "limits.max_tensor_bytes"
ARENA_KEY = "limits.max_arena_bytes"
DEFAULT_MAX_TENSOR_BYTES = 16 << 30
DEFAULT_MAX_ARENA_BYTES = 64 << 30


def _limit(key: str, default: int) -> int:
    value = PassContext.current().config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f'PassContext config "{key}" must be a positive int, got {value!r}')
    return value


def human(nbytes: int) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= size:
            return f"{nbytes / size:.1f} {unit}"
    return f"{nbytes} bytes"


def _gib(nbytes: int) -> str:
    return f"{nbytes / (1 << 30):g} GiB"


def nbytes(t: TensorType) -> int:
    """The bytes of a tensor of static type `t` (Python ints: no overflow)."""
    bits = max(t.dtype.bits, 8) * t.dtype.lanes
    return math.prod(int(d) for d in t.shape) * bits // 8


def check_tensor(t: TensorType, what: str) -> None:
    """Refuse a tensor over the limit (`what` names it: the node, the input)."""
    if not t.is_static:
        return
    size, limit = nbytes(t), _limit(TENSOR_KEY, DEFAULT_MAX_TENSOR_BYTES)
    if size > limit:
        raise ValueError(
            f"{what} would be {t.dtype}{list(t.shape)}: {human(size)}, over the limit of "
            f'{_gib(limit)} per tensor (PassContext config "{TENSOR_KEY}")'
        )


def check_limits(mod: IRModule) -> IRModule:
    """Check every input and call output of "main" against the tensor limit; returns `mod`."""
    func: Function = mod["main"]
    for p in func.params:
        check_tensor(p.type, f"input %{p.name}")
    for call in func.body:
        nodes = ", ".join(call.span) or call.op.name
        for v in call.outputs:
            check_tensor(v.type, f"%{v.name} (computed for node {nodes})")
    return mod


def check_arena(arena_nbytes: int) -> None:
    """Refuse an executor plan whose arena (the intermediates alive at once) is over the limit."""
    limit = _limit(ARENA_KEY, DEFAULT_MAX_ARENA_BYTES)
    if arena_nbytes > limit:
        raise ValueError(
            f"the model's intermediate values need an arena of {human(arena_nbytes)}, over the "
            f'limit of {_gib(limit)} (PassContext config "{ARENA_KEY}")'
        )
