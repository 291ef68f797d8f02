"""Read the text that `tir.printer` writes back into IR: a tokenizer and a recursive-descent parser.

    f = parse_prim_func('''
    primfn add_one(A: Buffer(float32, [n]), B: Buffer(float32, [n])) {
      for (i: int32, 0, n) {
        B[i] = A[i] + 1.0f
      }
    }''')
    e = parse_expr("i*4 + 1", {"i": i})

The syntax is described in Note [text syntax] of `tir/printer.py`. Names are lexically scoped:
a loop, let or allocate binds its name for its body. In a PrimFunc's parameter list a name not
yet known declares a shape variable (`n`, int32 unless written `n: int64`). Errors are
`ParseError` with the line, column and what was expected.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from tessera.ir.dtype import DType, bool_, float32, int32
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
    Div,
    Expr,
    FloatImm,
    FloorDiv,
    FloorMod,
    IntImm,
    Let,
    Max,
    Min,
    Mod,
    Mul,
    Not,
    Or,
    Ramp,
    Select,
    StringImm,
    Sub,
    Var,
)
from tessera.tir.function import PrimFunc
from tessera.tir.printer import ADD, AND, CMP, MUL, OR, call_dtype
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


class ParseError(ValueError):
    """A syntax or name error in tir text, at `line`:`col` (both from 1)."""

    def __init__(self, message: str, text: str, pos: int):
        self.line = text.count("\n", 0, pos) + 1
        line_start = text.rfind("\n", 0, pos) + 1
        self.col = pos - line_start + 1
        end = text.find("\n", pos)
        source = text[line_start : end if end >= 0 else len(text)]
        self.message = message
        super().__init__(
            f"{self.line}:{self.col}: {message}\n  {source}\n  {' ' * (self.col - 1)}^"
        )


# -- tokens ------------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"""(?P<space>\s+|//[^\n]*)
    |(?P<number>(?:\d+\.\d*(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+|\d+)(?:[A-Za-z_][A-Za-z0-9_]*)?)
    |(?P<name>[A-Za-z_][A-Za-z0-9_.]*)
    |(?P<string>"(?:[^"\\\n]|\\.)*")
    |(?P<op>==|!=|<=|>=|&&|\|\||[-+*/<>!=()\[\]{},:])""",
    re.VERBOSE,
)
_NUMBER = re.compile(r"([0-9.]+(?:[eE][+-]?\d+)?)([A-Za-z_]\w*)?")
_SUFFIX = {"f": "float32", "f32": "float32", "f16": "float16", "f64": "float64", "bf16": "bfloat16"}
_SUFFIX |= {
    f"{code[0]}{bits}": f"{code}{bits}" for code in ("int", "uint") for bits in (8, 16, 32, 64)
}


@dataclass(frozen=True)
class Token:
    kind: str  # "number", "name", "string", "op", "eof"
    text: str
    pos: int

    def describe(self) -> str:
        return "end of input" if self.kind == "eof" else repr(self.text)


def tokenize(text: str) -> list[Token]:
    tokens, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ParseError(f"unexpected character {text[pos]!r}", text, pos)
        if m.lastgroup != "space":
            tokens.append(Token(m.lastgroup, m.group(), pos))
        pos = m.end()
    tokens.append(Token("eof", "", len(text)))
    return tokens


# -- the parser --------------------------------------------------------------------------------

_BINARY = {
    "||": (OR, Or),
    "&&": (AND, And),
    "==": (CMP, EQ),
    "!=": (CMP, NE),
    "<": (CMP, LT),
    "<=": (CMP, LE),
    ">": (CMP, GT),
    ">=": (CMP, GE),
    "+": (ADD, Add),
    "-": (ADD, Sub),
    "*": (MUL, Mul),
    "/": (MUL, Div),
}
_BINARY_CALLS = {
    "floordiv": FloorDiv,
    "floormod": FloorMod,
    "truncdiv": Div,
    "truncmod": Mod,
    "min": Min,
    "max": Max,
}
_LOOP_KINDS = {"for": ForKind.SERIAL} | {k.value: k for k in ForKind if k is not ForKind.SERIAL}
_VALUE_END = frozenset(", ) ] { }".split())  # what may follow an attribute value


class Parser:
    def __init__(self, text: str, scope: dict | None = None):
        self.text = text
        self.tokens = tokenize(text)
        self.i = 0
        self.scopes: list[dict[str, Var | Buffer]] = [dict(scope or {})]
        self.declaring = False  # in a parameter list: unknown names declare shape vars

    # -- token helpers -------------------------------------------------------------------------

    def peek(self, k: int = 0) -> Token:
        return self.tokens[min(self.i + k, len(self.tokens) - 1)]

    def next(self) -> Token:
        tok = self.peek()
        self.i += 1
        return tok

    def at(self, text: str, k: int = 0) -> bool:
        tok = self.peek(k)
        return tok.text == text and tok.kind in ("op", "name")

    def accept(self, text: str) -> bool:
        if self.at(text):
            self.i += 1
            return True
        return False

    def error(self, message: str, tok: Token | None = None) -> ParseError:
        tok = tok or self.peek()
        return ParseError(message, self.text, tok.pos)

    def expect(self, text: str) -> Token:
        if not self.at(text):
            raise self.error(f"expected {text!r} but found {self.peek().describe()}")
        return self.next()

    def expect_kind(self, kind: str, what: str) -> Token:
        if self.peek().kind != kind:
            raise self.error(f"expected {what} but found {self.peek().describe()}")
        return self.next()

    def name(self) -> str:
        return self.expect_kind("name", "a name").text

    def name_or_string(self, what: str) -> str:
        tok = self.peek()
        if tok.kind == "string":
            return json.loads(self.next().text)
        return self.expect_kind("name", what).text

    def dtype(self) -> DType:
        tok = self.expect_kind("name", "a dtype")
        try:
            return DType.parse(tok.text)
        except ValueError:
            raise self.error(f"expected a dtype but found {tok.text!r}", tok) from None

    def int_literal(self) -> int:
        tok = self.expect_kind("number", "an integer")
        if not tok.text.isdigit():
            raise self.error(f"expected an integer but found {tok.text!r}", tok)
        return int(tok.text)

    def end(self) -> None:
        if self.peek().kind != "eof":
            raise self.error(f"expected end of input but found {self.peek().describe()}")

    # -- names ---------------------------------------------------------------------------------

    def bind(self, name: str, obj) -> None:
        self.scopes[-1][name] = obj

    def lookup(self, tok: Token):
        for scope in reversed(self.scopes):
            if tok.text in scope:
                return scope[tok.text]
        raise self.error(f"unknown name {tok.text!r}", tok)

    def buffer(self, tok: Token) -> Buffer:
        obj = self.lookup(tok)
        if not isinstance(obj, Buffer):
            raise self.error(f"{tok.text!r} is a variable, not a buffer", tok)
        return obj

    def scoped(self, name: str, obj, parse_body):
        self.scopes.append({name: obj})
        try:
            return parse_body()
        finally:
            self.scopes.pop()

    # -- expressions ---------------------------------------------------------------------------

    def expr(self, min_level: int = OR) -> Expr:
        if self.at("let"):
            return self.let_expr()
        left = self.unary()
        while True:
            tok = self.peek()
            entry = _BINARY.get(tok.text) if tok.kind == "op" else None
            if entry is None or entry[0] < min_level:
                return left
            level, cls = entry
            self.next()
            left = cls(left, self.expr(level + 1))
            if (
                level == CMP
                and self.peek().kind == "op"
                and _BINARY.get(self.peek().text, (0,))[0] == CMP
            ):
                raise self.error("comparisons do not chain; add parentheses")

    def let_expr(self) -> Expr:
        self.expect("let")
        name = self.name()
        dtype = self.dtype() if self.accept(":") else None
        self.expect("=")
        value = self.expr()
        self.expect("in")
        var = Var(name, dtype or value.dtype)
        return Let(var, value, self.scoped(name, var, self.expr))

    def unary(self) -> Expr:
        if self.accept("!"):
            return Not(self.unary())
        if self.at("-") and self.peek(1).kind == "number":
            self.next()
            return self.number(self.next(), negate=True)
        return self.primary()

    def primary(self) -> Expr:
        tok = self.peek()
        if tok.kind == "number":
            return self.number(self.next())
        if tok.kind == "string":
            return StringImm(json.loads(self.next().text))
        if self.accept("("):
            e = self.expr()
            self.expect(")")
            return e
        if tok.kind != "name":
            raise self.error(f"expected an expression but found {tok.describe()}")
        if tok.text in ("true", "false"):
            self.next()
            return IntImm(int(tok.text == "true"), bool_)
        if self.at("let"):
            return self.let_expr()
        self.next()
        if self.at("("):
            return self.call(tok)
        if self.at("["):
            return BufferLoad(self.buffer(tok), self.indices())
        return self.var(tok)

    def var(self, tok: Token) -> Var:
        if self.declaring and not any(tok.text in s for s in self.scopes):
            var = Var(tok.text, self.dtype() if self.accept(":") else int32)
            self.scopes[0][tok.text] = var
            return var
        obj = self.lookup(tok)
        if not isinstance(obj, Var):
            raise self.error(f"{tok.text!r} is a buffer; index it as {tok.text}[...]", tok)
        return obj

    def indices(self) -> tuple[Expr, ...]:
        self.expect("[")
        out = []
        while not self.at("]"):
            out.append(self.expr())
            if not self.accept(","):
                break
        self.expect("]")
        return tuple(out)

    def number(self, tok: Token, negate: bool = False) -> Expr:
        digits, suffix = _NUMBER.fullmatch(tok.text).groups()
        is_int = digits.isdigit()
        if suffix is None:
            dtype = int32 if is_int else float32
        elif suffix in _SUFFIX:
            dtype = DType.parse(_SUFFIX[suffix])
        else:
            raise self.error(
                f"unknown literal suffix {suffix!r} (use i64, u8, f, f16, bf16, ...)", tok
            )
        if dtype.is_float:
            value = float(digits)
            return FloatImm(-value if negate else value, dtype)
        if not is_int:
            raise self.error(f"an integer literal cannot have a fraction: {tok.text!r}", tok)
        return IntImm(-int(digits) if negate else int(digits), dtype)

    def call(self, tok: Token) -> Expr:
        name = tok.text
        try:
            cast_to = DType.parse(name)
        except ValueError:
            cast_to = None
        if cast_to is not None:
            return self.cast(cast_to)
        if name == "StringImm":
            self.expect("(")
            value = json.loads(self.expect_kind("string", "a string").text)
            self.expect(")")
            return StringImm(value)
        if name in ("Ramp", "Broadcast"):
            return self.vector(name)
        args, dtype = self.arguments()
        if name == "call":
            if not args or not isinstance(args[0], StringImm):
                raise self.error(
                    'call(...) takes the op name as a string first: call("op", ...)', tok
                )
            name, args = args[0].value, args[1:]
        elif name == "select":
            self.arity(tok, args, 3)
            return Select(*args)
        elif name in _BINARY_CALLS:
            self.arity(tok, args, 2)
            return _BINARY_CALLS[name](*args)
        dtype = dtype or call_dtype(name, args)
        if dtype is None:
            raise self.error(f"the dtype of {name}() is unknown; write {name}(dtype=...)", tok)
        return Call(dtype, name, tuple(args))

    def arity(self, tok: Token, args, n: int) -> None:
        if len(args) != n:
            raise self.error(f"{tok.text} takes {n} arguments, got {len(args)}", tok)

    def arguments(self) -> tuple[list[Expr], DType | None]:
        self.expect("(")
        args, dtype = [], None
        while not self.at(")"):
            if self.at("dtype") and self.at("=", 1):
                self.i += 2
                dtype = self.dtype()
            else:
                args.append(self.expr())
            if not self.accept(","):
                break
        self.expect(")")
        return args, dtype

    def cast(self, dtype: DType) -> Expr:
        self.expect("(")
        negative = self.at("-") and self.at("inf", 1)
        if negative or self.at("inf") or self.at("nan"):  # float32(inf): no literal spells it
            self.i += 2 if negative else 1
            value = float(self.tokens[self.i - 1].text)
            self.expect(")")
            return FloatImm(-value if negative else value, dtype)
        value = self.expr()
        self.expect(")")
        return Cast(dtype, value)

    def vector(self, name: str) -> Expr:
        self.expect("(")
        first = self.expr()
        self.expect(",")
        if name == "Ramp":
            stride = self.expr()
            self.expect(",")
            lanes = self.int_literal()
            self.expect(")")
            return Ramp(first, stride, lanes)
        lanes = self.int_literal()
        self.expect(")")
        return Broadcast(first, lanes)

    # -- attribute values ----------------------------------------------------------------------

    def value(self):
        """A Python value (None, bool, int, float, str, tuple, list), a Buffer, or an Expr."""
        tok, after = self.peek(), self.peek(1)
        ends = after.kind == "eof" or after.text in _VALUE_END and after.kind == "op"
        if tok.kind == "name" and ends:
            python = {"None": None, "True": True, "False": False, "inf": float("inf")}
            if tok.text in python or tok.text == "nan":
                self.next()
                return python.get(tok.text, float("nan"))
            if isinstance(self.lookup(tok), Buffer):
                return self.buffer(self.next())
        if tok.kind == "string" and ends:
            return json.loads(self.next().text)
        if self.at("-") and (self.at("inf", 1) or self.plain_number(1)):
            after = self.peek(2)
            if after.kind == "eof" or after.text in _VALUE_END and after.kind == "op":
                self.next()
                return -self.value()
        if self.plain_number(0) and ends:
            self.next()
            return int(tok.text) if tok.text.isdigit() else float(tok.text)
        if self.at("["):
            return list(self.value_items("[", "]"))
        if self.at("("):
            start = self.i
            self.next()
            if self.accept(")"):
                return ()
            self.value()
            if self.at(","):  # a tuple; otherwise a parenthesized expression
                self.i = start
                return tuple(self.value_items("(", ")"))
            self.i = start
        return self.expr()

    def plain_number(self, k: int) -> bool:
        """A number without a dtype suffix: a Python value where an attribute value may be."""
        tok = self.peek(k)
        return tok.kind == "number" and _NUMBER.fullmatch(tok.text).group(2) is None

    def value_items(self, opener: str, closer: str) -> list:
        self.expect(opener)
        items = []
        while not self.at(closer):
            items.append(self.value())
            if not self.accept(","):
                break
        self.expect(closer)
        return items

    def key_values(self) -> tuple[tuple[str, object], ...]:
        self.expect("(")
        items = []
        while not self.at(")"):
            key = self.name_or_string("a key")
            self.expect("=")
            items.append((key, self.value()))
            if not self.accept(","):
                break
        self.expect(")")
        return tuple(items)

    # -- statements ----------------------------------------------------------------------------

    def statement_list(self, closer: str) -> list[Stmt]:
        items = []
        while not (self.at(closer) or self.peek().kind == "eof"):
            items.append(self.stmt())
        return items

    def statements(self, closer: str) -> Stmt:
        """Statements up to `closer`: one is itself, several a SeqStmt (see Note [text syntax])."""
        items = self.statement_list(closer)
        return items[0] if len(items) == 1 else SeqStmt(tuple(items))

    def block(self) -> Stmt:
        self.expect("{")
        body = self.statements("}")
        self.expect("}")
        return body

    def stmt(self) -> Stmt:
        tok, after = self.peek(), self.peek(1)
        word = tok.text if tok.kind == "name" else ""
        if word in _LOOP_KINDS and after.text == "(":
            return self.for_stmt()
        if word == "if" and after.text == "(":
            return self.if_stmt()
        if word == "seq" and after.text == "{":
            self.i += 2
            items = self.statement_list("}")
            self.expect("}")
            return SeqStmt(tuple(items))
        if word == "evaluate" and after.text == "(":
            self.i += 2
            value = self.expr()
            self.expect(")")
            return Evaluate(value)
        method = {"let": self.let_stmt, "allocate": self.allocate, "attr": self.attr_stmt}
        if word in method and after.kind in ("name", "string"):
            return method[word]()
        if tok.kind != "name" or after.text != "[":
            raise self.error(f"expected a statement but found {tok.describe()}")
        buf = self.buffer(self.next())
        indices = self.indices()
        self.expect("=")
        return BufferStore(buf, self.expr(), indices)

    def for_stmt(self) -> Stmt:
        kind = _LOOP_KINDS[self.next().text]
        self.expect("(")
        name = self.name()
        self.expect(":")
        var = Var(name, self.dtype())
        self.expect(",")
        start = self.expr()
        self.expect(",")
        extent = self.expr()
        self.expect(")")
        tag = json.loads(self.next().text) if self.peek().kind == "string" else ""
        annotations = self.key_values() if self.accept("annotate") else ()
        body = self.scoped(name, var, self.block)
        return For(var, start, extent, kind, body, tag, annotations)

    def if_stmt(self) -> Stmt:
        self.expect("if")
        self.expect("(")
        cond = self.expr()
        self.expect(")")
        then_case = self.block()
        if not self.accept("else"):
            return IfThenElse(cond, then_case)
        return IfThenElse(cond, then_case, self.if_stmt() if self.at("if") else self.block())

    def let_stmt(self) -> Stmt:
        self.expect("let")
        name = self.name()
        dtype = self.dtype() if self.accept(":") else None
        self.expect("=")
        value = self.expr()
        var = Var(name, dtype or value.dtype)
        return LetStmt(var, value, self.scoped(name, var, self.block))

    def allocate(self) -> Stmt:
        self.expect("allocate")
        name = self.name()
        self.expect(":")
        dtype = self.dtype()
        shape = self.indices()
        self.expect("scope")
        buf = Buffer(name, shape, dtype, self.name_or_string("a storage scope"))
        return Allocate(buf, self.scoped(name, buf, self.block))

    def attr_stmt(self) -> Stmt:
        self.expect("attr")
        key = self.name_or_string("an attribute key")
        self.expect("=")
        value = self.value()
        return AttrStmt(key, value, self.block())

    # -- functions -----------------------------------------------------------------------------

    def prim_func(self) -> PrimFunc:
        self.expect("primfn")
        name = self.name_or_string("a function name")
        params = self.params()
        attrs = self.key_values() if self.accept("attrs") else ()
        body = self.block()
        self.end()
        return PrimFunc(name, params, body, attrs)

    def params(self) -> tuple:
        self.expect("(")
        start = self.i
        # First pass: scalar params, so that a buffer's shape may name one listed after it.
        scalars: dict[int, Var] = {}  # position -> Var
        position = 0
        while not self.at(")") and self.peek().kind != "eof":
            tok = self.expect_kind("name", "a parameter name")
            self.expect(":")
            if self.at("Buffer"):
                self.skip_parens(1)
            else:
                scalars[position] = Var(tok.text, self.dtype())
                self.bind(tok.text, scalars[position])
            position += 1
            if not self.accept(","):
                break
        self.i = start
        params, seen = [], set()
        while not self.at(")"):
            tok = self.expect_kind("name", "a parameter name")
            if tok.text in seen:
                raise self.error(f"parameter {tok.text!r} is listed twice", tok)
            seen.add(tok.text)
            self.expect(":")
            if len(params) in scalars:
                self.dtype()
                params.append(scalars[len(params)])
            else:
                params.append(self.buffer_param(tok.text))
                self.bind(tok.text, params[-1])
            if not self.accept(","):
                break
        self.expect(")")
        return tuple(params)

    def skip_parens(self, k: int) -> None:
        """Step over `Buffer( ... )`, whose opening parenthesis is k tokens ahead."""
        self.i += k
        self.expect("(")
        depth = 1
        while depth:
            tok = self.next()
            if tok.kind == "eof":
                raise self.error("expected ')' but found end of input", tok)
            depth += {"(": 1, ")": -1}.get(tok.text, 0) if tok.kind == "op" else 0

    def buffer_param(self, name: str) -> Buffer:
        self.expect("Buffer")
        self.expect("(")
        dtype = self.dtype()
        self.expect(",")
        self.declaring = True
        try:
            shape = self.indices()
        finally:
            self.declaring = False
        scope = "global"
        if self.accept(","):
            self.expect("scope")
            self.expect("=")
            scope = self.name_or_string("a storage scope")
        self.expect(")")
        return Buffer(name, shape, dtype, scope)


def parse_prim_func(text: str) -> PrimFunc:
    """A PrimFunc from its printed text."""
    return Parser(text).prim_func()


def parse_expr(text: str, scope: dict | None = None) -> Expr:
    """An expression; `scope` maps the names of its free Vars and Buffers to them."""
    p = Parser(text, scope)
    e = p.expr()
    p.end()
    return e


def parse_stmt(text: str, scope: dict | None = None) -> Stmt:
    """One statement, or a SeqStmt of several; `scope` maps free names to Vars and Buffers."""
    p = Parser(text, scope)
    s = p.statements("")
    p.end()
    return s
