"""Element-wise activations (tag "elemwise") and prelu (tag "broadcast").

    y = ACTIVATIONS["gelu"](x, approximate="tanh")
    y = prelu(x, slope)            # slope broadcasts to x (numpy rules)

Each activation takes the same keyword attributes, with the same defaults, as its numpy
reference in `graph/ops/nn_ref.py`, and computes in the input dtype. Formulas that overflow or
lose precision when written naively (softplus, mish, log1p) use their stable forms.
"""

from __future__ import annotations

import math

from tessera import te


def _elemwise(x: te.Tensor, f, name: str) -> te.Tensor:
    return te.compute(x.shape, lambda *i: f(x(*i)), name=name, tag="elemwise")


def _zero(v):
    return te.const(0, v.dtype)


def _clip(v, lo, hi):
    return te.min(te.max(v, te.const(lo, v.dtype)), te.const(hi, v.dtype))


def _log1p(u):
    """log(1 + u) accurate for tiny u (Goldberg): log(w) * u / (w - 1) with w = 1 + u."""
    w = u + 1.0
    return te.select(w == 1.0, u, te.log(w) * u / (w - 1.0))


def _softplus(v):
    # log(1 + e^v) = max(v, 0) + log1p(e^-|v|): never overflows
    return te.max(v, _zero(v)) + _log1p(te.exp(-te.abs(v)))


def _expm1(v):
    """e^v - 1 without cancellation near 0: expm1(v) = 2t / (1 - t) with t = tanh(v / 2)."""
    t = te.tanh(v * 0.5)
    return te.select(te.abs(v) < 0.5, 2.0 * t / (1.0 - t), te.exp(v) - 1.0)


def relu(x):
    return _elemwise(x, lambda v: te.max(v, _zero(v)), "relu")


def leaky_relu(x, alpha=0.01):
    return _elemwise(x, lambda v: te.select(v < 0, v * alpha, v), "leaky_relu")


def elu(x, alpha=1.0):
    return _elemwise(x, lambda v: te.select(v < 0, _expm1(v) * alpha, v), "elu")


def celu(x, alpha=1.0):
    def f(v):
        return te.max(v, _zero(v)) + te.min(_zero(v), _expm1(v / alpha) * alpha)

    return _elemwise(x, f, "celu")


def selu(x, alpha=1.67326319217681884765625, gamma=1.05070102214813232421875):
    return _elemwise(x, lambda v: te.select(v <= 0, _expm1(v) * alpha, v) * gamma, "selu")


def thresholded_relu(x, alpha=1.0):
    return _elemwise(x, lambda v: te.select(v > alpha, v, _zero(v)), "thresholded_relu")


def gelu(x, approximate="none"):
    if approximate not in ("none", "tanh"):
        raise ValueError(f"nn.gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    if approximate == "tanh":
        c = math.sqrt(2 / math.pi)

        def f(v):
            return v * 0.5 * (te.tanh((v + v * v * v * 0.044715) * c) + 1.0)

    else:

        def f(v):
            return v * 0.5 * (te.erf(v * (1 / math.sqrt(2))) + 1.0)

    return _elemwise(x, f, "gelu")


def hardsigmoid(x, alpha=0.2, beta=0.5):
    return _elemwise(x, lambda v: _clip(v * alpha + beta, 0, 1), "hardsigmoid")


def hardswish(x):
    return _elemwise(x, lambda v: v * _clip(v * (1 / 6) + 0.5, 0, 1), "hardswish")


def softplus(x):
    return _elemwise(x, _softplus, "softplus")


def softsign(x):
    return _elemwise(x, lambda v: v / (te.abs(v) + 1.0), "softsign")


def mish(x):
    return _elemwise(x, lambda v: v * te.tanh(_softplus(v)), "mish")


def shrink(x, bias=0.0, lambd=0.5):
    def f(v):
        return te.select(v < -lambd, v + bias, te.select(v > lambd, v - bias, _zero(v)))

    return _elemwise(x, f, "shrink")


def prelu(x: te.Tensor, slope: te.Tensor) -> te.Tensor:
    """x where x >= 0, else x * slope; slope broadcasts to x from the right (numpy)."""
    lead = x.ndim - slope.ndim

    def f(*i):
        idx = [0 if _is_one(slope.shape[k]) else i[lead + k] for k in range(slope.ndim)]
        v = x(*i)
        return te.select(v < 0, v * slope(*idx), v)

    return te.compute(x.shape, f, name="prelu", tag="broadcast")


def _is_one(dim) -> bool:
    return getattr(dim, "value", None) == 1


ACTIVATIONS = {
    f.__name__: f
    for f in (
        relu,
        leaky_relu,
        elu,
        celu,
        selu,
        thresholded_relu,
        gelu,
        hardsigmoid,
        hardswish,
        softplus,
        softsign,
        mish,
        shrink,
    )
}
