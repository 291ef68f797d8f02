"""Compile the distinct kernels of a fused function, each through the compile cache.

    kernels, kernel_of_call = compile_groups(fused_func, target, optimize)

A kernel's cache key is taken before lowering, from what decides its code: the group's
structure (`group_key`: ops, attributes, input types, inner constants, serialized stably by
`group_digest`), its name, the target (`cache.target_fingerprint`), the PassContext (opt level,
disabled passes, config) and the compiler itself (`cache.compiler_fingerprint`: tessera's
source, so an edited compute or schedule rule makes new keys). An op whose rules are defined
outside tessera adds the bytecode of those rules. A hit skips the compute rules, the schedule,
te.lower, the tir passes and code generation.
"""

from __future__ import annotations

import hashlib
import marshal
from collections.abc import Callable

from tessera.codegen import cache
from tessera.codegen.aot import CompiledKernel, compile_kernel
from tessera.graph.ir import Attrs, Function, TensorData, TensorType
from tessera.graph_build.lower_group import distinct_groups, group_key, lower_group
from tessera.ir.dtype import DType
from tessera.target import Target
from tessera.tir.function import PrimFunc


def _describe(x):
    """group_key's pieces as plain data for cache.cache_key."""
    if x is None or isinstance(x, bool | int | float | str):
        return x
    if isinstance(x, tuple | list):
        return tuple(_describe(v) for v in x)
    if isinstance(x, TensorType):
        return ("type", str(x.dtype), tuple(x.shape))
    if isinstance(x, DType):
        return ("dtype", str(x))
    if isinstance(x, TensorData):
        a = x.array
        return ("data", a.dtype.str, a.shape, hashlib.sha256(a.tobytes()).hexdigest())
    if isinstance(x, Attrs):
        return ("attrs", tuple((k, _describe(v)) for k, v in x.items()))
    if isinstance(x, Function):  # a nested function in an attribute
        return ("function", _describe(group_key(x)))
    raise cache.Unkeyable(f"no stable description of a {type(x).__name__}")


def _foreign_rules(group: Function) -> list:
    """The bytecode of the members' rules that are defined outside tessera (user ops)."""
    out = []
    for call in group.body:
        for name, rule in sorted(call.op.rules.items()):
            module = getattr(rule, "__module__", "") or ""
            if module == "tessera" or module.startswith("tessera."):
                continue
            code = getattr(rule, "__code__", None)
            if code is None:
                raise cache.Unkeyable(f"rule {name} of {call.op.name} has no bytecode")
            out.append((call.op.name, name, marshal.dumps(code)))
    return out


def group_digest(group: Function) -> str:
    """A stable hex digest of the group's structure (equal for equal `group_key`s)."""
    return cache.cache_key(_describe(group_key(group)), _foreign_rules(group))


def _context() -> tuple:
    from tessera.transform.pass_context import PassContext

    ctx = PassContext.current()
    config = {k: v for k, v in ctx.config.items() if k != cache.CONFIG_KEY}
    text = repr(sorted(config.items(), key=lambda kv: str(kv[0])))
    if " at 0x" in text:  # an object printed with its address: no stable key
        raise cache.Unkeyable("the PassContext config holds objects without a stable form")
    return (ctx.opt_level, sorted(ctx.disabled_pass), text)


def kernel_key(group: Function, name: str, target: Target) -> str | None:
    """The cache key of `group` compiled as kernel `name` for `target`, or None (no cache)."""
    try:
        return cache.cache_key(
            "group-kernel",
            name,
            group_digest(group),
            cache.target_fingerprint(target),
            _context(),
            cache.compiler_fingerprint(target.kind),
        )
    except cache.Unkeyable:
        return None


def compile_groups(
    func: Function, target: Target, optimize: Callable[[PrimFunc], PrimFunc]
) -> tuple[list[CompiledKernel], list[str]]:
    """(a compiled kernel per distinct group, the kernel name of each call of `func`)."""
    groups, names = distinct_groups(func)
    kernels = []
    for group in groups:

        def build(group=group) -> CompiledKernel:
            return compile_kernel(optimize(lower_group(group, target)), target)

        kernels.append(cache.cached(kernel_key(group, group.name, target), build))
    return kernels, names
