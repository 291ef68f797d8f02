"""Read the text form of graph functions (see `tessera.graph.printer`).

    f = parse("def main(%x: f32[4]) { %1 = nn.relu(%x); return %1 }")

The `: type` after a call may be left out (it is inferred); when given it must match the op's
type rule. A call's source node names may follow as `@"conv1", "relu1"`. Elided constants
(`constant(...)`) take their data from `constants[name]`.
Errors name the line and column.
"""

from __future__ import annotations

import json
import re

import numpy as np

from tessera.graph.ir import Call, Constant, Function, TensorType, Value, parse_dtype
from tessera.graph.op import get_op
from tessera.ir.module import IRModule

_TOKEN = re.compile(
    r"""
    (?P<space>\s+|//[^\n]*)
  | (?P<value>%(?:"(?:[^"\\]|\\.)*"|[A-Za-z0-9_.]+))
  | (?P<number>-?(?:(?:inf|nan)(?![A-Za-z0-9_.])|\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?))
  | (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<ident>[A-Za-z_][A-Za-z0-9_.]*)
  | (?P<punct>\.\.\.|[()\[\]{},:;=@])
    """,
    re.VERBOSE,
)


class ParseError(ValueError):
    pass


def _tokenize(text: str):
    pos, out = 0, []
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ParseError(f"{_where(text, pos)}: unexpected character {text[pos]!r}")
        if m.lastgroup != "space":
            out.append((m.lastgroup, m.group(), pos))
        pos = m.end()
    out.append(("eof", "", pos))
    return out


def _where(text: str, pos: int) -> str:
    line = text.count("\n", 0, pos) + 1
    return f"line {line}, column {pos - (text.rfind(chr(10), 0, pos) + 1) + 1}"


class _Parser:
    def __init__(self, text: str, constants):
        self.text = text
        self.tokens = _tokenize(text)
        self.i = 0
        self.constants = constants or {}

    # -- tokens -------------------------------------------------------------------------------
    def peek(self, k=0):
        return self.tokens[self.i + k]

    def next(self):
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def error(self, message, tok=None):
        tok = tok or self.peek()
        return ParseError(f"{_where(self.text, tok[2])}: {message}")

    def expect(self, text):
        tok = self.next()
        if tok[1] != text:
            raise self.error(f"expected {text!r}, got {tok[1] or 'end of text'!r}", tok)
        return tok

    def accept(self, text) -> bool:
        if self.peek()[1] == text:
            self.i += 1
            return True
        return False

    # -- pieces -------------------------------------------------------------------------------
    def name(self) -> str:
        tok = self.next()
        if tok[0] != "value":
            raise self.error(f"expected a %name, got {tok[1]!r}", tok)
        body = tok[1][1:]
        return json.loads(body) if body.startswith('"') else body

    def type(self) -> TensorType:
        tok = self.next()
        if tok[0] != "ident":
            raise self.error(f"expected a type like f32[2, 3], got {tok[1]!r}", tok)
        try:
            dtype = parse_dtype(tok[1])
        except ValueError as e:
            raise self.error(str(e), tok) from None
        self.expect("[")
        dims = []
        while not self.accept("]"):
            d = self.next()
            dims.append(int(d[1]) if d[0] == "number" else d[1])
            if self.peek()[1] != "]":
                self.expect(",")
        return TensorType(tuple(dims), dtype)

    def types(self) -> list[TensorType]:
        if not self.accept("("):
            return [self.type()]
        out = [self.type()]
        while self.accept(","):
            out.append(self.type())
        self.expect(")")
        return out

    def literal(self):
        tok = self.next()
        kind, text = tok[0], tok[1]
        if text == "[":
            items = []
            while not self.accept("]"):
                items.append(self.literal())
                if self.peek()[1] != "]":
                    self.expect(",")
            return items
        if kind == "number":
            is_float = any(c in text for c in ".eE") or text.lstrip("-") in ("inf", "nan")
            return float(text) if is_float else int(text)
        if kind == "string":
            return json.loads(text)
        if kind == "ident":
            if text == "fn":  # a nested function (the body of a `fused` call)
                return self.function_body(self.next()[1])
            if text in ("true", "false", "none"):
                return {"true": True, "false": False, "none": None}[text]
            try:
                return parse_dtype(text)
            except ValueError:
                raise self.error(f"unknown word {text!r} in an attribute", tok) from None
        raise self.error(f"expected a value, got {text!r}", tok)


def _tuple(v):
    return tuple(_tuple(x) for x in v) if isinstance(v, list) else v


class _FunctionParser(_Parser):
    def function(self) -> Function:
        self.expect("def")
        return self.function_body(self.next()[1])

    def function_body(self, fname: str) -> Function:
        outer, self.scope = getattr(self, "scope", None), {}  # a nested fn sees only its params
        self.expect("(")
        params = []
        while not self.accept(")"):
            name = self.name()
            self.expect(":")
            params.append(self.define(name, Value(name, self.type())))
            if self.peek()[1] != ")":
                self.expect(",")
        self.expect("{")
        body, constants = [], []
        while not self.accept("return"):
            item = self.statement()
            (constants if isinstance(item, Constant) else body).append(item)
        outputs = [self.use(self.name())]
        while self.accept(","):
            outputs.append(self.use(self.name()))
        self.accept(";")
        self.expect("}")
        func = Function(fname, tuple(params), tuple(body), tuple(outputs), tuple(constants))
        func.verify()
        self.scope = outer
        return func

    def define(self, name, value):
        if name in self.scope:
            raise self.error(f"%{name} is defined twice")
        self.scope[name] = value
        return value

    def use(self, name):
        if name not in self.scope:
            raise self.error(f"%{name} is used before it is defined")
        return self.scope[name]

    def statement(self):
        names = [self.name()]
        while self.accept(","):
            names.append(self.name())
        self.expect("=")
        tok = self.next()
        if tok[1] == "constant":
            return self.constant(names, tok)
        try:
            op = get_op(tok[1])
        except ValueError as e:
            raise self.error(str(e), tok) from None
        inputs, attrs = self.arguments()
        declared = None
        if self.accept(":"):
            declared = self.types()
        span = self.span() if self.accept("@") else ()
        self.expect(";")
        try:
            types = op.infer_type([v.type for v in inputs], attrs)
        except (TypeError, ValueError) as e:
            raise self.error(str(e), tok) from None
        if declared is not None and list(types) != declared:
            shown = ", ".join(map(str, types))
            said = ", ".join(map(str, declared))
            raise self.error(f"{op.name} gives {shown}, the text says {said}", tok)
        if len(types) != len(names):
            raise self.error(f"{op.name} has {len(types)} outputs, {len(names)} names given", tok)
        outs = tuple(self.define(n, Value(n, t)) for n, t in zip(names, types, strict=True))
        return Call(op, tuple(inputs), attrs, outs, span)

    def span(self) -> tuple[str, ...]:
        """`@"conv1", "relu1"`: the source node names of a call (after the `@`)."""
        names = []
        while True:
            tok = self.next()
            if tok[0] != "string":
                raise self.error(f'expected a source node name like "conv1", got {tok[1]!r}', tok)
            names.append(json.loads(tok[1]))
            if not self.accept(","):
                return tuple(names)

    def arguments(self):
        self.expect("(")
        inputs, attrs = [], {}
        while not self.accept(")"):
            if self.peek()[0] == "value":
                inputs.append(self.use(self.name()))
            else:
                key = self.next()[1]
                self.expect("=")
                attrs[key] = _tuple(self.literal())
            if self.peek()[1] != ")":
                self.expect(",")
        return inputs, attrs

    def constant(self, names, tok):
        if len(names) != 1:
            raise self.error("a constant defines one value", tok)
        self.expect("(")
        if self.accept("..."):
            if names[0] not in self.constants:
                raise self.error(f"the data of constant %{names[0]} was not given", tok)
            data = np.asarray(self.constants[names[0]])
        else:
            data = self.literal()
        self.expect(")")
        self.expect(":")
        ty = self.type()
        self.expect(";")
        data = np.asarray(data, dtype=ty.dtype.numpy_name)
        if data.size == 0 and ty.is_static and ty.size == 0:
            data = data.reshape(ty.shape)  # `[]` is every empty shape: f32[0, 3] prints as []
        if data.shape != ty.shape:
            raise self.error(f"constant %{names[0]} has shape {data.shape}, type says {ty}", tok)
        return self.define(names[0], Constant(names[0], ty, data))


def parse_function(text: str, constants: dict | None = None) -> Function:
    """Parse the text of one graph function."""
    p = _FunctionParser(text, constants)
    func = p.function()
    if p.peek()[0] != "eof":
        raise p.error("text continues after the function")
    return func


def parse_module(text: str, constants: dict | None = None) -> IRModule:
    """Parse one or more graph functions into an IRModule."""
    p = _FunctionParser(text, constants)
    mod = IRModule()
    while p.peek()[0] != "eof":
        func = p.function()
        mod[func.name] = func
    return mod


parse = parse_function
