"""The compiler's table of contents: from a schedule to a PrimFunc to a runtime module.

    tessera.lower(s, [A, B, C], name="myadd")   # te schedule -> IRModule of the lowered PrimFunc
    tessera.build(s, [A, B, C], target="llvm")  # ... -> runtime.Module (callable kernels)

Every step is a named function; `PassContext` (opt level, disabled passes, instruments that print
or time the IR after each pass) applies to the tir passes listed in `TIR_PASSES`.
"""

from __future__ import annotations

from tessera import te, tir
from tessera.ir.module import IRModule
from tessera.target import Target
from tessera.tir import transform as tt
from tessera.tir.verify import verify
from tessera.transform.pass_context import PassContext, run_passes

# The tir passes between te.lower and code generation, in order (docs/architecture.md).
TIR_PASSES = [
    tt.simplify,
    tt.partition_loop,
    tt.flatten_storage,
    tt.vectorize_loop,
    tt.unroll_loop,
    tt.simplify,
    tt.remove_no_op,
]


def _verified(func: tir.PrimFunc) -> tir.PrimFunc:
    verify(func)
    return func


def optimize(func: tir.PrimFunc) -> tir.PrimFunc:
    """Run TIR_PASSES (under the current PassContext) and verify the result."""
    func = run_passes(TIR_PASSES, func, PassContext.current())
    return _verified(func)


def lower(sch, args=None, name: str = "main", simple_mode: bool = False) -> IRModule:
    """Lower a te schedule (or a PrimFunc) to the PrimFunc that code generation takes.

    Returns an IRModule holding the function under `name`; `print()` it to read the loops.
    `simple_mode` is accepted for compatibility with TVM programs; the text is the same.
    """
    if isinstance(sch, tir.PrimFunc):
        func = sch
    elif isinstance(sch, te.Schedule):
        if args is None:
            raise ValueError("lower(schedule, args): the list of argument tensors is required")
        func = te.lower(sch, args, name=name)
    else:
        raise TypeError(f"lower expects a te.Schedule or a tir.PrimFunc, got {type(sch).__name__}")
    func = optimize(func)
    return IRModule({func.name: func})


def _codegen(funcs: list[tir.PrimFunc], target: Target):
    if target.kind == "llvm":
        from tessera.codegen.llvm import build_llvm

        return build_llvm(funcs, target)
    if target.kind == "c":
        from tessera.codegen.c import build_c

        return build_c(funcs, target)
    raise ValueError(f"target {target} cannot be built yet (supported: llvm, c)")


def build(inputs, args=None, target="llvm", name: str = "main", target_host=None):
    """Compile a te schedule, a PrimFunc or an IRModule of PrimFuncs into a runtime.Module."""
    target = Target(target) if not isinstance(target, Target) else target
    if isinstance(inputs, te.Schedule):
        mod = lower(inputs, args, name=name)
    elif isinstance(inputs, tir.PrimFunc):
        mod = lower(inputs)
    elif isinstance(inputs, IRModule):
        mod = IRModule({n: optimize(f) for n, f in inputs})
    else:
        raise TypeError(
            f"build expects a te.Schedule, a tir.PrimFunc or an IRModule, got {type(inputs).__name__}"
        )
    return _codegen([f for _, f in mod], target)
