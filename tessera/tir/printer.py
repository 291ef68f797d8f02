"""Text form of tir: expressions, statements and PrimFuncs, in TVM's classic lowered style.

    primfn myadd(A: Buffer(float32, [n]), B: Buffer(float32, [n]), C: Buffer(float32, [n])) {
      for (i.outer: int32, 0, floordiv(n + 15, 16)) {
        if (likely(i.outer*16 + i.inner < n)) {
          C[i.outer*16 + i.inner] = A[i.outer*16 + i.inner] + B[i.outer*16 + i.inner]
        }
      }
    }

Everything but `Reduce`/`CommReducer`/`IterVar`/`Range` reads back with `tir.parser`, giving a
structurally equal tree. The syntax is chosen so that each node has exactly one spelling:
see Note [text syntax] below. Distinct Vars or Buffers that share a name get unique names
(`i`, `i_1`) in one printout; names that are not identifiers or are keywords are rewritten.
"""

# Note [text syntax]
# Constants carry a dtype suffix unless their type is the default one: `3` (int32), `3i64`,
# `7u8`, `true`, `1.5f` (float32), `1.5f64`, `1.5f16`, `1.5bf16`; infinities and NaN read
# `float32(inf)`, `float64(-inf)`, `float16(nan)`. Integer Div/Mod print as calls
# `truncdiv`/`truncmod` (floats: `/`); FloorDiv/FloorMod/Min/Max as `floordiv(a, b)`, ....
# A Call whose dtype is not the one its arguments imply spells it: `reinterpret(x, dtype=int32)`.
# Blocks `{ ... }` of one statement are that statement, of several a SeqStmt; any other
# SeqStmt (empty, one element, nested in another) prints as `seq { ... }`.
# Attribute values (AttrStmt, loop annotations, PrimFunc attrs) may be Python values: `16`
# is a Python int there, `16i32` an IntImm; `"s"` a str, `StringImm("s")` a StringImm.

from __future__ import annotations

import json
import math
import re

from tessera.ir.dtype import DType, bool_, int32
from tessera.tir.buffer import Buffer
from tessera.tir.expr import (
    EQ,
    GE,
    GT,
    LE,
    LT,
    NE,
    Add,
    And,
    Broadcast,
    BufferLoad,
    Call,
    Cast,
    CommReducer,
    Div,
    Expr,
    FloatImm,
    FloorDiv,
    FloorMod,
    IntImm,
    IterVar,
    Let,
    Max,
    Min,
    Mod,
    Mul,
    Not,
    Or,
    Ramp,
    Range,
    Reduce,
    Select,
    StringImm,
    Sub,
    Var,
)
from tessera.tir.function import PrimFunc
from tessera.tir.stmt import (
    Allocate,
    AttrStmt,
    BufferStore,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    LetStmt,
    SeqStmt,
    Stmt,
)

# precedence levels, tighter binding is higher
LET, OR, AND, CMP, ADD, MUL, UNARY, ATOM = range(8)

INFIX = {
    Or: ("||", OR),
    And: ("&&", AND),
    EQ: ("==", CMP),
    NE: ("!=", CMP),
    LT: ("<", CMP),
    LE: ("<=", CMP),
    GT: (">", CMP),
    GE: (">=", CMP),
    Add: ("+", ADD),
    Sub: ("-", ADD),
    Mul: ("*", MUL),
}
CALL_LIKE = {FloorDiv: "floordiv", FloorMod: "floormod", Min: "min", Max: "max"}

# Words the parser gives a meaning of its own; a Var or Buffer with such a name is renamed.
KEYWORDS = frozenset(
    "for parallel vectorized unrolled thread_binding if else let in allocate attr evaluate "
    "seq scope annotate attrs primfn Buffer true false inf nan True False None dtype".split()
)
# Function-call spellings the parser reads as something other than an intrinsic Call.
BUILTIN_CALLS = frozenset(
    "select floordiv floormod truncdiv truncmod min max Ramp Broadcast call StringImm".split()
)
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")

INT_SUFFIX = {"int": "i", "uint": "u"}
FLOAT_SUFFIX = {
    ("float", 32): "f",
    ("float", 16): "f16",
    ("float", 64): "f64",
    ("bfloat", 16): "bf16",
}


def is_identifier(text: str) -> bool:
    return IDENT.fullmatch(text) is not None and not _is_dtype(text)


def _is_dtype(text: str) -> bool:
    try:
        DType.parse(text)
    except ValueError:
        return False
    return True


def call_dtype(op: str, args) -> DType | None:
    """The dtype a Call `op(args)` has unless the text says otherwise (shared with the parser)."""
    if op in ("isnan", "isinf") and args:
        return bool_.with_lanes(args[0].dtype.lanes)
    if op == "if_then_else" and len(args) == 3:
        return args[1].dtype
    return args[0].dtype if args else None


def quote(text: str) -> str:
    return json.dumps(text)


class Namer:
    """Gives each Var and Buffer one printable name, unique within a printout."""

    def __init__(self):
        self._names: dict[int, tuple[object, str]] = {}  # id -> (object kept alive, name)
        self._used: set[str] = set()

    def has(self, obj) -> bool:
        return id(obj) in self._names

    def __call__(self, obj) -> str:
        entry = self._names.get(id(obj))
        if entry is not None:
            return entry[1]
        base = re.sub(r"[^A-Za-z0-9_.]", "_", obj.name) or "v"
        if not IDENT.fullmatch(base) or base in KEYWORDS or _is_dtype(base):
            base = f"v_{base}" if not base[0].isalpha() else f"{base}_"
        name, k = base, 0
        while name in self._used:
            k += 1
            name = f"{base}_{k}"
        self._used.add(name)
        self._names[id(obj)] = (obj, name)
        return name


class Printer:
    def __init__(self, namer: Namer | None = None):
        self.name = namer or Namer()
        self.declaring: set[int] | None = None  # shape vars declared so far, in a param list
        self.lines: list[str] = []
        self.depth = 0

    # -- expressions ---------------------------------------------------------------------------

    def expr(self, e: Expr) -> str:
        return self.prec(e)[0]

    def operand(self, e: Expr, min_level: int) -> str:
        text, level = self.prec(e)
        return text if level >= min_level else f"({text})"

    def prec(self, e) -> tuple[str, int]:
        """The text of e and the precedence level of its outermost operator."""
        cls = type(e)
        if cls in INFIX:
            op, level = INFIX[cls]
            # left-associative: a right operand of equal level needs parentheses
            left_min = level + 1 if level == CMP else level
            sep = op if cls is Mul else f" {op} "
            return f"{self.operand(e.a, left_min)}{sep}{self.operand(e.b, level + 1)}", level
        if cls in CALL_LIKE:
            return f"{CALL_LIKE[cls]}({self.expr(e.a)}, {self.expr(e.b)})", ATOM
        if cls in (Div, Mod):
            if cls is Div and e.dtype.is_float:
                return f"{self.operand(e.a, MUL)} / {self.operand(e.b, MUL + 1)}", MUL
            name = "truncdiv" if cls is Div else "truncmod"
            return f"{name}({self.expr(e.a)}, {self.expr(e.b)})", ATOM
        method = getattr(self, f"expr_{cls.__name__}", None)
        if method is None:
            return repr(e), ATOM
        return method(e)

    def expr_Var(self, v: Var):
        name = self.name(v)
        if self.declaring is None or id(v) in self.declaring:
            return name, ATOM
        self.declaring.add(id(v))  # first use in a param's shape declares it
        if v.dtype == int32:
            return name, ATOM
        return f"({name}: {v.dtype})", ATOM

    def expr_IntImm(self, e: IntImm):
        return int_literal(e.value, e.dtype), ATOM

    def expr_FloatImm(self, e: FloatImm):
        return float_literal(e.value, e.dtype), ATOM

    def expr_StringImm(self, e: StringImm):
        return quote(e.value), ATOM

    def expr_Not(self, e: Not):
        return f"!{self.operand(e.a, UNARY)}", UNARY

    def expr_Select(self, e: Select):
        args = (e.condition, e.true_value, e.false_value)
        return f"select({', '.join(self.expr(a) for a in args)})", ATOM

    def expr_Cast(self, e: Cast):
        return f"{e.dtype}({self.expr(e.value)})", ATOM

    def expr_Call(self, e: Call):
        args = [self.expr(a) for a in e.args]
        if call_dtype(e.op, e.args) != e.dtype or not is_identifier(e.op):
            args.append(f"dtype={e.dtype}")
        if is_identifier(e.op) and e.op not in BUILTIN_CALLS and e.op not in KEYWORDS:
            return f"{e.op}({', '.join(args)})", ATOM
        return f"call({', '.join([quote(e.op), *args])})", ATOM

    def expr_Let(self, e: Let):
        value = self.expr(e.value)
        return f"let {self.name(e.var)}: {e.var.dtype} = {value} in {self.expr(e.body)}", LET

    def expr_BufferLoad(self, e: BufferLoad):
        return f"{self.name(e.buffer)}[{', '.join(self.expr(i) for i in e.indices)}]", ATOM

    def expr_Ramp(self, e: Ramp):
        return f"Ramp({self.expr(e.base)}, {self.expr(e.stride)}, {e.lanes})", ATOM

    def expr_Broadcast(self, e: Broadcast):
        return f"Broadcast({self.expr(e.value)}, {e.lanes})", ATOM

    def expr_Reduce(self, e: Reduce):
        parts = [self.reducer(e.combiner)]
        sources = [self.expr(s) for s in e.source]
        parts.append(sources[0] if len(sources) == 1 else f"[{', '.join(sources)}]")
        parts.append(f"axis=[{', '.join(self.iter_var(iv) for iv in e.axis)}]")
        if not (isinstance(e.condition, IntImm) and e.condition.value == 1):
            parts.append(f"where={self.expr(e.condition)}")
        if e.value_index:
            parts.append(f"value_index={e.value_index}")
        if e.init:
            parts.append(f"init=[{', '.join(self.expr(i) for i in e.init)}]")
        return f"reduce({', '.join(parts)})", ATOM

    def reducer(self, r: CommReducer) -> str:
        if len(r.result) == 1 and len(r.lhs) == 1:
            res, x, y = r.result[0], r.lhs[0], r.rhs[0]
            named = {Add: "sum", Mul: "prod", Min: "min", Max: "max"}.get(type(res))
            if named and res.a is x and res.b is y:
                return named
        lhs = ", ".join(self.name(v) for v in r.lhs)
        rhs = ", ".join(self.name(v) for v in r.rhs)
        result = ", ".join(self.expr(v) for v in r.result)
        identity = ", ".join(self.expr(v) for v in r.identity_element)
        return f"comm_reducer(({lhs}), ({rhs}): ({result}), identity=[{identity}])"

    def iter_var(self, iv: IterVar) -> str:
        text = f"{self.name(iv.var)}: {iv.var.dtype}"
        if iv.dom is not None:
            text += f" in {self.range(iv.dom)}"
        if iv.iter_type.value != "data_par":
            text += f" {iv.iter_type.value}"
        return text + (f" {quote(iv.thread_tag)}" if iv.thread_tag else "")

    def range(self, r: Range) -> str:
        lo = self.expr(r.min)
        if isinstance(r.min, IntImm) and r.min.value == 0:
            return f"[0, {self.expr(r.extent)})"
        return f"[{lo}, {self.expr(r.min + r.extent)})"

    # -- attribute values (Python values or IR) ------------------------------------------------

    def value(self, v) -> str:
        if v is None or isinstance(v, bool):
            return repr(v)
        if isinstance(v, int):
            return str(v)
        if isinstance(v, float):
            return repr(v) if math.isfinite(v) else ("-inf" if v < 0 else repr(v))
        if isinstance(v, str):
            return quote(v)
        if isinstance(v, tuple):
            items = [self.value(x) for x in v]
            return f"({', '.join(items)}{',' if len(items) == 1 else ''})"
        if isinstance(v, list):
            return f"[{', '.join(self.value(x) for x in v)}]"
        if isinstance(v, Buffer):
            return self.name(v)
        if isinstance(v, IntImm) and v.dtype == int32:
            return f"{v.value}i32"
        if isinstance(v, StringImm):
            return f"StringImm({quote(v.value)})"
        if isinstance(v, Expr):
            return self.expr(v)
        return repr(v)  # not readable back: an attribute of a kind the parser does not know

    # -- statements ----------------------------------------------------------------------------

    def emit(self, line: str) -> None:
        self.lines.append("  " * self.depth + line)

    def block(self, header: str, body: Stmt) -> None:
        """`header {`, the body one level deeper, `}`."""
        self.emit(header + " {")
        self.depth += 1
        self.body(body)
        self.depth -= 1
        self.emit("}")

    def body(self, s: Stmt) -> None:
        if isinstance(s, SeqStmt) and len(s.seq) >= 2:
            for x in s.seq:
                self.stmt(x, in_seq=True)
        else:
            self.stmt(s)

    def stmt(self, s: Stmt, in_seq: bool = False) -> None:
        if isinstance(s, SeqStmt) and (in_seq or len(s.seq) < 2):
            if not s.seq:
                self.emit("seq {}")
                return
            self.emit("seq {")
            self.depth += 1
            for x in s.seq:
                self.stmt(x, in_seq=True)
            self.depth -= 1
            self.emit("}")
            return
        method = getattr(self, f"stmt_{type(s).__name__}", None)
        if method is None:
            self.emit(repr(s))
        else:
            method(s)

    def stmt_SeqStmt(self, s: SeqStmt):
        self.body(s)

    def stmt_BufferStore(self, s: BufferStore):
        indices = ", ".join(self.expr(i) for i in s.indices)
        self.emit(f"{self.name(s.buffer)}[{indices}] = {self.expr(s.value)}")

    def stmt_Evaluate(self, s: Evaluate):
        self.emit(f"evaluate({self.expr(s.value)})")

    def stmt_For(self, s: For):
        var = f"{self.name(s.loop_var)}: {s.loop_var.dtype}"
        header = f"{s.kind.value} ({var}, {self.expr(s.min)}, {self.expr(s.extent)})"
        if s.kind is ForKind.SERIAL:
            header = "for" + header[len("serial") :]
        if s.thread_tag:
            header += f" {quote(s.thread_tag)}"
        if s.annotations:
            items = ", ".join(f"{self.key(k)}={self.value(v)}" for k, v in s.annotations)
            header += f" annotate({items})"
        self.block(header, s.body)

    def stmt_IfThenElse(self, s: IfThenElse, prefix: str = ""):
        self.emit(f"{prefix}if ({self.expr(s.condition)}) {{")
        self.depth += 1
        self.body(s.then_case)
        self.depth -= 1
        if s.else_case is None:
            self.emit("}")
        elif isinstance(s.else_case, IfThenElse):
            self.stmt_IfThenElse(s.else_case, prefix="} else ")
        else:
            self.emit("} else {")
            self.depth += 1
            self.body(s.else_case)
            self.depth -= 1
            self.emit("}")

    def stmt_LetStmt(self, s: LetStmt):
        value = self.expr(s.value)
        self.block(f"let {self.name(s.var)}: {s.var.dtype} = {value}", s.body)

    def stmt_Allocate(self, s: Allocate):
        buf = s.buffer
        dims = ", ".join(self.expr(d) for d in buf.shape)
        scope = buf.scope if is_identifier(buf.scope) else quote(buf.scope)
        self.block(f"allocate {self.name(buf)}: {buf.dtype}[{dims}] scope {scope}", s.body)

    def stmt_AttrStmt(self, s: AttrStmt):
        self.block(f"attr {self.key(s.key)} = {self.value(s.value)}", s.body)

    def key(self, key: str) -> str:
        return key if IDENT.fullmatch(key) else quote(key)

    # -- functions -----------------------------------------------------------------------------

    def param(self, p) -> str:
        if isinstance(p, Var):
            return f"{self.name(p)}: {p.dtype}"
        dims = []
        for d in p.shape:
            text = self.expr(d)
            if text.startswith("(") and isinstance(d, Var):
                text = text[1:-1]  # a bare `n: int64` needs no parentheses
            dims.append(text)
        scope = "" if p.scope == "global" else f", scope={quote(p.scope)}"
        return f"{self.name(p)}: Buffer({p.dtype}, [{', '.join(dims)}]{scope})"

    def func(self, f: PrimFunc) -> str:
        # scalar params are declared by their own entry, wherever a shape mentions them
        self.declaring = {id(p) for p in f.params if isinstance(p, Var)}
        for p in f.params:
            self.name(p)
        params = ", ".join(self.param(p) for p in f.params)
        self.declaring = None
        name = f.name if IDENT.fullmatch(f.name) else quote(f.name)
        header = f"primfn {name}({params})"
        if f.attrs:
            header += f" attrs({', '.join(f'{self.key(k)}={self.value(v)}' for k, v in f.attrs)})"
        self.block(header, f.body)
        return "\n".join(self.lines)


def int_literal(value: int, dtype: DType) -> str:
    if dtype.is_bool:
        return "true" if value else "false"
    if dtype == int32:
        return str(value)
    suffix = INT_SUFFIX.get(dtype.code)
    if suffix is None:
        return f"IntImm({value}, {dtype})"  # a malformed constant: shown, not readable back
    return f"{value}{suffix}{dtype.bits}"


def float_literal(value: float, dtype: DType) -> str:
    suffix = FLOAT_SUFFIX.get((dtype.code, dtype.bits), f"<{dtype}>")
    if math.isnan(value):
        return f"{dtype}(nan)"
    if math.isinf(value):
        return f"{dtype}({'-' if value < 0 else ''}inf)"
    return f"{value!r}{suffix}"


def to_text(node) -> str:
    """The text of a tir expression, statement, PrimFunc, Buffer, Range or reducer."""
    p = Printer()
    if isinstance(node, PrimFunc):
        return p.func(node)
    if isinstance(node, Stmt):
        p.stmt(node)
        return "\n".join(p.lines)
    if isinstance(node, Expr):
        return p.expr(node)
    if isinstance(node, Buffer):
        return p.param(node)
    if isinstance(node, Range):
        return p.range(node)
    if isinstance(node, IterVar):
        return p.iter_var(node)
    if isinstance(node, CommReducer):
        return p.reducer(node)
    return repr(node)


def _register() -> None:
    from tessera.ir.printer import register_printer

    for base in (Expr, Stmt, PrimFunc, Buffer, Range, IterVar, CommReducer):
        register_printer(base, to_text)


_register()
