"""The C code generator (target "c"): PrimFuncs -> readable C99 -> a shared library, loaded.

    src = emit_c([func])               # the C text
    mod = build_c([func], Target("c"))  # compiled with the system compiler: a runtime.Module

Each PrimFunc becomes `int32_t name(void** buffers, int64_t* vars)` (docs/architecture.md): it
unpacks its buffers and vars, then runs its body as plain loops. A PARALLEL loop's body is
outlined into `static int32_t name_par_N(int64_t begin, int64_t end, void* closure)`, whose
closure struct holds the buffers and variables it uses, and run by `tessera_parallel_for`.
Vector code is scalarized into short loops over lanes (the C compiler vectorizes them again).
The generated code needs math.h and the runtime library only, so it also suits small devices.
Expressions are printed by `c_expr`; the fixed header and helpers live in `c_prelude`.
"""

from __future__ import annotations

import hashlib
import platform
import re
from contextlib import contextmanager
from pathlib import Path

from tessera.codegen import c_prelude
from tessera.codegen.c_expr import (
    ADD,
    RESERVED,
    UNARY,
    ExprPrinter,
    is_float16,
    storage_type,
    value_type,
    wrap,
)
from tessera.codegen.common import closure_of, function_info
from tessera.ir.node import Mutator
from tessera.tir import expr as E
from tessera.tir import stmt as S
from tessera.tir.buffer import Buffer
from tessera.tir.function import PrimFunc
from tessera.tir.stmt_functor import collect, free_vars, uses_var

# Larger "local" allocations go to the heap: thread stacks are small (and tiny on devices).
STACK_LIMIT_BYTES = 64 * 1024
# Names the generated functions use for themselves.
_OWN_NAMES = {"buffers", "vars", "begin", "end", "closure", "env"}
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class CCompileError(RuntimeError):
    """The system C compiler rejected generated code (the message has its output and the file)."""


# -- names ----------------------------------------------------------------------------------


class _Names:
    """C names for Vars and Buffers: sanitized (`i.outer` -> `i_outer`), unique per function."""

    def __init__(self, reserved: set[str], reserved_prefixes: tuple[str, ...]):
        self.taken = set(reserved)
        self.prefixes = reserved_prefixes
        self.by_id: dict[int, tuple[object, str]] = {}  # the object is kept so ids stay unique

    def rename(self, obj) -> str:
        """A new name for `obj` from here on (it is declared again, e.g. in an unrolled copy)."""
        self.by_id[id(obj)] = (obj, self.fresh(obj.name))
        return self.by_id[id(obj)][1]

    def get(self, obj) -> str:
        hit = self.by_id.get(id(obj))
        if hit is None:
            hit = self.by_id[id(obj)] = (obj, self.fresh(obj.name))
        return hit[1]

    def fresh(self, hint: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_]", "_", hint) or "v"
        if not re.match(r"[A-Za-z]", base):
            base = "v" + base
        if base.startswith(self.prefixes):
            base = "v_" + base
        name, k = base, 0
        while name in self.taken:
            k += 1
            name = f"{base}_{k}"
        self.taken.add(name)
        return name


# -- statements -----------------------------------------------------------------------------


class _HoistLets(Mutator):
    """Move the Lets of an expression into declarations before the statement that uses it.

    Lets inside the branches of if_then_else stay (the printer inlines them): declaring them
    early would evaluate what the condition guards.
    """

    def __init__(self, emitter: _FunctionEmitter):
        self.emitter = emitter

    def visit_Let(self, e: E.Let):
        self.emitter.declare(e.var, self.visit(e.value), e.body)
        return self.visit(e.body)

    def visit_Call(self, e: E.Call):
        if e.op != "if_then_else":
            return self.generic_visit(e)
        cond = self.visit(e.args[0])
        return e if cond is e.args[0] else E.Call(e.dtype, e.op, (cond, *e.args[1:]))


class _FunctionEmitter:
    """Emits one PrimFunc: its outlined parallel bodies, then the function itself."""

    def __init__(self, func: PrimFunc, helpers: set[str], names: _Names):
        self.func = func
        self.names = names
        self.exprs = ExprPrinter(names, helpers)
        self.lines: list[str] = []
        self.depth = 0
        self.outlined: list[str] = []
        self.n_parallel = 0
        self.scope: set[int] = set()  # ids of the buffers declared where code is being emitted
        self.declared: set[int] = set()  # ids of the Vars and Buffers declared so far
        self.lane = ""

    # -- output ---------------------------------------------------------------------------

    def line(self, text: str) -> None:
        self.lines.append("  " * self.depth + text)

    @contextmanager
    def block(self, head: str):
        self.line(head + " {")
        self.depth += 1
        yield
        self.depth -= 1
        self.line("}")

    def declare_name(self, obj) -> str:
        """The C name for a declaration of `obj`: fresh when `obj` was declared before, as the
        copies of an unrolled loop body declare the same Vars and Buffers in one C block."""
        if id(obj) in self.declared:
            return self.names.rename(obj)
        self.declared.add(id(obj))
        return self.names.get(obj)

    def lane_loop(self, lanes: int):
        return self.block(f"for (int32_t {self.lane} = 0; {self.lane} < {lanes}; ++{self.lane})")

    # -- the function ---------------------------------------------------------------------

    def emit(self) -> str:
        func = self.func
        for p in func.params:  # parameters get the plain names
            self.names.get(p)
        for v in func.scalar_vars():
            self.names.get(v)
            if not any(v is p for p in func.params):  # a shape variable: sizes are >= 0
                self.exprs.nonneg_vars.add(id(v))
        self.lane = self.names.fresh("lane")
        self.depth = 1
        self.scope = {id(b) for b in func.buffer_params}
        self.stmt(func.body)
        self.line("return 0;")
        body, self.lines = self.lines, []
        self.unpack_params(_used(func.body))
        head = [self.signature_comment(), f"int32_t {func.name}(void** buffers, int64_t* vars) {{"]
        return "\n\n".join([*self.outlined, "\n".join([*head, *self.lines, *body, "}"])])

    def signature_comment(self) -> str:
        parts = []
        for p in self.func.params:
            if isinstance(p, Buffer):
                dims = ", ".join(self.exprs.text(E.convert(d)) for d in self.func.param_shape(p))
                parts.append(f"{p.name}: {p.dtype}[{dims}]")
            else:
                parts.append(f"{p.name}: {p.dtype}")
        return f"/* {self.func.name}({', '.join(parts)}) */"

    def unpack_params(self, used: set[int]) -> None:
        for k, buf in enumerate(self.func.buffer_params):
            if id(buf) in used:
                ctype = storage_type(buf.dtype)
                self.line(f"{ctype}* restrict {self.names.get(buf)} = ({ctype}*)buffers[{k}];")
        for k, var in enumerate(self.func.scalar_vars()):
            if id(var) in used:
                self.line(
                    f"{value_type(var.dtype)} {self.names.get(var)} = {self.var_value(var, k)};"
                )

    def var_value(self, var: E.Var, k: int) -> str:
        dt = var.dtype
        if dt.is_handle or dt.lanes > 1:
            raise ValueError(
                f"{self.func.name}: parameter {var.name} of type {dt} is not supported"
            )
        if dt.is_bool:
            return f"vars[{k}] != 0"
        if dt.is_float:
            self.exprs.helpers.add("bits_to_f64")
            value = f"tessera_bits_to_f64(vars[{k}])"
            if is_float16(dt):
                tag = "bf16" if dt.code == "bfloat" else "f16"
                self.exprs.helpers.update({f"f64_to_{tag}", f"{tag}_to_f32"})
                return f"tessera_{tag}_to_f32(tessera_f64_to_{tag}({value}))"
            return value if dt.bits == 64 else f"(float){value}"
        return f"({value_type(dt)})vars[{k}]"

    # -- statements -----------------------------------------------------------------------

    def stmt(self, s: S.Stmt) -> None:
        method = getattr(self, "_" + type(s).__name__, None)
        if method is None:
            raise ValueError(f"the C code generator cannot emit a {type(s).__name__} statement")
        method(s)

    def _SeqStmt(self, s: S.SeqStmt) -> None:
        for child in s.seq:
            self.stmt(child)

    def _AttrStmt(self, s: S.AttrStmt) -> None:
        self.stmt(s.body)  # annotations carry no meaning for C

    def _Evaluate(self, s: S.Evaluate) -> None:
        value = self.hoist(s.value)
        if isinstance(value, E.Call) and value.op == "prefetch":
            # a hint for compilers that have it, nothing for the others (C has no prefetch)
            self.lines.append("#if defined(__GNUC__)")
            self.line(f"{self.exprs.text(value)};")
            self.lines.append("#endif")
            return
        if not isinstance(value, (E.IntImm, E.FloatImm)) and value.dtype.lanes == 1:
            self.line(f"(void)({self.exprs.text(value)});")

    def _LetStmt(self, s: S.LetStmt) -> None:
        self.declare(s.var, self.hoist(s.value), s.body)
        self.stmt(s.body)

    def declare(self, var: E.Var, value: E.Expr, body) -> None:
        """`T var = value;` (an array filled lane by lane for a vector), unless body ignores it."""
        if not uses_var(body, var):
            return  # tir expressions are pure: an unused value need not be computed
        name, ctype = self.declare_name(var), value_type(value.dtype)
        lanes = value.dtype.lanes
        if lanes == 1:
            self.line(f"{ctype} {name} = {self.exprs.text(value)};")
            if value.dtype.is_integer and self.exprs.nonneg(value):
                self.exprs.nonneg_vars.add(id(var))
            return
        self.line(f"{ctype} {name}[{lanes}];")
        with self.lane_loop(lanes):
            self.line(f"{name}[{self.lane}] = {self.exprs.text(value, self.lane)};")
        self.exprs.vector_vars.add(id(var))

    def hoist(self, e: E.Expr) -> E.Expr:
        if not collect(e, lambda n: isinstance(n, E.Let)):
            return e
        return _HoistLets(self).visit(e)

    def _IfThenElse(self, s: S.IfThenElse) -> None:
        cond = self.hoist(s.condition)
        if cond.dtype.lanes > 1:
            raise ValueError(f"an if statement needs a scalar condition, got {cond.dtype}")
        with self.block(f"if ({self.exprs.text(cond)})"):
            self.stmt(s.then_case)
        if s.else_case is not None:
            self.lines.pop()
            with self.block("} else"):
                self.stmt(s.else_case)

    def _BufferStore(self, s: S.BufferStore) -> None:
        buf = self.check_buffer(s.buffer, len(s.indices))
        value, index = self.hoist(s.value), self.hoist(s.indices[0])
        lanes = max(value.dtype.lanes, index.dtype.lanes)
        if lanes == 1:
            self.line(f"{buf}[{self.exprs.text(index)}] = {self.store_value(s, value, None)};")
            return
        # a vector store writes after all its lanes are read: where lanes could see each
        # other's writes, read them into temporaries first
        if index.dtype.lanes > 1 and _loads(index, s.buffer):
            temp = E.Var(f"{s.buffer.name}_index", index.dtype)
            self.declare(temp, index, temp)
            index = temp
        if _reads_elsewhere(value, s.buffer, index):
            temp = E.Var(f"{s.buffer.name}_value", value.dtype)
            self.declare(temp, value, temp)
            value = temp
        with self.lane_loop(lanes):
            target = f"{buf}[{self.exprs.text(index, self.lane)}]"
            self.line(f"{target} = {self.store_value(s, value, self.lane)};")

    def store_value(self, s: S.BufferStore, value: E.Expr, lane) -> str:
        if is_float16(s.buffer.dtype):
            return self.exprs.store_bits(value, lane)
        return self.exprs.text(value, lane)

    def check_buffer(self, buf: Buffer, n_indices: int) -> str:
        if id(buf) not in self.scope:
            raise ValueError(
                f"{self.func.name}: buffer {buf.name} is used but is neither a parameter nor "
                "allocated around its use"
            )
        if n_indices != 1:
            raise ValueError(
                f"buffer {buf.name} is indexed with {n_indices} indices; the C code generator "
                "takes flattened buffers (run flatten_storage first)"
            )
        if buf.dtype.lanes > 1:
            raise ValueError(f"buffer {buf.name} has vector dtype {buf.dtype}; not supported")
        return self.names.get(buf)

    def _Allocate(self, s: S.Allocate) -> None:
        buf = s.buffer
        count = self.hoist(_num_elements(buf))
        name, ctype = self.declare_name(buf), storage_type(buf.dtype)
        itemsize = buf.dtype.itemsize
        self.scope.add(id(buf))
        on_stack = isinstance(count, E.IntImm) and count.value * itemsize <= STACK_LIMIT_BYTES
        if buf.scope == "local" and on_stack:
            self.line(f"TESSERA_ALIGNED(64) {ctype} {name}[{count.value}];")
            self.stmt(s.body)
            return
        if isinstance(count, E.IntImm):
            nbytes = str(count.value * itemsize)
        else:
            nbytes = f"(int64_t){wrap(self.exprs.p(count, None), UNARY)} * {itemsize}"
        self.line(f"{ctype}* restrict {name} = ({ctype}*)tessera_alloc({nbytes});")
        with self.block(f"if ({name} == NULL)"):
            self.line("return -1;")
        self.stmt(s.body)
        self.line(f"tessera_free({name});")

    # -- loops ----------------------------------------------------------------------------

    def _For(self, s: S.For) -> None:
        if s.kind == S.ForKind.THREAD_BINDING:
            raise ValueError(
                f"loop {s.loop_var.name} is bound to {s.thread_tag or 'a thread'}: thread "
                "bindings need a GPU target, not target 'c'"
            )
        if s.kind == S.ForKind.PARALLEL:
            self.parallel(s)
            return
        # VECTORIZED / UNROLLED loops that reach here run as plain loops (the C compiler
        # vectorizes and unrolls by itself)
        var, dt = s.loop_var, s.loop_var.dtype
        lo, extent = _as(self.hoist(s.min), dt), _as(self.hoist(s.extent), dt)
        hi = extent if _is_zero(lo) else E.Add(lo, extent)
        if self.exprs.nonneg(lo):
            self.exprs.nonneg_vars.add(id(var))
        name = self.names.get(var)
        head = f"for ({value_type(dt)} {name} = {self.exprs.text(lo)}; {name} < "
        with self.block(f"{head}{self.exprs.text(hi)}; ++{name})"):
            self.stmt(s.body)

    def parallel(self, loop: S.For) -> None:
        """Outline the body into `<func>_par_<N>` and call it with tessera_parallel_for."""
        fn = f"{self.func.name}_par_{self.n_parallel}"
        self.n_parallel += 1
        captured = self.captures(loop)
        extent = self.exprs.text(self.hoist(loop.extent))
        saved = (self.lines, self.depth, set(self.scope))
        self.lines, self.depth = [], 0
        self.outline(fn, loop, captured)
        self.outlined.append("\n".join(self.lines))
        self.lines, self.depth, self.scope = saved
        closure = self.names.fresh(f"{self.names.get(loop.loop_var)}_closure")
        inits = ", ".join(f".{self.names.get(x)} = {self.names.get(x)}" for x in captured)
        self.line(f"{fn}_closure {closure} = {{{inits or '0'}}};")
        with self.block(f"if (tessera_parallel_for({extent}, {fn}, &{closure}) != 0)"):
            self.line("return -1;")

    def captures(self, loop: S.For) -> list:
        """The buffers, then the variables, that the body (and the loop's min) use from outside."""
        body_vars, buffers = closure_of(loop.body, exclude=(loop.loop_var,))
        variables = {id(v): v for v in free_vars(loop.min)}
        for v in body_vars:
            variables.setdefault(id(v), v)
        variables.pop(id(loop.loop_var), None)
        return [*buffers, *variables.values()]

    def field_decl(self, x) -> str:
        name = self.names.get(x)
        if isinstance(x, Buffer):
            return f"{storage_type(x.dtype)}* restrict {name}"
        if id(x) in self.exprs.vector_vars:
            return f"{value_type(x.dtype)}* {name}"
        return f"{value_type(x.dtype)} {name}"

    def outline(self, fn: str, loop: S.For, captured: list) -> None:
        self.line("typedef struct {")
        for x in captured:
            self.line(f"  {self.field_decl(x)};")
        if not captured:
            self.line("  char unused;  /* C99 has no empty structs */")
        self.line(f"}} {fn}_closure;")
        self.line("")
        self.line(f"/* The body of parallel loop {self.names.get(loop.loop_var)}. */")
        with self.block(f"static int32_t {fn}(int64_t begin, int64_t end, void* closure)"):
            if captured:
                self.line(f"const {fn}_closure* env = (const {fn}_closure*)closure;")
            else:
                self.line("(void)closure;")
            for x in captured:
                self.line(f"{self.field_decl(x)} = env->{self.names.get(x)};")
            self.scope = {id(x) for x in captured if isinstance(x, Buffer)}
            var, dt = loop.loop_var, loop.loop_var.dtype
            lo = _as(self.hoist(loop.min), dt)
            offset = "" if _is_zero(lo) else f" + {wrap(self.exprs.p(lo, None), ADD + 1)}"
            if self.exprs.nonneg(lo):
                self.exprs.nonneg_vars.add(id(var))
            name, ctype = self.names.get(var), value_type(dt)
            head = f"for ({ctype} {name} = ({ctype})begin{offset}; {name} < ({ctype})end{offset}"
            with self.block(f"{head}; ++{name})"):
                self.stmt(loop.body)
            self.line("return 0;")


def _as(e: E.Expr, dt) -> E.Expr:
    if e.dtype == dt:
        return e
    return E.IntImm(e.value, dt) if isinstance(e, E.IntImm) else E.Cast(dt, e)


def _num_elements(buf: Buffer) -> E.Expr:
    dims = [d for d in buf.shape if not (isinstance(d, E.IntImm) and d.value == 1)]
    if not dims:
        return E.IntImm(1)
    count = dims[0]
    for d in dims[1:]:
        count = count * d
    return count


def _is_zero(e: E.Expr) -> bool:
    return isinstance(e, E.IntImm) and e.value == 0


def _loads(e: E.Expr, buf: Buffer) -> list[E.BufferLoad]:
    return collect(e, lambda n: isinstance(n, E.BufferLoad) and n.buffer is buf)


def _reads_elsewhere(value: E.Expr, buf: Buffer, index: E.Expr) -> bool:
    """True when `value` loads elements of `buf` other than those at `index`."""
    return any(not load.indices[0].same_as(index) for load in _loads(value, buf))


def _used(body: S.Stmt) -> set[int]:
    """Ids of the outside Vars and Buffers that `body` refers to (allocation sizes included)."""
    variables, buffers = closure_of(body)
    return {id(x) for x in (*variables, *buffers)}


# -- the module -----------------------------------------------------------------------------


def _check_names(funcs: list[PrimFunc]) -> None:
    seen = set()
    for f in funcs:
        if not isinstance(f, PrimFunc):
            raise TypeError(f"emit_c expects tir.PrimFuncs, got {type(f).__name__}")
        if not _IDENTIFIER.fullmatch(f.name) or f.name in RESERVED or f.name.startswith("tessera"):
            raise ValueError(
                f"function name {f.name!r} cannot be a C function name (use letters, digits "
                "and '_', not a C keyword, not starting with 'tessera')"
            )
        if f.name in seen:
            raise ValueError(f"two functions are named {f.name!r}")
        seen.add(f.name)


def emit_c(funcs: list[PrimFunc], header: str = c_prelude.HEADER) -> str:
    """The C99 source of `funcs`: a header block, the helpers they use, then the functions.
    (`header`: the block of includes; micro kernels have one without the runtime's API.)"""
    funcs = [funcs] if isinstance(funcs, PrimFunc) else list(funcs)
    _check_names(funcs)
    fnames = {f.name for f in funcs}
    prefixes = ("tessera", "TESSERA", *(f"{n}_par_" for n in fnames))
    helpers: set[str] = set()
    texts = []
    for f in funcs:
        names = _Names(RESERVED | _OWN_NAMES | fnames, prefixes)
        texts.append(_FunctionEmitter(f, helpers, names).emit())
    return c_prelude.prelude(helpers, header) + "\n" + "\n\n".join(texts) + "\n"


# -- compiling ------------------------------------------------------------------------------


def compile_flags(target=None) -> list[str]:
    """Compiler flags for `target` (a Target, a target string or None for this machine)."""
    flags = ["-O3", "-std=c99", "-fPIC"]
    if target is None:
        return [*flags, "-march=native"]
    if isinstance(target, str):
        from tessera.target import Target

        target = Target(target)
    if getattr(target, "device", None) == "micro":
        return flags  # the host build of a microcontroller's code: portable C (docs/micro.md)
    mcpu = target.mcpu
    if mcpu is not None:
        x86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")
        flags.append(f"-march={mcpu}" if x86 and target.mtriple is None else f"-mcpu={mcpu}")
    elif target.mtriple is None and target.is_host:
        flags.append("-march=native")
    for attr in target.mattr:  # +avx2 -> -mavx2, -avx512f -> -mno-avx512f
        flags.append(("-m" if attr[0] == "+" else "-mno-") + attr[1:])
    return flags


def compile_c(source: str, target=None, name: str = "kernels") -> Path:
    """Compile `source` into a shared library in the cache directory; the same source and flags
    give the same file, so a repeated build does not run the compiler again."""
    from tessera.runtime import artifact, cc, config

    flags = compile_flags(target)
    key = "\n".join([*cc.compiler_command(), *flags, source])
    if "-march=native" in flags:  # a cache directory may be shared by different machines
        from tessera.target import Target

        key += str(Target.host())
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    folder = config.cache_dir() / "c"
    folder.mkdir(parents=True, exist_ok=True)
    library = folder / f"{name}-{digest}.so"
    src = folder / f"{name}-{digest}.c"

    def build(output):  # sealed with the cache's secret, verified before it is loaded
        src.write_text(source)
        try:
            cc.compile_shared(output, sources=[src], flags=flags)
        except RuntimeError as err:
            raise CCompileError(f"compiling the generated C source {src} failed:\n{err}") from None

    return artifact.cached_library(library, build)


def build_c(funcs: list[PrimFunc], target=None):
    """Compile `funcs` to C, then to a shared library, and load it as a runtime.Module."""
    from tessera.runtime import config, native
    from tessera.runtime.module import Module

    funcs = [funcs] if isinstance(funcs, PrimFunc) else list(funcs)
    source = emit_c(funcs)
    library = compile_c(source, target, name=funcs[0].name if funcs else "kernels")
    native.load()  # the kernels resolve tessera_parallel_for & co. against it
    infos = [function_info(f) for f in funcs]
    return Module.from_library(
        str(library), infos, {"c": source}, c_sources=[source], key=config.cache_secret()
    )
