"""From PrimFuncs to a runtime.Module: one LLVM module, optimized at O3, JIT-compiled in process.

    mod = build_llvm([func], Target("llvm"))
    mod["myadd"](a, b, c);  mod.get_source("ll");  mod.export_library("add.so")

Each PrimFunc becomes the exported `int32 name(i8** buffers, i64* vars)` (tir/function.py),
which loads its arguments and calls the internal `name_compute` with noalias buffer pointers.
The object file is made once, position independent: the JIT loads that very object, and
`export_library` links it. The assembly is made only when asked for (`get_source("asm")`).
For a target this machine cannot run (another triple, or a CPU feature it lacks) nothing is
JIT-compiled: the module has its sources and object, and calling it raises RuntimeError.
"""

from __future__ import annotations

import functools
import threading

import llvmlite.binding as llvm
from llvmlite import ir

from tessera.codegen.common import function_info
from tessera.codegen.llvm import intrinsics
from tessera.codegen.llvm import types as T
from tessera.codegen.llvm.emitter import ModuleContext, define_kernel
from tessera.ir.dtype import float64
from tessera.target import Target
from tessera.tir.buffer import Buffer
from tessera.tir.function import PrimFunc

_lock = threading.Lock()

# Symbols the generated code may call: a kernel of that name would be called instead.
RESERVED_NAMES = frozenset(
    n + suffix
    for n in (*intrinsics.LIBM_NAMES, "exp", "exp2", "log", "log2", "log10", "sqrt", "sin", "cos")
    + ("pow", "fmod", "floor", "ceil", "trunc", "roundeven", "fma", "fabs", "memcpy", "memset")
    for suffix in ("", "f")
)


@functools.cache
def _initialize() -> None:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()


@functools.cache
def _target_machine(triple: str, cpu: str, features: str) -> llvm.TargetMachine:
    return _new_target_machine(triple, cpu, features)


def _new_target_machine(triple: str, cpu: str, features: str) -> llvm.TargetMachine:
    _initialize()
    try:
        target = llvm.Target.from_triple(triple)
    except RuntimeError as err:
        raise ValueError(f"LLVM cannot generate code for triple {triple!r}: {err}") from None
    return target.create_target_machine(
        cpu=cpu, features=features, opt=3, reloc="pic", codemodel="default"
    )


def target_machine(target: Target) -> llvm.TargetMachine:
    return _target_machine(target.llvm_triple, target.llvm_cpu, target.llvm_features)


def _narrow_var(b: ir.IRBuilder, raw: ir.Value, dt):
    """An int64 slot of the vars array as a value of dtype dt (floats arrive as float64 bits)."""
    if dt.is_float:
        return T.cast(b, b.bitcast(raw, ir.DoubleType()), float64, dt)
    if dt.is_bool:
        return b.icmp_unsigned("!=", raw, ir.Constant(T.I64, 0))
    return b.trunc(raw, T.llvm_type(dt)) if dt.bits < 64 else raw


def _buffer_alignment(func: PrimFunc, buf: Buffer) -> int:
    # The runtime accepts numpy arrays aligned only to their element size (packed_func.py,
    # Note [alignment of arguments]), so that is all the code may assume of a parameter.
    return buf.dtype.element.itemsize


def emit_prim_func(ctx: ModuleContext, func: PrimFunc) -> None:
    """Add `func` to ctx.module: its exported entry and its noalias compute kernel."""
    if func.name in ctx.module.globals:
        raise ValueError(f"two functions are named {func.name!r}; names must be unique")
    if func.name in RESERVED_NAMES or func.name.startswith("tessera_"):
        raise ValueError(
            f"a kernel cannot be named {func.name!r}: the C library or the tessera runtime "
            "has a function of that name, which the generated code may call"
        )
    ctx.unique_name(func.name)
    buffers = list(func.buffer_params)
    variables = list(func.scalar_vars())
    aligns = [_buffer_alignment(func, buf) for buf in buffers]
    kernel = define_kernel(
        ctx,
        ctx.unique_name(f"{func.name}.compute"),  # a '.' keeps internal names apart
        func.name,
        buffers,
        aligns,
        variables,
        [],
        lambda em, _: em.stmt(func.body),
    )
    i8pp, i64p = T.I8.as_pointer().as_pointer(), T.I64.as_pointer()
    entry = ir.Function(ctx.module, ir.FunctionType(T.I32, [i8pp, i64p]), func.name)
    entry.attributes.add("nounwind")
    args_ptr, vars_ptr = entry.args
    args_ptr.name, vars_ptr.name = "buffers", "vars"
    b = ir.IRBuilder(entry.append_basic_block("entry"))
    values = []
    for k, buf in enumerate(buffers):
        raw = b.load(b.gep(args_ptr, [ir.Constant(T.I64, k)]))
        values.append(b.bitcast(raw, T.storage_type(buf.dtype).as_pointer()))
    for j, var in enumerate(variables):
        raw = b.load(b.gep(vars_ptr, [ir.Constant(T.I64, j)]))
        values.append(_narrow_var(b, raw, var.dtype))
    b.ret(b.call(kernel, values))


def _optimize(module: llvm.ModuleRef, tm: llvm.TargetMachine) -> None:
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pto.loop_unrolling = True
    pto.loop_interleaving = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(module, pb)


def _fix_sve_length(module: ir.Module, target: Target) -> None:
    """On a target with a known SVE vector length, tell LLVM that length (vscale_range) in each
    function, so that vectors wider than NEON's 128 bits become SVE registers and instructions
    rather than pairs of NEON ones (Note [fixed-length SVE], tessera/topi/arm/strategy.py)."""
    bits = target.sve_vector_bits
    if bits is None:
        return
    attr = f"vscale_range({bits // 128},{bits // 128})"
    for fn in module.functions:
        if fn.blocks:  # llvmlite knows no vscale_range: add it past its list of known names
            set.add(fn.attributes, attr)


def _load_runtime_if_needed(text: str) -> None:
    """Load tessera_rt (RTLD_GLOBAL) when the code calls it, so the JIT resolves its symbols."""
    if "@tessera_" in text:
        from tessera.runtime import native

        native.load()


def compile_llvm(funcs: list[PrimFunc], target: Target):
    """Lower funcs to one optimized LLVM module: (ModuleRef, its IR text, object bytes, machine).

    The text is taken before code generation, which rewrites the module in place."""
    _initialize()
    tm = target_machine(target)
    name = funcs[0].name if funcs else "empty"
    module = ir.Module(name=name)
    module.triple = target.llvm_triple
    module.data_layout = str(tm.target_data)
    ctx = ModuleContext(module, target, fast_math=target.fast_math)
    for func in funcs:
        emit_prim_func(ctx, func)
    _fix_sve_length(module, target)
    parsed = llvm.parse_assembly(str(module))
    parsed.verify()
    _optimize(parsed, tm)
    text = str(parsed)
    return parsed, text, tm.emit_object(parsed), tm


def _jit(obj: bytes, target: Target, names: list[str]):
    """Load the object file into an MCJIT engine: (addresses by name, the engine)."""
    # the engine owns (and frees) its target machine, so it gets one of its own
    tm = _new_target_machine(target.llvm_triple, target.llvm_cpu, target.llvm_features)
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), tm)
    engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
    engine.finalize_object()
    addresses = {n: engine.get_function_address(n) for n in names}
    missing = [n for n, a in addresses.items() if not a]
    if missing:
        raise RuntimeError(f"the JIT found no code for {', '.join(missing)}")
    return addresses, engine


class _NotRunnable:
    """Stands in for a kernel compiled for another machine: it has its info, it cannot run."""

    def __init__(self, info, target: Target):
        self.info = info
        self.name = info.name
        self._target = target

    def __call__(self, *args):
        raise RuntimeError(
            f"{self.name} was compiled for target '{self._target}', which this machine cannot "
            "run; use export_library and run the library on such a machine"
        )


def compile_kernel(func: PrimFunc, target: Target):
    """The "llvm" kind's compile_kernel: one PrimFunc -> codegen.aot.CompiledKernel."""
    from tessera.codegen.aot import CompiledKernel

    with _lock:  # LLVM's global context is not for two threads
        _, text, obj, _ = compile_llvm([func], target)
    return CompiledKernel(func.name, function_info(func), bytes(obj), text)


def toolchain_identity() -> str:
    """What of the code generator decides the code, besides tessera: llvmlite's version."""
    import llvmlite

    return llvmlite.__version__


def build_llvm(funcs: list[PrimFunc], target="llvm"):
    """Compile PrimFuncs (after the tir passes) for an llvm target into a runtime.Module."""
    from tessera.runtime.module import Module

    target = target if isinstance(target, Target) else Target(target)
    if target.kind_info.build != "tessera.codegen.llvm.build:build_llvm":
        raise ValueError(f"build_llvm needs an llvm target, got '{target}'")
    funcs = list(funcs)
    if not funcs:
        raise ValueError("build_llvm: no functions to compile")
    with _lock:  # LLVM's global state (targets, JIT symbol lookup) is not for two threads
        module, ll, obj, tm = compile_llvm(funcs, target)
        sources = {"ll": ll, "asm": lambda: tm.emit_assembly(module)}
        infos = [function_info(f) for f in funcs]
        if not target.is_host:
            from tessera.cross.link import export_settings

            functions = {i.name: _NotRunnable(i, target) for i in infos}
            return Module(functions, sources, objects=[obj], **export_settings(target))
        _load_runtime_if_needed(ll)
        addresses, engine = _jit(obj, target, [f.name for f in funcs])
    return Module.from_addresses(addresses, infos, sources, objects=[obj], keepalive=engine)
