"""The step loop of a recurrent layer (RNN, GRU, LSTM) as one kernel written in tir, for a
sequence length known only at run time (Note [recurrence kernel]).

    y, h, c = recurrence_func("LSTM", [xp, r, h0, c0], [y, h, c], acts, clip=None)

`xp` [seq, batch, gates * hidden] is the input already projected (X W^T + biases, one dense over
seq * batch rows, done before by the graph), `r` [hidden, gates * hidden] the recurrent weights
transposed; per step and batch row the kernel adds h R^T, applies the gates and updates the
states, which live in the h (and c) outputs.
"""

from __future__ import annotations

from tessera import tir
from tessera.tir.buffer import Buffer
from tessera.tir.expr import Var, const
from tessera.tir.stmt import Allocate, BufferStore, For, ForKind, IfThenElse, seq

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def activation(name: str, alpha, beta):
    """The tir form of an ONNX recurrent activation (names lower-case), alpha/beta given."""

    def c(v, x):
        return const(float(v), x.dtype)

    table = {
        "sigmoid": tir.sigmoid,
        "tanh": tir.tanh,
        "relu": lambda x: tir.max(x, c(0, x)),
        "leakyrelu": lambda x: tir.select(x < c(0, x), c(alpha, x) * x, x),
        "thresholdedrelu": lambda x: tir.select(x > c(alpha, x), x, c(0, x)),
        "hardsigmoid": lambda x: tir.max(c(0, x), tir.min(c(1, x), c(alpha, x) * x + c(beta, x))),
        "elu": lambda x: tir.select(x < c(0, x), c(alpha, x) * (tir.exp(x) - c(1, x)), x),
        "softsign": lambda x: x / (c(1, x) + tir.abs(x)),
        "softplus": lambda x: tir.log(c(1, x) + tir.exp(x)),
        "affine": lambda x: c(alpha, x) * x + c(beta, x),
        "scaledtanh": lambda x: c(alpha, x) * tir.tanh(c(beta, x) * x),
    }
    return table[name]


def _loop(name, extent, body, kind=ForKind.SERIAL):
    v = Var(name, "int32")
    return For(v, const(0, "int32"), extent, kind, body(v))


def _vloop(name, extent: int, lanes: int, body):
    """for j in [0, extent): body(j), as vectors of `lanes` (a VECTORIZED inner loop) and a
    serial tail of extent % lanes."""
    main, tail = divmod(extent, lanes) if lanes > 1 else (0, extent)
    parts = []
    if main:
        parts.append(_loop(f"{name}.o", main, lambda jo: _loop(
            f"{name}.v", lanes, lambda jv: body(jo * lanes + jv), ForKind.VECTORIZED)))  # fmt: skip
    if tail:
        parts.append(_loop(f"{name}.t", tail, lambda jt: body(jt + main * lanes)))
    return seq(*parts)


def recurrence_func(kind, ins, outs, acts, clip, *, masked=False, peepholes=False, reverse=False,
                    linear_before_reset=0, input_forget=0, lanes=1, accumulators=2,
                    rows_per_block=4, name="recurrence"):  # fmt: skip
    """The PrimFunc of the step loop. `ins`: xp, r, h0, [c0 (LSTM)], [lens (masked)],
    [p (peepholes)], [rbh (GRU, linear_before_reset)]; `outs`: y, h, [c]; `acts`: one tir
    function per activation of the cell; `lanes`: the vector width of the loops over the gates
    and hidden units; `accumulators`: the vectors of gates per batch row each pass over R^T's
    rows keeps in registers, for `rows_per_block` batch rows at once (Note [recurrence
    kernel])."""
    ins, outs = list(ins), list(outs)
    xp, r, h0 = ins[:3]
    rest = ins[3:]
    c0 = rest.pop(0) if kind == "LSTM" else None
    lens = rest.pop(0) if masked else None
    peep = rest.pop(0) if peepholes else None
    rbh = rest.pop(0) if kind == "GRU" and linear_before_reset and rest else None
    y, h = outs[:2]
    c = outs[2] if kind == "LSTM" else None
    nseq, batch, _ = xp.shape
    hid = h.shape[1]
    nh = int(hid.value)
    dtype = xp.dtype
    ng = GATES[kind] * nh
    g = Buffer("rec_gates", (const(rows_per_block * ng, "int32"),), dtype, "local")
    # GRU: r * h, the input of its candidate, per row of a block
    rh = Buffer("rec_rh", (const(rows_per_block * nh, "int32"),), dtype, "local")
    hn = Buffer("rec_h", (hid,), dtype, "local")  # the new states of a row
    cn = Buffer("rec_c", (hid,), dtype, "local")

    def pre(x):
        if clip is None:
            return x
        return tir.min(tir.max(x, const(-float(clip), dtype)), const(float(clip), dtype))

    def act(k, x):
        return acts[k](pre(x))

    def init(b):
        body = [_loop("k", hid, lambda k: BufferStore(h, h0[b, k], (b, k)))]
        if c is not None:
            body.append(_loop("k", hid, lambda k: BufferStore(c, c0[b, k], (b, k))))
        return seq(*body)

    def matvec(rows, lo, hi, with_x):
        """For each row q of `rows` ((t, b, src) each): g[q, j] = (xp[t, b, j] if with_x else
        0) + sum_k src(k) r[k, j] for j in [lo, hi): per block of `accumulators` vectors, the
        k loop inside (the rows' blocks stay in registers, each load of R^T serves every row),
        then blocks of one vector, then a serial tail."""
        parts, start = [], lo
        for width in (lanes * accumulators, lanes, 1):
            count = (hi - start) // width
            if not count:
                continue

            def block(jo, width=width, start=start):
                def at(jv):
                    return jo * width + jv + start

                kind = ForKind.VECTORIZED if width > 1 else ForKind.SERIAL
                inits = []
                for q, (t, b, _) in enumerate(rows):
                    inits.append(_loop("jv", width, lambda jv, q=q, t=t, b=b: BufferStore(
                        g, xp[t, b, at(jv)] if with_x else const(0.0, dtype),
                        (q * ng + at(jv),)), kind))  # fmt: skip

                def over_k(k):
                    return seq(*[_loop("jv", width, lambda jv, q=q, src=src: BufferStore(
                        g, g[q * ng + at(jv)] + src(k) * r[k, at(jv)], (q * ng + at(jv),)), kind)
                        for q, (_, _, src) in enumerate(rows)])  # fmt: skip

                acc = _loop("k", hid, over_k)
                return seq(*inits, acc)

            parts.append(_loop("jo", count, block))
            start += count * width
        return seq(*parts)

    def update(t, b, q, k):
        """Stores of the new h[b, k] (and c[b, k]) from the gates of row q into hn[k] (and
        cn[k])."""
        hk = h[b, k]

        def gate(j):
            return g[q * ng + j]

        if kind == "RNN":
            return BufferStore(hn, act(0, gate(k)), (k,))
        if kind == "GRU":
            z = act(0, xp[t, b, k] + gate(k))
            if linear_before_reset:
                reset = act(0, xp[t, b, k + nh] + gate(k + nh))
                rec = gate(k + 2 * nh) if rbh is None else gate(k + 2 * nh) + rbh[k]
                cand = act(1, xp[t, b, k + 2 * nh] + reset * rec)
            else:
                cand = act(1, xp[t, b, k + 2 * nh] + gate(k + 2 * nh))
            return BufferStore(hn, (const(1.0, dtype) - z) * cand + z * hk, (k,))
        ck = c[b, k]
        gi, go, gf, gc = (gate(k + i * nh) for i in range(4))
        if peep is not None:
            gi = gi + peep[k] * ck
            gf = gf + peep[k + 2 * nh] * ck
        i = act(0, gi)
        f = const(1.0, dtype) - i if input_forget else act(0, gf)
        store_c = BufferStore(cn, f * ck + i * act(1, gc), (k,))
        go = go if peep is None else go + peep[k + nh] * cn[k]
        return seq(store_c, BufferStore(hn, act(0, go) * acts[2](cn[k]), (k,)))

    def commit(t, b, k):
        """The new states into h and c, h into y: a loop of its own, so that the update's
        loop does not store what it loads (it stays a vector loop)."""
        stores = [BufferStore(h, hn[k], (b, k)), BufferStore(y, hn[k], (t, b, k))]
        if c is not None:
            stores.append(BufferStore(c, cn[k], (b, k)))
        return seq(*stores)

    def time_of(step_t, b):
        """The time index step t reads and writes in row b (reverse: each row's own sequence
        backwards; clamped, as a finished row's gates are computed too and dropped)."""
        if not reverse:
            return step_t
        if lens is None:
            return nseq - 1 - step_t
        return tir.max(tir.cast(lens[b], "int32") - 1 - step_t, const(0, "int32"))

    def block(step_t, b0, nrows):
        """Step t of the rows b0 .. b0 + nrows - 1: their gates together, then each row's
        update."""
        rows = []
        for q in range(nrows):
            b = b0 + q
            rows.append((time_of(step_t, b), b, lambda k, b=b: h[b, k]))
        if kind == "GRU" and not linear_before_reset:
            # z and r from h; the candidate's recurrent part from r * h (rh: one row each)
            body = [matvec(rows, 0, 2 * nh, False)]
            for q, (t, b, _) in enumerate(rows):
                body.append(_vloop("k", nh, lanes, lambda k, q=q, t=t, b=b: BufferStore(
                    rh, act(0, xp[t, b, k + nh] + g[q * ng + k + nh]) * h[b, k],
                    (q * nh + k,))))  # fmt: skip
            rh_rows = [(t, b, lambda k, q=q: rh[q * nh + k]) for q, (t, b, _) in enumerate(rows)]
            body.append(matvec(rh_rows, 2 * nh, 3 * nh, False))
        else:
            body = [matvec(rows, 0, ng, kind in ("RNN", "LSTM"))]
        for q, (t, b, _) in enumerate(rows):
            step = seq(_vloop("k", nh, lanes, lambda k, q=q, t=t, b=b: update(t, b, q, k)),
                       _vloop("k", nh, lanes, lambda k, t=t, b=b: commit(t, b, k)))  # fmt: skip
            if lens is not None:  # Note [recurrence kernel]: a finished row holds, its y is 0
                zero = _loop("k", hid, lambda k, b=b: BufferStore(
                    y, const(0.0, dtype), (step_t, b, k)))  # fmt: skip
                step = IfThenElse(tir.cast(step_t, lens.dtype) < lens[b], step, zero)
            body.append(step)
        return seq(*body)

    def step(t):
        whole = tir.floordiv(batch, rows_per_block) if rows_per_block > 1 else batch
        parts = [_loop("bo", whole, lambda bo: block(t, bo * rows_per_block, rows_per_block))]
        if rows_per_block > 1:  # the rows past the last whole block, one at a time
            left = tir.floormod(batch, rows_per_block)
            parts.append(_loop("bt", left, lambda bt: block(t, whole * rows_per_block + bt, 1)))
        return seq(*parts)

    steps = _loop("t", nseq, step)
    for buf in (cn, hn, rh, g):
        steps = Allocate(buf, steps)
    body = seq(_loop("b", batch, init), steps)
    params = [*ins, *outs]
    return tir.PrimFunc(name, tuple(params), body)


# Note [recurrence kernel]: a recurrent layer over a symbolic sequence length cannot be
# unrolled (onnx_rnn.py unrolls a sized one), and a te.compute has no sequential loop, so its
# steps are one kernel written in tir directly. For each step t and batch row b: the gate
# pre-activations g = xp[t, b] + h[b] R^T, a vector-matrix product computed for a block of
# `rows_per_block` batch rows at once (the rows left over one at a time): per block of
# `accumulators` vectors of gates per row, kept in registers, one pass over the rows k of
# R^T, each vector of R^T loaded once for all the block's rows; then the cell update per
# hidden unit. The loops over gates and hidden units are vectors of the
# target's lanes (a serial tail where the width does not divide them). The input projection
# X W^T, where most of the FLOPs are, is not in it: the graph does it before as one dense over
# seq * batch rows. The states live in the h (and c) outputs, copied from the initial ones
# first; a row only reads its own state, and all its gates are computed before its state
# changes. The new states go to small buffers and are copied after, in a loop of their own: a
# vector loop must not load a buffer it stores at an index that flattening made int64 (the
# vectorizer cannot prove its lanes apart), and the update loop, with the transcendentals,
# must stay a vector loop. GRU without linear_before_reset needs (r * h) R_h^T: r * h goes to a
# small buffer first. With sequence_lens, row b runs the steps t < lens[b]; at the others its
# state holds and y is 0. The reverse direction walks each row's own length backwards: step t
# reads and writes time lens[b] - 1 - t (seq - 1 - t without lengths).
