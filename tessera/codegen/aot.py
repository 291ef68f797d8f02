"""The native executor of a compiled model: kernels compiled one by one, and the generated entry
function that runs the executor plan's calls in sequence.

    kernel = compile_kernel(prim_func, target)       # CompiledKernel: info, object code, source
    lib, entry = link([kernel, ...], plan, target)   # runtime.Module + the entry's address

The entry (Note [executor plan] in runtime/graph_executor.py for the plan; symbol RUN_SYMBOL):

    int32_t tessera_model_run(void** inputs, void** outputs, const void* params, void* arena,
                              int64_t* call_ns);

calls every kernel of the plan, in order, with pointers into the inputs, the outputs, the weights
blob (`params` + byte offset) and the arena (`arena` + byte offset). It allocates nothing: the
arena is sized at compile time (plan["arena_nbytes"]) and owned by the caller. It returns 0, or
k + 1 when call k failed. When `call_ns` is not NULL, it also writes the duration of call k in
nanoseconds (a monotonic clock around the native call) into call_ns[k]: the per-op profile.

The entry is made by both code generators: LLVM IR (llvmlite) for "llvm", C for "c". The C entry
has a variant for small devices, compiled in with -DTESSERA_STATIC_ARENA: `tessera_model_run_static
(inputs, outputs)`, whose arena is a static array and whose weights are the linked symbol
`tessera_params`; -DTESSERA_NO_CLOCK drops the clock (call_ns is then left untouched).
Every kernel is its own object file, so each can be cached alone (codegen/cache.py).
"""

from __future__ import annotations

import hashlib
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tessera.runtime.function_info import FunctionInfo
from tessera.runtime.graph_executor import ENTRY_ARGS, PARAMS_SYMBOL, RUN_SYMBOL
from tessera.target import Target
from tessera.tir.function import PrimFunc

STATIC_RUN_SYMBOL = RUN_SYMBOL + "_static"


@dataclass(frozen=True)
class CompiledKernel:
    """One kernel compiled for a target: what the runtime checks calls against, the object
    code (position independent), and its source (optimized LLVM IR, or C)."""

    name: str
    info: FunctionInfo
    object: bytes
    source: str


# -- one kernel ---------------------------------------------------------------------------------


def compile_kernel(func: PrimFunc, target: Target) -> CompiledKernel:
    """Compile one PrimFunc (after the tir passes) to an object file for `target` (the target
    table's `compile_kernel` entry for its kind)."""
    return target.kind_info.resolve("compile_kernel")(func, target)


def compile_c_kernel(func: PrimFunc, target: Target) -> CompiledKernel:
    """The "c" kind's compile_kernel: C99 source, compiled by the system C compiler."""
    from tessera.codegen.c import emit_c
    from tessera.codegen.common import function_info
    from tessera.codegen.micro import emit_micro_c, is_micro, prepare_micro_kernel

    if is_micro(target):  # no threads, no heap: scratch buffers become workspaces
        func = prepare_micro_kernel(func)
    source = emit_micro_c(func) if is_micro(target) else emit_c([func])
    return CompiledKernel(func.name, function_info(func), compile_c_object(source, target), source)


def compile_c_object(source: str, target: Target, flags=()) -> bytes:
    """`source` compiled by the system C compiler (-c) with the target's flags: object bytes."""
    from tessera.codegen.c import CCompileError, compile_flags
    from tessera.runtime import cc, native

    with tempfile.TemporaryDirectory(prefix="tessera-obj-") as tmp:
        src, obj = Path(tmp) / "kernel.c", Path(tmp) / "kernel.o"
        src.write_text(source)
        cmd = [*cc.compiler_command(), *compile_flags(target), *flags]
        cmd += ["-I", str(native.include_dir()), "-c", str(src), "-o", str(obj)]
        try:
            cc.run_compiler(cmd)
        except RuntimeError as err:
            raise CCompileError(f"compiling generated C failed:\n{err}") from None
        return obj.read_bytes()


# -- the entry function ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Call:
    kernel: str
    args: tuple[tuple[str, int], ...]  # ("input"|"output", index) or ("param"|"arena", bytes)
    vars: tuple[int | tuple[str, int], ...]  # a constant, or ("dyn", slot of the arena's table)
    nodes: tuple[str, ...]


def entry_args(args, offsets: list[int]) -> tuple[tuple[str, int], ...]:
    """Plan arguments as (base, index or byte offset) of the entry."""
    out = []
    for kind, index in args:
        if kind not in ENTRY_ARGS:
            raise ValueError(f"executor plan: unknown argument kind {kind!r}")
        out.append((kind, offsets[index] if kind == "param" else int(index)))
    return tuple(out)


def entry_calls(plan: dict, offsets: list[int] | None = None) -> list:
    """The plan's calls with every argument as (base, index or byte offset) of the entry: a
    `_Call` per kernel call, the plan's dict for a control call (codegen/aot_control.py).
    `offsets`: the weights' offsets (a sub-function's plan shares its model's)."""
    if offsets is None:
        offsets = [int(p["offset"]) for p in plan["params"]]
    calls = []
    for call in plan["calls"]:
        if "control" in call:
            calls.append(call)
            continue
        args = entry_args(call["args"], offsets)
        nodes = tuple(call.get("nodes", ()))
        values = tuple(v if isinstance(v, int) else tuple(v) for v in call.get("vars", ()))
        calls.append(_Call(call["kernel"], args, values, nodes))
    return calls


def _comment(call: _Call, k: int) -> str:
    text = f"call {k}: {call.kernel}" + (f" ({', '.join(call.nodes)})" if call.nodes else "")
    return text.replace("*/", "* /").replace("\n", " ")


def emit_entry_c(plan: dict) -> str:
    """The C source of the entry (see the module docstring)."""
    from tessera.codegen import aot_control

    calls = entry_calls(plan)
    offsets = [int(p["offset"]) for p in plan["params"]]
    sub_calls = [entry_calls(f, offsets) for f in plan.get("functions", ())]
    every = [c for cs in [calls, *sub_calls] for c in cs if isinstance(c, _Call)]
    kernels = list(dict.fromkeys(c.kernel for c in every))
    lines = [
        "/* Generated by tessera: the executor of a compiled model (codegen/aot.py). */",
        "#if !defined(TESSERA_NO_CLOCK) && !defined(_POSIX_C_SOURCE)",
        "#define _POSIX_C_SOURCE 199309L",
        "#endif",
        "#include <stddef.h>",
        "#include <stdint.h>",
        "#include <string.h>",
        "#ifndef TESSERA_NO_CLOCK",
        "#include <time.h>",
        "static int64_t tessera_model_now_ns(void) {",
        "    struct timespec t;",
        "    clock_gettime(CLOCK_MONOTONIC, &t);",
        "    return (int64_t)t.tv_sec * 1000000000 + (int64_t)t.tv_nsec;",
        "}",
        "#define TESSERA_TIME(x) if (call_ns) x = tessera_model_now_ns()",
        "#else",
        "#define TESSERA_TIME(x) (void)0",
        "#endif",
        "",
        *[f"int32_t {k}(void** buffers, int64_t* vars);" for k in kernels],
        *aot_control.c_declarations(plan),
        "",
    ]
    signature = "(void** inputs, void** outputs, const void* params, void* arena, int64_t* call_ns)"
    for k, cs in enumerate(sub_calls, start=1):
        lines += [f"static int32_t {aot_control.FUNCTION_SYMBOL.format(k)}{signature} {{"]
        lines += _c_body(cs, plan) + [""]
    lines += [f"int32_t {RUN_SYMBOL}{signature} {{", *_c_body(calls, plan), ""]
    if "dynamic" in plan:  # its arena is laid out per call (Note [dynamic plan]): no static one
        msg = "a model with symbolic dims has no static arena: give its dims sizes"
        return "\n".join([*lines, "#ifdef TESSERA_STATIC_ARENA", f'#error "{msg}"', "#endif", ""])
    arena = max(int(plan["arena_nbytes"]), 1)
    params = f"extern const uint8_t {PARAMS_SYMBOL}[];" if plan["params_nbytes"] else ""
    lines += [
        "#ifdef TESSERA_STATIC_ARENA",
        "/* For devices without malloc: the arena is a static array, the weights are linked. */",
        params,
        "#if defined(__GNUC__) || defined(__clang__)",
        f"static uint8_t tessera_model_arena[{arena}] __attribute__((aligned(64)));",
        "#else",
        f"static uint8_t tessera_model_arena[{arena}];",
        "#endif",
        f"int32_t {STATIC_RUN_SYMBOL}(void** inputs, void** outputs) {{",
        f"    return {RUN_SYMBOL}(inputs, outputs, {PARAMS_SYMBOL if params else 'NULL'}, "
        "tessera_model_arena, NULL);",
        "}",
        "#endif",
        "",
    ]
    return "\n".join(lines)


C_BASE = {
    "input": "inputs[{}]",
    "output": "outputs[{}]",
    "param": "(void*)(P + {})",
    "arena": "(void*)(A + {})",
    "dyn": "(void*)(A + ((const int64_t*)arena)[{}])",  # Note [dynamic plan]
}


def _c_body(calls: list, plan: dict) -> list[str]:
    """The C statements of one function of the plan: its calls in order, then `}`."""
    from tessera.codegen import aot_control

    kernel_calls = [c for c in calls if isinstance(c, _Call)]
    nbuf = max([len(c.args) for c in kernel_calls] + [1])
    nvar = max([len(c.vars) for c in kernel_calls] + [1])
    lines = [
        f"    void* b[{nbuf}];",
        f"    int64_t v[{nvar}];",
        "    const uint8_t* P = (const uint8_t*)params;",
        "    uint8_t* A = (uint8_t*)arena;",
        "    int64_t t0 = 0, t1 = 0;",
        "    (void)P; (void)A; (void)b; (void)v; (void)t0; (void)t1; (void)inputs; (void)outputs;",
    ]
    for k, call in enumerate(calls):
        if not isinstance(call, _Call):
            lines.append("    TESSERA_TIME(t0);")
            lines += aot_control.c_control(call, k, plan)
            lines.append("    TESSERA_TIME(t1);")
            lines.append(f"    if (call_ns) call_ns[{k}] = t1 - t0;")
            continue
        lines.append(f"    /* {_comment(call, k)} */")
        for i, (kind, x) in enumerate(call.args):
            lines.append(f"    b[{i}] = {C_BASE[kind].format(x)};")
        lines += [
            f"    v[{i}] = ((const int64_t*)arena)[{x[1]}];"
            if isinstance(x, tuple)
            else f"    v[{i}] = INT64_C({int(x)});"
            for i, x in enumerate(call.vars)
        ]
        lines.append("    TESSERA_TIME(t0);")
        lines.append(f"    if ({call.kernel}(b, v) != 0) return {k + 1};")
        lines.append("    TESSERA_TIME(t1);")
        lines.append(f"    if (call_ns) call_ns[{k}] = t1 - t0;")
    return lines + ["    return 0;", "}"]


def emit_entry_llvm(plan: dict, target: Target) -> str:
    """The LLVM IR text of the entry (see the module docstring)."""
    from llvmlite import ir

    from tessera.codegen import aot_control
    from tessera.codegen.llvm import build as B

    calls = entry_calls(plan)
    module = ir.Module(name="tessera_model")
    module.triple = target.llvm_triple
    with B._lock:
        module.data_layout = str(B.target_machine(target).target_data)
    i8p = ir.IntType(8).as_pointer()
    i64 = ir.IntType(64)
    args = [i8p.as_pointer(), i8p.as_pointer(), i8p, i8p, i64.as_pointer()]
    fn = ir.Function(module, ir.FunctionType(ir.IntType(32), args), RUN_SYMBOL)
    fn.attributes.add("nounwind")
    for a, name in zip(fn.args, ("inputs", "outputs", "params", "arena", "call_ns"), strict=True):
        a.name = name
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    slots = _llvm_slots(b, calls)
    now = _llvm_clock(module, target)
    timed = b.icmp_unsigned("!=", fn.args[4], ir.Constant(i64.as_pointer(), None))
    fast, slow = fn.append_basic_block("run"), fn.append_basic_block("run_timed")
    b.cbranch(timed, slow, fast)
    kernels: dict[str, ir.Function] = {}
    subs = aot_control.declare_functions(module, fn.function_type, plan)
    for block, clock in ((fast, None), (slow, now)):
        b.position_at_end(block)
        for k, call in enumerate(calls):
            if isinstance(call, _Call):
                _llvm_call(b, fn, slots, kernels, call, k, clock)
            else:
                aot_control.llvm_control(b, fn, subs, call, k, clock, plan)
        b.ret(ir.Constant(ir.IntType(32), 0))
    offsets = [int(p["offset"]) for p in plan["params"]]
    for sub, sub_plan in zip(subs, plan.get("functions", ()), strict=True):
        b = ir.IRBuilder(sub.append_basic_block("entry"))
        sub_calls = entry_calls(sub_plan, offsets)
        sub_slots = _llvm_slots(b, sub_calls)
        for k, call in enumerate(sub_calls):
            if isinstance(call, _Call):
                _llvm_call(b, sub, sub_slots, kernels, call, k, None)
            else:
                aot_control.llvm_control(b, sub, subs, call, k, None, plan)
        b.ret(ir.Constant(ir.IntType(32), 0))
    return str(module)


def _llvm_slots(b, calls):
    """The entry's stack arrays of kernel arguments: buffers and vars."""
    from llvmlite import ir

    kernel_calls = [c for c in calls if isinstance(c, _Call)]
    nbuf = max([len(c.args) for c in kernel_calls] + [1])
    nvar = max([len(c.vars) for c in kernel_calls] + [1])
    return (
        b.alloca(ir.ArrayType(ir.IntType(8).as_pointer(), nbuf), name="b"),
        b.alloca(ir.ArrayType(ir.IntType(64), nvar), name="v"),
    )


def llvm_arg(b, fn, kind: str, x: int):
    """The i8* of an entry argument (base, index or byte offset) in function `fn`."""
    from llvmlite import ir

    inputs, outputs, params, arena, _ = fn.args
    if kind in ("input", "output"):
        table = inputs if kind == "input" else outputs
        return b.load(b.gep(table, [ir.Constant(ir.IntType(64), x)]))
    if kind == "dyn":  # arena + table[x] (Note [dynamic plan] in runtime/shape_expr.py)
        return b.gep(arena, [llvm_table(b, fn, x)])
    return b.gep(params if kind == "param" else arena, [ir.Constant(ir.IntType(64), x)])


def llvm_table(b, fn, slot: int):
    """The i64 in slot `slot` of the table at the start of the arena."""
    from llvmlite import ir

    i64 = ir.IntType(64)
    table = b.bitcast(fn.args[3], i64.as_pointer())
    return b.load(b.gep(table, [ir.Constant(i64, slot)]))


def _llvm_call(b, fn, slots, kernels, call: _Call, k: int, clock) -> None:
    """Store call k's arguments, call its kernel (timed when `clock`), return k + 1 on failure."""
    from llvmlite import ir

    i8, i32, i64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
    call_ns = fn.args[4]
    bufs, values = slots
    zero = ir.Constant(i32, 0)
    for i, (kind, x) in enumerate(call.args):
        b.store(llvm_arg(b, fn, kind, x), b.gep(bufs, [zero, ir.Constant(i32, i)]))
    for i, x in enumerate(call.vars):
        value = llvm_table(b, fn, x[1]) if isinstance(x, tuple) else ir.Constant(i64, int(x))
        b.store(value, b.gep(values, [zero, ir.Constant(i32, i)]))
    if call.kernel not in kernels:
        ty = ir.FunctionType(i32, [i8.as_pointer().as_pointer(), i64.as_pointer()])
        kernels[call.kernel] = ir.Function(fn.module, ty, call.kernel)
    start = b.call(clock, []) if clock else None
    rc = b.call(kernels[call.kernel], [b.gep(bufs, [zero, zero]), b.gep(values, [zero, zero])])
    failed, ok = fn.append_basic_block(f"fail{k}"), fn.append_basic_block(f"ok{k}")
    b.cbranch(b.icmp_signed("!=", rc, ir.Constant(i32, 0)), failed, ok)
    b.position_at_end(failed)
    b.ret(ir.Constant(i32, k + 1))
    b.position_at_end(ok)
    if clock:
        elapsed = b.sub(b.call(clock, []), start)
        b.store(elapsed, b.gep(call_ns, [ir.Constant(i64, k)]))


# CLOCK_MONOTONIC's value in <time.h>, by OS
_MONOTONIC = {"darwin": 6, "macos": 6, "linux": 1}


def _llvm_clock(module, target: Target):
    """An internal `i64 now_ns()` over clock_gettime(CLOCK_MONOTONIC)."""
    from llvmlite import ir

    i32, i64 = ir.IntType(32), ir.IntType(64)
    pointer_bits = 64 if "64" in target.llvm_triple.split("-")[0] else 32
    word = ir.IntType(pointer_bits)  # time_t and long of the platform
    timespec = ir.LiteralStructType([word, word])
    gettime = ir.Function(
        module, ir.FunctionType(i32, [i32, timespec.as_pointer()]), "clock_gettime"
    )
    fn = ir.Function(module, ir.FunctionType(i64, []), "tessera_model_now_ns")
    fn.linkage = "internal"
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    t = b.alloca(timespec)
    os_name = next((o for o in _MONOTONIC if o in target.llvm_triple), "linux")
    b.call(gettime, [ir.Constant(i32, _MONOTONIC[os_name]), t])
    zero = ir.Constant(i32, 0)
    sec = b.load(b.gep(t, [zero, zero]))
    nsec = b.load(b.gep(t, [zero, ir.Constant(i32, 1)]))
    if pointer_bits < 64:
        sec, nsec = b.sext(sec, i64), b.sext(nsec, i64)
    b.ret(b.add(b.mul(sec, ir.Constant(i64, 1_000_000_000)), nsec))
    return fn


# -- linking ------------------------------------------------------------------------------------


def link(kernels: list[CompiledKernel], plan: dict, target: Target):
    """(runtime.Module of the kernels, address of the entry or None when it cannot run here).

    The row's `link` step, or its `cross_link` for a target of another architecture.

    The plan gains "entry": the entry's symbol, which a loaded library is asked for."""
    if not kernels:
        raise ValueError("link: no kernels")
    plan["entry"] = RUN_SYMBOL
    step = "link"
    if target.kind_info.cross_link is not None:
        from tessera.cross.toolchain import is_foreign

        step = "cross_link" if is_foreign(target) else "link"
    return target.kind_info.resolve(step)(kernels, plan, target)


def link_llvm(kernels: list[CompiledKernel], plan: dict, target: Target):
    import llvmlite.binding as llvm

    from tessera.codegen.llvm import build as B
    from tessera.runtime import native
    from tessera.runtime.module import Module

    entry_ll = emit_entry_llvm(plan, target)
    infos = [k.info for k in kernels]
    with B._lock:
        tm = B.target_machine(target)
        entry_obj = bytes(tm.emit_object(llvm.parse_assembly(entry_ll)))
    objects = [k.object for k in kernels] + [entry_obj]
    texts = [k.source for k in kernels] + [entry_ll]
    sources = {"ll": "\n".join(texts), "asm": lambda: _assembly(texts, target)}
    if not target.is_host:
        functions = {i.name: B._NotRunnable(i, target) for i in infos}
        metadata = {"target": target_description(target)}
        return Module(functions, sources, objects=objects, metadata=metadata), None
    native.load()  # kernels and the entry's clock resolve against the process
    with B._lock:
        engine = _engine(objects, target)
        addresses = {i.name: engine.get_function_address(i.name) for i in infos}
        entry = engine.get_function_address(RUN_SYMBOL)
    missing = [n for n, a in addresses.items() if not a] + ([] if entry else [RUN_SYMBOL])
    if missing:
        raise RuntimeError(f"the JIT found no code for {', '.join(missing)}")
    module = Module.from_addresses(
        addresses,
        infos,
        sources,
        objects=objects,
        keepalive=engine,
        metadata={"target": target_description(target)},
    )
    return module, entry


def _engine(objects: list[bytes], target: Target):
    import llvmlite.binding as llvm

    from tessera.codegen.llvm import build as B

    # the engine owns (and frees) its target machine, so it gets one of its own
    tm = B._new_target_machine(target.llvm_triple, target.llvm_cpu, target.llvm_features)
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), tm)
    for obj in objects:  # symbols resolve across the objects of one engine first
        engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
    engine.finalize_object()
    return engine


def _assembly(texts: list[str], target: Target) -> str:
    import llvmlite.binding as llvm

    from tessera.codegen.llvm import build as B

    with B._lock:
        tm = B.target_machine(target)
        return "\n".join(tm.emit_assembly(llvm.parse_assembly(t)) for t in texts)


def link_c(kernels: list[CompiledKernel], plan: dict, target: Target):
    from tessera.codegen.c import compile_flags
    from tessera.runtime import artifact, cc, config, native
    from tessera.runtime.module import Module

    entry_c = emit_entry_c(plan)
    flags = compile_flags(target)
    digest = hashlib.sha256()
    for part in [*cc.compiler_command(), *flags, entry_c, str(target)]:
        digest.update(part.encode() + b"\0")
    for k in kernels:
        digest.update(hashlib.sha256(k.object).digest())
    folder = config.cache_dir() / "c"
    library = folder / f"model-{digest.hexdigest()[:20]}.so"

    def build(output):
        with tempfile.TemporaryDirectory(prefix="tessera-link-") as tmp:
            objs = []
            for i, k in enumerate(kernels):
                objs.append(Path(tmp) / f"k{i}.o")
                objs[-1].write_bytes(k.object)
            entry_src = Path(tmp) / "entry.c"
            entry_src.write_text(entry_c)
            cc.compile_shared(output, sources=[entry_src], objects=objs, flags=flags)

    library = artifact.cached_library(library, build, target_description(target))
    native.load()
    sources = {"c": "\n".join([k.source for k in kernels] + [entry_c])}
    objects = [k.object for k in kernels]
    module = Module.from_library(
        str(library),
        [k.info for k in kernels],
        sources,
        c_sources=[entry_c],
        objects=objects,
        metadata={"target": target_description(target)},
        key=config.cache_secret(),
    )
    return module, _symbol_address(module.library_path, RUN_SYMBOL)


def target_description(target: Target) -> dict:
    """What an artifact's header says of its target: what a loader checks the host against."""
    if target.device == "micro":  # the host build of a microcontroller's C: portable C for here
        target = Target("c")
    return {
        "target": str(target),
        "triple": target.llvm_triple,
        "cpu": target.llvm_cpu,
        "features": sorted(target.features),
    }


def _symbol_address(library: str, name: str) -> int:
    import ctypes

    from tessera.runtime.module import library as open_library

    lib = open_library(library)  # the handle from_library opened (Note [library handles])
    return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
