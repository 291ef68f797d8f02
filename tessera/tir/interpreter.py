"""A reference interpreter for tir: run a PrimFunc on numpy arrays, in Python.

It is the ground truth that passes and code generators are checked against:

    interpret(func, a, b, c)               # buffers are numpy arrays, written in place
    args = random_arguments(func, {"n": 37})
    interpret(func, *args)

Semantics are those of the code generators: integers wrap around at their width, `/` and `%`
on integers truncate (C), `//` and `%` of the Python operators floor, `if_then_else` evaluates
only the side taken (on vectors, a side's loads are checked and read only in the lanes
that take it), loops of every kind run
in order (a PARALLEL or THREAD_BINDING loop runs serially). Vector values are 1-D numpy arrays of
`lanes` elements; a vector index loads or stores those lanes (gather/scatter). Every load and
store is bounds-checked (IndexError naming the buffer). Allocations are filled with a poison
value (NaN, or the smallest integer) so reading memory before writing it shows. bfloat16 values
are computed as float32 rounded to bfloat16 precision and stored as uint16 bits.

The tree is compiled once into Python closures, so a loop body is not re-dispatched per node.
"""

from __future__ import annotations

import math

import numpy as np

from tessera.ir.dtype import DType
from tessera.tir import expr as E
from tessera.tir import stmt as S
from tessera.tir.buffer import Buffer
from tessera.tir.function import PrimFunc


class InterpreterError(RuntimeError):
    """The IR asks for something the interpreter cannot run (or a run-time fault such as x / 0)."""


def interpret(func: PrimFunc, *args) -> None:
    """Run `func` with one argument per parameter: numpy arrays for buffers, scalars for vars.

    Arrays must have the buffer's dtype (bfloat16: uint16) and the shape the caller sees
    (`func.param_shape`), and be C-contiguous; they are updated in place. Symbolic dimensions
    are bound from the arrays' shapes.
    """
    if len(args) != len(func.params):
        raise TypeError(f"{func.name} takes {len(func.params)} arguments, got {len(args)}")
    env: dict[int, object] = {}
    buffers: list[tuple[Buffer, np.ndarray]] = []
    for p, a in zip(func.params, args, strict=True):
        if isinstance(p, Buffer):
            buffers.append((p, _check_array(func, p, a)))
        else:
            env[id(p)] = _scalar(a, p.dtype)
    for p, a in buffers:
        _bind_shape(func, p, a, env)
    for p, a in buffers:
        shape = tuple(int(_eval_expr(d, env)) for d in p.shape)
        env[id(p)] = a.reshape(shape)  # a view: the flat buffer of a flattened param
    with np.errstate(all="ignore"):
        _compile_stmt(func.body)(env)


def random_arguments(func: PrimFunc, var_values: dict | None = None, seed: int = 0) -> list:
    """Arguments for `interpret(func, *args)`: random arrays (and var values by name).

    `var_values` maps the names of scalar params and symbolic shape vars to their values.
    """
    var_values = dict(var_values or {})
    rng = np.random.default_rng(seed)
    env = {}
    for v in func.scalar_vars():
        if v.name not in var_values:
            raise ValueError(f"random_arguments: give a value for the variable {v.name!r}")
        env[id(v)] = _scalar(var_values[v.name], v.dtype)
    out = []
    for p in func.params:
        if isinstance(p, Buffer):
            shape = tuple(int(_eval_expr(d, env)) for d in func.param_shape(p))
            out.append(_random_array(rng, shape, p.dtype))
        else:
            out.append(var_values[p.name])
    return out


def _random_array(rng, shape, dtype: DType) -> np.ndarray:
    if dtype.is_float:
        data = rng.standard_normal(shape).astype(np.float32)
        return _bf16_bits(data) if dtype.code == "bfloat" else data.astype(dtype.numpy_name)
    if dtype.is_bool:
        return rng.integers(0, 2, shape).astype(np.bool_)
    return rng.integers(-50 if dtype.is_int else 0, 50, shape).astype(dtype.numpy_name)


def _check_array(func, buf: Buffer, a) -> np.ndarray:
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{func.name}: buffer {buf.name} expects a numpy array, got {type(a)}")
    if a.dtype != np.dtype(buf.dtype.numpy_name):
        raise TypeError(f"{func.name}: buffer {buf.name} has dtype {buf.dtype}, array {a.dtype}")
    if not a.flags.c_contiguous:
        raise ValueError(f"{func.name}: the array for buffer {buf.name} is not C-contiguous")
    return a


def _bind_shape(func, buf: Buffer, a: np.ndarray, env) -> None:
    shape = func.param_shape(buf)
    if len(shape) != a.ndim:
        raise ValueError(f"{func.name}: buffer {buf.name} has {len(shape)} dims, array {a.shape}")
    for d, n in zip(shape, a.shape, strict=True):
        if isinstance(d, E.Var) and id(d) not in env:
            env[id(d)] = _scalar(n, d.dtype)
    for d, n in zip(shape, a.shape, strict=True):
        if int(_eval_expr(d, env)) != n:
            want = ", ".join(str(s) for s in shape)
            raise ValueError(f"{func.name}: buffer {buf.name} has shape [{want}], array {a.shape}")


# ---------------------------------------------------------------------------------------------
# values


def _np_dtype(dt: DType):
    if dt.code == "bfloat":
        return np.float32  # computed as float32, rounded to bfloat16 precision
    if dt.is_bool:
        return np.bool_
    return np.dtype(dt.element.numpy_name).type


def _scalar(value, dt: DType):
    if dt.is_handle:
        return value
    v = _np_dtype(dt)(value)
    return _round_bf16(v) if dt.code == "bfloat" else v


def _cast(value, dt: DType):
    """value as dtype dt (lanes are the value's own)."""
    t = _np_dtype(dt)
    if dt.is_bool:
        out = np.not_equal(value, 0)
    elif isinstance(value, np.ndarray):
        out = value.astype(t)
    else:
        out = t(value)
    return _round_bf16(out) if dt.code == "bfloat" else out


def _bf16_bits(x) -> np.ndarray:
    """float32 -> bfloat16 bits (uint16), rounding to nearest even."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    nan = np.isnan(np.asarray(x, np.float32))
    return np.where(nan, 0x7FC0, rounded).astype(np.uint16)


def _bf16_value(bits) -> np.ndarray:
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


def _round_bf16(x):
    out = _bf16_value(_bf16_bits(x))
    return out if isinstance(x, np.ndarray) else np.float32(out)


def _poison(shape, dt: DType) -> np.ndarray:
    if dt.is_float:
        fill = 0x7FC0 if dt.code == "bfloat" else np.nan
    elif dt.is_bool:
        fill = True
    else:
        fill = dt.min_value()
    return np.full(shape, fill, dtype=dt.numpy_name)


def _eval_expr(e: E.Expr, env):
    return _compile_expr(e)(env)


# ---------------------------------------------------------------------------------------------
# expressions: each compiles to a closure env -> value


def _compile_expr(e):
    fn = _EXPR.get(type(e))
    if fn is None:
        raise InterpreterError(f"the interpreter cannot evaluate {type(e).__name__}: {e}")
    return fn(e)


def _var(e: E.Var):
    key = id(e)

    def run(env):
        try:
            return env[key]
        except KeyError:
            raise InterpreterError(f"variable {e.name} is used but has no value") from None

    return run


def _imm(e):
    value = _scalar(e.value, e.dtype)
    return lambda env: value


def _string(e):
    return lambda env: e.value


def _int_div(a, b, floor: bool):
    # by zero: 0, and INT_MIN / -1 wraps, as numpy and the code generators do (the contract in
    # docs/architecture.md)
    q = np.floor_divide(a, b)
    if not floor:  # C truncates toward zero: step back up where the signs differ
        fix = np.not_equal(np.remainder(a, b), 0) & np.not_equal(np.less(a, 0), np.less(b, 0))
        q = q + fix.astype(q.dtype)
    return q


def _int_mod(a, b, floor: bool):
    return np.remainder(a, b) if floor else np.fmod(a, b)


def _div(a, b, is_float):
    return np.true_divide(a, b) if is_float else _int_div(a, b, floor=False)


def _floordiv(a, b, is_float):
    return np.floor(np.true_divide(a, b)) if is_float else _int_div(a, b, floor=True)


def _mod(a, b, is_float):
    return np.fmod(a, b) if is_float else _int_mod(a, b, floor=False)


def _floormod(a, b, is_float):
    return a - np.floor(np.true_divide(a, b)) * b if is_float else _int_mod(a, b, floor=True)


_ARITH = {
    E.Add: lambda a, b, f: np.add(a, b),
    E.Sub: lambda a, b, f: np.subtract(a, b),
    E.Mul: lambda a, b, f: np.multiply(a, b),
    E.Div: _div,
    E.Mod: _mod,
    E.FloorDiv: _floordiv,
    E.FloorMod: _floormod,
    E.Min: lambda a, b, f: np.minimum(a, b),
    E.Max: lambda a, b, f: np.maximum(a, b),
}

_COMPARE = {
    E.EQ: np.equal,
    E.NE: np.not_equal,
    E.LT: np.less,
    E.LE: np.less_equal,
    E.GT: np.greater,
    E.GE: np.greater_equal,
}


def _binary(e):
    fa, fb, op = _compile_expr(e.a), _compile_expr(e.b), _ARITH[type(e)]
    dt, is_float = e.dtype, e.dtype.is_float
    return lambda env: _cast(op(fa(env), fb(env), is_float), dt)


def _compare(e):
    fa, fb, op = _compile_expr(e.a), _compile_expr(e.b), _COMPARE[type(e)]
    return lambda env: op(fa(env), fb(env))


def _logic(e):
    fa, fb = _compile_expr(e.a), _compile_expr(e.b)
    op = np.logical_and if isinstance(e, E.And) else np.logical_or
    return lambda env: op(fa(env), fb(env))


def _not(e):
    fa = _compile_expr(e.a)
    return lambda env: np.logical_not(fa(env))


def _select(e):
    fc, ft, ff = (_compile_expr(x) for x in (e.condition, e.true_value, e.false_value))
    dt = e.dtype

    def run(env):
        c, t, f = fc(env), ft(env), ff(env)
        return _cast(np.where(c, t, f), dt) if dt.lanes > 1 else (t if c else f)

    return run


def _cast_expr(e):
    fv, dt = _compile_expr(e.value), e.dtype
    if e.value.dtype.lanes != dt.lanes and e.value.dtype.lanes != 1:
        raise InterpreterError(f"cast of {e.value.dtype} to {dt}: lanes differ")
    if dt.lanes > 1 and e.value.dtype.lanes == 1:
        return lambda env: _cast(np.full(dt.lanes, fv(env)), dt)
    return lambda env: _cast(fv(env), dt)


def _let(e):
    fv, fb, key = _compile_expr(e.value), _compile_expr(e.body), id(e.var)

    def run(env):
        old = env.get(key, _MISSING)
        env[key] = fv(env)
        try:
            return fb(env)
        finally:
            _restore(env, key, old)

    return run


_MISSING = object()
_MASK = "active lanes"  # env key of the lanes a vector if_then_else is evaluating (ids are ints)


def _restore(env, key, old):
    if old is _MISSING:
        env.pop(key, None)
    else:
        env[key] = old


def _ramp(e):
    fb, fs, dt = _compile_expr(e.base), _compile_expr(e.stride), e.dtype
    steps = np.arange(e.lanes)
    return lambda env: _cast(fb(env) + fs(env) * steps, dt)


def _broadcast(e):
    fv, lanes, dt = _compile_expr(e.value), e.lanes, e.dtype
    return lambda env: _cast(np.full(lanes, fv(env)), dt)


def _buffer_of(env, buf):
    try:
        return env[id(buf)]
    except KeyError:
        raise InterpreterError(f"buffer {buf.name} is used outside its allocation") from None


def _indices(buf, arr, idx, what, mask=None):
    idx = tuple(idx)
    if mask is not None:  # lanes outside the mask are not read: point them at element 0
        idx = tuple(np.where(mask, i, 0) if np.shape(i) == mask.shape else i for i in idx)
    for k, (i, n) in enumerate(zip(idx, arr.shape, strict=True)):
        if np.any(np.less(i, 0)) or np.any(np.greater_equal(i, n)):
            raise IndexError(f"{what} {buf.name}: index {i} out of bounds [0, {n}) in dim {k}")
    if len(idx) > 1 and any(isinstance(i, np.ndarray) for i in idx):
        idx = np.broadcast_arrays(*idx)
        return tuple(np.asarray(i, np.int64) for i in idx)
    return tuple(np.asarray(i, np.int64) if isinstance(i, np.ndarray) else int(i) for i in idx)


def _load(e: E.BufferLoad):
    buf = e.buffer
    if buf.dtype.lanes != 1:
        raise InterpreterError(f"buffer {buf.name}: vector element types are not supported")
    if len(e.indices) != buf.ndim:
        raise InterpreterError(f"load of {buf.name}: {len(e.indices)} indices, {buf.ndim} dims")
    fidx = [_compile_expr(i) for i in e.indices]
    bf16 = buf.dtype.code == "bfloat"

    def run(env):
        arr = _buffer_of(env, buf)
        v = arr[_indices(buf, arr, (f(env) for f in fidx), "load of", env.get(_MASK))]
        return _bf16_value(v) if bf16 else v

    return run


_EXPR = {
    E.Var: _var,
    E.IntImm: _imm,
    E.FloatImm: _imm,
    E.StringImm: _string,
    E.And: _logic,
    E.Or: _logic,
    E.Not: _not,
    E.Select: _select,
    E.Cast: _cast_expr,
    E.Let: _let,
    E.Ramp: _ramp,
    E.Broadcast: _broadcast,
    E.BufferLoad: _load,
}
_EXPR.update({cls: _binary for cls in _ARITH})
_EXPR.update({cls: _compare for cls in _COMPARE})


# ---------------------------------------------------------------------------------------------
# intrinsic calls

_erf = np.vectorize(math.erf, otypes=[np.float64])

_MATH = {
    "exp": np.exp,
    "exp2": np.exp2,
    "log": np.log,
    "log2": np.log2,
    "log10": np.log10,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x),
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "tanh": np.tanh,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "erf": _erf,
    "pow": np.power,
    "atan2": np.arctan2,
    "fmod": np.fmod,
    "floor": np.floor,
    "ceil": np.ceil,
    "round": np.round,
    "trunc": np.trunc,
    "isnan": np.isnan,
    "isinf": np.isinf,
    "abs": np.abs,
    "fma": lambda a, b, c: np.add(np.multiply(a, b, dtype=np.float64), c, dtype=np.float64),
    "bitwise_and": np.bitwise_and,
    "bitwise_or": np.bitwise_or,
    "bitwise_xor": np.bitwise_xor,
    "bitwise_not": np.invert,
    "shift_left": np.left_shift,
    "shift_right": np.right_shift,  # arithmetic on signed types, like C compilers do
    "popcount": np.bitwise_count,
    "likely": lambda x: x,
    "dot_u8i8": lambda acc, a, b: _dot_u8i8(acc, a, b),
    "dot_u8i8_bounded": lambda acc, a, b: _dot_u8i8(acc, a, b),  # the promise aside, the same
    "dot_bf16": lambda acc, a, b: _dot_bf16(acc, a, b),
    "mmla_u8i8": lambda acc, a, b: _mmla_u8i8(acc, a, b),
}


def _dot_bf16(acc, a, b):
    """acc + hi(a) hi(b) + lo(a) lo(b) per float32 lane, each step rounded to float32 (the
    products of two bfloat16 are exact in float32), high halves first, as vdpbf16ps."""
    a32, b32 = np.asarray(a, np.int32).view(np.uint32), np.asarray(b, np.int32).view(np.uint32)

    def half(w, hi):
        return ((w & np.uint32(0xFFFF0000)) if hi else (w << np.uint32(16))).view(np.float32)

    out = np.asarray(acc, np.float32) + half(a32, True) * half(b32, True)
    return (out + half(a32, False) * half(b32, False)).astype(np.float32)


def _dot_u8i8(acc, a, b):
    """acc + the 4 uint8 bytes of a times the 4 int8 bytes of b, per int32 lane (wrapping)."""
    a8 = np.asarray(a, np.int32).reshape(-1).view(np.uint8).reshape(-1, 4).astype(np.int64)
    b8 = np.asarray(b, np.int32).reshape(-1).view(np.int8).reshape(-1, 4).astype(np.int64)
    dot = (a8 * b8).sum(axis=1)
    out = (np.asarray(acc, np.int64).reshape(-1) + dot).astype(np.int32)
    return out if np.ndim(a) or np.ndim(b) or np.ndim(acc) else out[0]


def _mmla_u8i8(acc, a, b):
    """usmmla per 4-lane segment (tir.op.mmla_u8i8): lane 2i + j is acc + a's row i (lanes 2i,
    2i + 1: 8 uint8) dot b's row j (8 int8), as two dot_u8i8 steps."""
    a, b = np.asarray(a, np.int32).reshape(-1), np.asarray(b, np.int32).reshape(-1)
    if a.size % 4 or b.size != a.size:
        raise InterpreterError(f"mmla_u8i8 takes whole 4-lane segments, got {a.size} lanes")
    lane = np.arange(a.size)
    seg, i, j = lane - lane % 4, (lane % 4) // 2, lane % 2
    first = _dot_u8i8(acc, a[seg + 2 * i], b[seg + 2 * j])
    return _dot_u8i8(first, a[seg + 2 * i + 1], b[seg + 2 * j + 1])


def _call(e: E.Call):
    if e.op == "if_then_else":
        return _if_then_else(e)
    if e.op == "reinterpret":
        return _reinterpret(e)
    if e.op == "prefetch":  # a cache hint: nothing to compute, the element is not read
        return lambda env: np.int32(0)
    fn = _MATH.get(e.op)
    if fn is None:
        raise InterpreterError(f"the interpreter does not know the intrinsic {e.op!r}")
    fargs, dt = [_compile_expr(a) for a in e.args], e.dtype
    return lambda env: _cast(fn(*(f(env) for f in fargs)), dt)


def _if_then_else(e: E.Call):
    fc, ft, ff = (_compile_expr(a) for a in e.args)
    dt = e.dtype

    def run(env):
        c = fc(env)
        if not isinstance(c, np.ndarray):
            return _cast(ft(env) if c else ff(env), dt)
        # A vector condition: each side runs with the lanes that take it as the active mask, so
        # a guarded load is only bounds-checked (and read) in the lanes where it is taken.
        outer = env.get(_MASK)
        env[_MASK] = c if outer is None else outer & c
        t = ft(env)
        env[_MASK] = ~c if outer is None else outer & ~c
        f = ff(env)
        _restore(env, _MASK, _MISSING if outer is None else outer)
        return _cast(np.where(c, t, f), dt)

    return run


def _reinterpret(e: E.Call):
    fv, dt = _compile_expr(e.args[0]), e.dtype
    src = e.args[0].dtype
    if src.bits * src.lanes != dt.bits * dt.lanes:
        raise InterpreterError(f"reinterpret of {src} as {dt}: sizes differ")

    def run(env):
        v = np.asarray(fv(env), _np_dtype(src)).reshape(-1)
        out = v.view(np.dtype(dt.numpy_name))
        return out if dt.lanes > 1 else out[0]

    return run


_EXPR[E.Call] = _call


# ---------------------------------------------------------------------------------------------
# statements: each compiles to a closure env -> None


def _compile_stmt(s):
    fn = _STMT.get(type(s))
    if fn is None:
        raise InterpreterError(f"the interpreter cannot run {type(s).__name__}")
    return fn(s)


def _store(s: S.BufferStore):
    buf = s.buffer
    if len(s.indices) != buf.ndim:
        raise InterpreterError(f"store to {buf.name}: {len(s.indices)} indices, {buf.ndim} dims")
    fidx, fv = [_compile_expr(i) for i in s.indices], _compile_expr(s.value)
    dt, bf16 = buf.dtype, buf.dtype.code == "bfloat"

    def run(env):
        arr = _buffer_of(env, buf)
        idx = _indices(buf, arr, (f(env) for f in fidx), "store to")
        value = _cast(fv(env), dt)
        arr[idx] = _bf16_bits(value) if bf16 else value

    return run


def _for(s: S.For):
    fmin, fext, fbody, key = (
        _compile_expr(s.min),
        _compile_expr(s.extent),
        _compile_stmt(s.body),
        id(s.loop_var),
    )
    t = _np_dtype(s.loop_var.dtype)

    def run(env):
        lo = int(fmin(env))
        old = env.get(key, _MISSING)
        for i in range(lo, lo + int(fext(env))):
            env[key] = t(i)
            fbody(env)
        _restore(env, key, old)

    return run


def _if(s: S.IfThenElse):
    fc, ft = _compile_expr(s.condition), _compile_stmt(s.then_case)
    ff = _compile_stmt(s.else_case) if s.else_case is not None else None
    if s.condition.dtype.lanes != 1:
        raise InterpreterError("IfThenElse needs a scalar condition")

    def run(env):
        if fc(env):
            ft(env)
        elif ff is not None:
            ff(env)

    return run


def _seq(s: S.SeqStmt):
    fns = [_compile_stmt(x) for x in s.seq]

    def run(env):
        for f in fns:
            f(env)

    return run


def _evaluate(s: S.Evaluate):
    fv = _compile_expr(s.value)

    def run(env):
        fv(env)

    return run


def _let_stmt(s: S.LetStmt):
    fv, fb, key = _compile_expr(s.value), _compile_stmt(s.body), id(s.var)

    def run(env):
        old = env.get(key, _MISSING)
        env[key] = fv(env)
        fb(env)
        _restore(env, key, old)

    return run


def _allocate(s: S.Allocate):
    buf = s.buffer
    fshape, fb, key = [_compile_expr(d) for d in buf.shape], _compile_stmt(s.body), id(buf)

    def run(env):
        old = env.get(key, _MISSING)
        env[key] = _poison(tuple(int(f(env)) for f in fshape), buf.dtype)
        fb(env)
        _restore(env, key, old)

    return run


def _attr(s: S.AttrStmt):
    return _compile_stmt(s.body)


_STMT = {
    S.BufferStore: _store,
    S.For: _for,
    S.IfThenElse: _if,
    S.SeqStmt: _seq,
    S.Evaluate: _evaluate,
    S.LetStmt: _let_stmt,
    S.Allocate: _allocate,
    S.AttrStmt: _attr,
}


def assert_same_results(before: PrimFunc, after: PrimFunc, var_values=None, seed: int = 0):
    """Run both functions on the same random arguments and assert every buffer ends up equal.

    The check a pass test makes: `assert_same_results(f, my_pass(f), {"n": 37})`. Floats are
    compared to 1e-6 relative (a pass may not reassociate, but a vector math call may round
    differently from a scalar one); integers exactly.
    """
    args = random_arguments(before, var_values, seed)
    copies = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    interpret(before, *args)
    interpret(after, *copies)
    for p, want, got in zip(before.params, args, copies, strict=True):
        if isinstance(want, np.ndarray):
            np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=f"buffer {p.name} differs")
