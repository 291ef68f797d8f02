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
from tessera.graph_build.lower_group import (
    distinct_groups,
    group_config,
    group_key,
    lower_group,
)
from tessera.ir.dtype import DType
from tessera.target import Target
from tessera.tir.expr import Expr
from tessera.tir.function import PrimFunc
from tessera.tir.transform.lift_workspaces import lift_workspaces
from tessera.topi.rules import rules_in_effect


def _describe(x):
    """group_key's pieces as plain data for cache.cache_key."""
    if x is None or isinstance(x, bool | int | float | str):
        return x
    if isinstance(x, tuple | list):
        return tuple(_describe(v) for v in x)
    if isinstance(x, TensorType):  # a symbolic dim by its text: var names are unique per model
        dims = tuple(d if isinstance(d, int | str) else ("dim", str(d)) for d in x.shape)
        return ("type", str(x.dtype), dims)
    if isinstance(x, DType):
        return ("dtype", str(x))
    if isinstance(x, TensorData):
        a = x.array
        return ("data", a.dtype.str, a.shape, hashlib.sha256(a.tobytes()).hexdigest())
    if isinstance(x, Expr):  # a symbolic dim in an attribute
        return ("dim", str(x))
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
    config = {k: v for k, v in ctx.config.items() if k not in _NOT_IN_KEY}
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
            repr(group_config(group, target)),  # a config given to the build, or the default
            rules_in_effect(),  # Note [rule knobs]: rules may shape more than the config
            _context(),
            cache.compiler_fingerprint(target.kind),
        )
    except cache.Unkeyable:
        return None


JOBS_KEY = "codegen.jobs"  # PassContext config: processes compiling kernels (1: this one)
_NOT_IN_KEY = (cache.CONFIG_KEY, JOBS_KEY)  # config that does not change the code

# What forked workers compile: set before the pool forks, so they inherit it (nothing is pickled
# but the index of a group and the compiled kernel that comes back).
_work: tuple | None = None


def compile_groups(
    func: Function, target: Target, optimize: Callable[[PrimFunc], PrimFunc]
) -> tuple[list[CompiledKernel], list[str]]:
    """(a compiled kernel per distinct group, the kernel name of each call of `func`).

    Kernels missing from the cache are compiled by several processes (forked, where the OS has
    fork): config["codegen.jobs"] of them, by default the runtime's thread count (at most 8), or
    1 (this process) when the PassContext has instruments, which see this process's passes only.
    If the pool fails, they are compiled here in turn."""
    groups, names = distinct_groups(func)
    keys = [kernel_key(g, g.name, target) for g in groups]
    kernels = [cache.lookup(k) for k in keys]
    todo = [i for i, k in enumerate(kernels) if k is None]
    built = _compile_all([groups[i] for i in todo], target, optimize)
    for i, kernel in zip(todo, built, strict=True):
        cache.keep(keys[i], kernel)
        kernels[i] = kernel
    return kernels, names


def _compile_one(group: Function, target: Target, optimize) -> CompiledKernel:
    # scratch buffers become params the executor plan places in the arena (no malloc per call)
    return compile_kernel(lift_workspaces(optimize(lower_group(group, target))), target)


def _jobs() -> int:
    from tessera.runtime import config
    from tessera.transform.pass_context import PassContext

    ctx = PassContext.current()
    jobs = ctx.config.get(JOBS_KEY)
    if jobs is None:
        # pass instruments see the passes of this process only: compile here when there are any
        jobs = 1 if ctx.instruments else min(config.num_threads(), 8)
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f'PassContext config["{JOBS_KEY}"] must be an int >= 1, got {jobs!r}')
    return jobs


def _compile_all(groups: list[Function], target: Target, optimize) -> list[CompiledKernel]:
    import multiprocessing

    jobs = min(_jobs(), len(groups))
    if jobs < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return [_compile_one(g, target, optimize) for g in groups]
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    global _work
    _work = (groups, target, optimize)
    try:
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(jobs, mp_context=context) as pool:
            return list(pool.map(_compile_in_worker, range(len(groups))))
    except (BrokenProcessPool, OSError):  # no processes here: compile in this one
        return [_compile_one(g, target, optimize) for g in groups]
    finally:
        _work = None


def _compile_in_worker(index: int) -> CompiledKernel:
    groups, target, optimize = _work
    return _compile_one(groups[index], target, optimize)
