"""Auto-scheduling: a search space generated from a `te.compute` that has no schedule.

    space = AutoSpace([C], [A, B, C], target="llvm")
    space.space                       # the ConfigSpace: tile sizes, vector width, unrolling, ...
    s, args = space.apply(space.default())   # a te.Schedule (and its args) for a config

Like Ansor's sketches, the space comes from the structure of the computation, not from a
template written for an op. Two sketches cover what a single output stage can be:

- **"tile_reduce"**, the output is (or is an elementwise function of) a reduction, such as a
  matmul, a convolution or a batched contraction: multi-level tiling. The output's last two
  spatial axes are split into register tiles (mr x nr, nr a multiple of the vector lanes), the
  tiles of all outer loops are fused into one parallel loop (in either order of the two tiled
  axes), the reduction is accumulated in a `local` stage (`cache_write`, or the reduction stage
  itself when an elementwise epilogue is the output) computed at the tile, its innermost
  reduction axis split by kc and moved outside the register tile, which is unrolled and
  vectorized. An input read with the vectorized axis as its last index (B[k, j] of a matmul) can
  be packed into panels of nr columns ("pack": B[k, j] -> packed[j // nr, k, j % nr]), so that
  each step of k reads one contiguous run; other injective stages are inlined.
- **"tile_spatial"**, every stage is elementwise or a stencil (Halide's blur): the output is
  tiled (ty x tx), its row tiles run in parallel, the inner loop is vectorized, and each producer
  stage is inlined, computed per tile at the output's tile loop (`compute_at`: only the region
  the tile needs, halo included) or computed whole at the root (parallel, vectorized).
- **"rfactor"**, the output is a reduction with little data parallelism (Note [rfactor
  sketch]): a sum of a whole array, a dot product, row sums of a few long rows. The innermost
  reduction axis is cut into `parts` contiguous runs (factored out, parallel), each run's
  reduction split by kv vectors and factored out again (`Schedule.rfactor`): kv vectors of
  partial results accumulated in registers (a local stage), vectorized innermost; then the
  short totals.

Each knob's default comes from a rule over the target (vector registers, lanes, L1 size), not
from measurements: the default config is a good schedule before any tuning, and the tuner
(`tune_kernel`) searches the rest of the space from it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tessera.ir.node import Mutator
from tessera.target import Target
from tessera.te.schedule import post_order
from tessera.te.tensor import ComputeOp, PlaceholderOp, ProducerLoad, Tensor
from tessera.tir import expr as E
from tessera.topi.strategy import Config, ConfigSpace, Knob


@dataclass(frozen=True)
class _Machine:
    lanes: int
    registers: int
    l1: int
    tasks: int  # iterations a parallel loop needs to keep every core busy


def _machine(target: Target, dtype) -> _Machine:
    from tessera.topi.x86 import cpu

    lanes = max(1, target.vector_lanes(dtype)) if target.kind_info.cpu else 4
    caches = cpu.target_cache_sizes(target)
    registers = cpu.vector_registers(target)
    l1 = caches.get(1, cpu.DEFAULT_CACHES[1])
    return _Machine(lanes, registers, l1, cpu.parallel_tasks(target))


# Note [rfactor sketch]
# tile_reduce finds its parallel and vector loops in the output's spatial axes. A reduction
# whose output has few elements (a scalar: a sum, a dot product; a few rows) gives it neither:
# one thread, and a vector loop over output elements that the inputs hold far apart (A[i, k]
# over i). Its parallelism is in the reduction, and rfactor (te/rfactor.py) turns that into a
# data-parallel axis: with the innermost reduce axis k split by kv, CF[..., ki] = sum over ko
# of the body at k = ko * kv + ki holds kv partial results per output element, computed with
# ki innermost (contiguous along k: kv / lanes vector accumulators), parallel over chunks of
# ki's vectors or over the output's outer axis; the output is the sum of CF over ki. So a
# computation takes this sketch when its output is its one reduction (no init: each partial
# starts from the combiner's identity), the innermost reduce axis is static and at least one
# vector long, and its output elements are fewer than the lanes times the parallel tasks a
# machine needs (not one vector per task). Parallel over contiguous parts of k ("parts", each
# factored out first, so that a thread reads one run of memory) when the rows are fewer than
# the tasks; over the rows otherwise.


def _const(e) -> int | None:
    if isinstance(e, int):
        return e
    return e.value if isinstance(e, E.IntImm) else None


def _post_order(outputs) -> list:
    """The ops reachable from the tensors `outputs`, producers first."""
    return post_order([t.op for t in outputs])


def _loads_of(op: ComputeOp, tensor: Tensor) -> list[ProducerLoad]:
    found = []

    class _Find(Mutator):
        def visit_ProducerLoad(self, node):
            if node.producer is tensor:
                found.append(node)
            return self.generic_visit(node)

    for b in op.body:
        _Find().visit(b)
    return found


class _Rewrite(Mutator):
    """Replace loads of the tensors in `loads` (tensor -> function of the indices)."""

    def __init__(self, loads: dict):
        self.loads = loads

    def visit_ProducerLoad(self, node):
        node = self.generic_visit(node)
        fn = self.loads.get(id(node.producer))
        return fn(node.indices) if fn is not None else node


def _rebuild(op: ComputeOp, loads: dict) -> ComputeOp:
    body = tuple(_Rewrite(loads).visit(b) for b in op.body)
    return ComputeOp(op.name, op.tag, op.attrs, op.axis, op.reduce_axis, body)


def _uses(expr, var) -> bool:
    from tessera.tir.stmt_functor import uses_var

    return uses_var(expr, var)


class AutoSpace:
    """The generated search space of a computation (its output tensors) for `target`."""

    def __init__(self, outputs, args, target="llvm"):
        outputs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
        self.target = target if isinstance(target, Target) else Target(target)
        if len({id(t.op) for t in outputs}) != 1:
            raise ValueError(
                "auto-scheduling takes one output stage (a compute with one or more outputs); "
                f"got {len(outputs)} tensors of {len({id(t.op) for t in outputs})} stages"
            )
        self.outputs = outputs
        self.args = list(args)
        self.out: ComputeOp = outputs[0].op
        if not isinstance(self.out, ComputeOp):
            raise ValueError(f"auto-scheduling: {self.out.name} is a placeholder, not a compute")
        self.ops = [op for op in _post_order(outputs) if isinstance(op, ComputeOp)]
        self.machine = _machine(self.target, outputs[0].dtype)
        reductions = [op for op in self.ops if op.is_reduction]
        if self._little_parallelism(reductions):
            self.anchor, self.kind = self.out, "rfactor"
        else:
            self.anchor = self._anchor(reductions)
            self.kind = "tile_reduce" if self.anchor is not None else "tile_spatial"
        if self.kind == "tile_spatial" and reductions:
            raise ValueError(
                f"auto-scheduling: the reduction {reductions[0].name} is neither the output nor "
                "the output's only producer of its shape; schedule it by hand, or make it the "
                "output of its own kernel"
            )
        spaces = {
            "tile_reduce": self._reduce_space,
            "tile_spatial": self._spatial_space,
            "rfactor": self._rfactor_space,
        }
        self.space, self._default = spaces[self.kind]()

    # -- the structure -------------------------------------------------------------------------

    def _anchor(self, reductions) -> ComputeOp | None:
        """The reduction the tiles are built around: the output, or the one reduction that an
        elementwise output (an epilogue: bias, activation) reads at its own indices."""
        if not reductions or len(self.out.axis) == 0:
            return None
        if self.out.is_reduction:
            return self.out if len(reductions) == 1 else None
        if len(reductions) != 1:
            return None
        red = reductions[0]
        loads = _loads_of(self.out, red.output(0))
        same = len(red.axis) == len(self.out.axis) and all(
            _const(a.dom.extent) == _const(b.dom.extent) and _const(a.dom.extent) is not None
            for a, b in zip(red.axis, self.out.axis, strict=True)
        )
        at_own = all(
            len(ld.indices) == len(self.out.axis)
            and all(i is a.var for i, a in zip(ld.indices, self.out.axis, strict=True))
            for ld in loads
        )
        return red if loads and same and at_own else None

    def _little_parallelism(self, reductions) -> bool:
        """Note [rfactor sketch]: the output is its one reduction, over a static innermost
        reduce axis of a vector or more, with few output elements or none contiguous."""
        out = self.out
        if reductions != [out] or out.num_outputs != 1 or out.body[0].init:
            return False
        k = _const(out.reduce_axis[-1].dom.extent)
        if k is None or k < self.machine.lanes:
            return False
        extents = [_const(a.dom.extent) for a in out.axis]
        if any(e is None for e in extents):
            return False
        return math.prod(extents) < self.machine.lanes * self.machine.tasks

    def _packable(self) -> list[Tensor]:
        """Inputs of the anchor read with its last spatial axis as their last index only."""
        j = self.anchor.axis[-1].var
        found = []
        for t in self.anchor.input_tensors:
            loads = _loads_of(self.anchor, t)
            if not isinstance(t.op, PlaceholderOp) or len(t.shape) < 2:
                continue
            if all(
                ld.indices[-1] is j and not any(_uses(i, j) for i in ld.indices[:-1])
                for ld in loads
            ):
                found.append(t)
        return found

    # -- the spaces ----------------------------------------------------------------------------

    def _reduce_space(self):
        m = self.machine
        axes = self.anchor.axis
        n_extent = _const(axes[-1].dom.extent) or 1024
        m_extent = _const(axes[-2].dom.extent) if len(axes) >= 2 else 1
        m_extent = m_extent or 1024
        k_extent = _const(self.anchor.reduce_axis[-1].dom.extent) or 1024
        nv_max = max(1, -(-n_extent // m.lanes))
        nvs = tuple(v for v in (1, 2, 3, 4, 6, 8) if v <= nv_max) or (1,)
        mrs = tuple(v for v in (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16) if v <= m_extent) or (1,)
        kcs = tuple(sorted({min(k_extent, 1 << p) for p in range(2, 10)}))
        pack = (False, True) if self._packable() else (False,)
        # the rule: the register tile (mr x nv vectors) with the most FMAs per load that fits
        # the vector registers with one row of B and a broadcast of A
        fits = [(r, v) for r in mrs for v in nvs if r * v + v + 1 <= m.registers]
        # (panels that divide the columns first: a tail panel is padding and guards)
        mr, nv = max(
            fits or [(1, 1)],
            key=lambda p: (n_extent % (p[1] * m.lanes) == 0, p[0] * p[1] / (p[0] + p[1]), p[1]),
        )
        # kc: the largest power of two whose slices of A (mr x kc) and B (kc x nr) fit in L1
        kc = max(
            [c for c in kcs if (mr + nv * m.lanes) * c * 4 <= m.l1] or [kcs[0]],
        )
        default = {"mr": mr, "nv": nv, "kc": kc, "order": "ji", "pack": pack[-1], "unroll": True}
        space = ConfigSpace(
            [
                Knob("mr", mrs),
                Knob("nv", nvs),
                Knob("kc", kcs),
                Knob("order", ("ij", "ji")),
                Knob("pack", pack),
                Knob("unroll", (False, True)),
            ],
            # a register tile of more accumulators than registers twice over only spills
            [lambda v: v["mr"] * v["nv"] <= 2 * m.registers],
        )
        return space, Config("tile_reduce", default)

    def _spatial_space(self):
        m = self.machine
        axes = self.out.axis
        if not axes:
            raise ValueError(f"{self.out.name} is a scalar: no loop to tile")
        x_extent = _const(axes[-1].dom.extent) or 1024
        y_extent = (_const(axes[-2].dom.extent) or 1024) if len(axes) >= 2 else 1
        vecs = tuple(sorted({max(1, m.lanes // 2), m.lanes, 2 * m.lanes}))
        txs = tuple(sorted({min(x_extent, m.lanes * f) for f in (1, 2, 4, 8, 16, 32, 64)}))
        tys = tuple(sorted({min(y_extent, f) for f in (1, 2, 4, 8, 16, 32, 64, 128)}))
        knobs = [Knob("ty", tys), Knob("tx", txs), Knob("vec", vecs)]
        default = {"vec": m.lanes}
        for op in self.ops[:-1]:
            knobs.append(Knob(f"at:{op.name}", ("inline", "tile", "root")))
            # a producer read at several points per output element (a stencil) is computed per
            # tile, so its values are reused from cache; one read once per element is inlined
            reads = sum(len(_loads_of(c, op.output(0))) for c in self.ops if c is not op)
            default[f"at:{op.name}"] = "tile" if reads > 1 else "inline"
        tx = max(t for t in txs if t <= max(txs[0], m.lanes * 16))
        tiled = max(1, sum(v == "tile" for k, v in default.items() if k.startswith("at:")))
        ty_fit = [t for t in tys if (t + 2) * tx * 4 * tiled <= m.l1 // 2] or [tys[0]]
        default.update(tx=tx, ty=max(ty_fit))
        return ConfigSpace(knobs), Config("tile_spatial", default)

    def _rfactor_space(self):
        m = self.machine
        k_extent = _const(self.out.reduce_axis[-1].dom.extent)
        vectors = max(1, k_extent // m.lanes)
        kvs = tuple(f for f in (1, 2, 4, 8) if f <= min(vectors, m.registers // 2)) or (1,)
        parts = tuple(p for p in (1, 2, 4, 8, 16, 32, 64) if p <= min(vectors, 8 * m.tasks))
        rows = math.prod(_const(a.dom.extent) for a in self.out.axis)
        # the rule: four vector accumulators (an FMA's latency over its issue rate); the rows
        # in parallel when they alone keep every core busy, else that many parts of k
        kv = max(v for v in kvs if v <= 4)
        part = 1 if rows >= m.tasks else max(p for p in parts if p * kv <= vectors and p <= m.tasks)
        knobs = [Knob("kv", kvs), Knob("parts", parts)]
        fits = [lambda v: v["parts"] * v["kv"] <= vectors]  # every part a run of kv vectors
        return ConfigSpace(knobs, fits), Config("rfactor", {"kv": kv, "parts": part})

    def default(self) -> Config:
        return self._default

    # -- configs to schedules ------------------------------------------------------------------

    def apply(self, config: Config):
        """(te.Schedule, args) of `config`."""
        if not self.space.valid(config.knobs()):
            raise ValueError(f"{config} is not in the space of this computation")
        if self.kind == "tile_reduce":
            return self._apply_reduce(config)
        if self.kind == "rfactor":
            return self._apply_rfactor(config)
        return self._apply_spatial(config)

    def _packed_dag(self, nr: int):
        """The computation with every packable input of the anchor read from panels of `nr`
        columns; (new outputs, new anchor, packed stages, args)."""

        loads, packed = {}, []
        for t in self._packable():
            p = _pack(t, nr)
            packed.append(p)
            loads[id(t)] = lambda idx, p=p: ProducerLoad(
                p, (idx[-1] // nr, *idx[:-1], idx[-1] % nr)
            )
        anchor = _rebuild(self.anchor, loads)
        mapping = {id(self.anchor.output(i)): anchor.output(i) for i in range(anchor.num_outputs)}
        if self.anchor is self.out:
            outputs = [anchor.output(t.value_index) for t in self.outputs]
        else:
            out = _rebuild(
                self.out, {k: (lambda idx, v=v: ProducerLoad(v, idx)) for k, v in mapping.items()}
            )
            outputs = [out.output(t.value_index) for t in self.outputs]
        new_out = {id(t): o for t, o in zip(self.outputs, outputs, strict=True)}
        args = [new_out.get(id(a), a) for a in self.args]
        return outputs, anchor, packed, args

    def _apply_reduce(self, cfg: Config):
        from tessera import te

        lanes = self.machine.lanes
        mr, nr, kc = cfg["mr"], cfg["nv"] * lanes, cfg["kc"]
        if cfg["pack"]:
            outputs, anchor, packed, args = self._packed_dag(nr)
        else:
            outputs, anchor, packed, args = self.outputs, self.anchor, [], self.args
        s = te.create_schedule([t.op for t in outputs])
        out = outputs[0].op
        for op in _post_order(outputs):
            if isinstance(op, ComputeOp) and op is not out and op is not anchor:
                if op not in [p.op for p in packed] and not op.is_reduction:
                    s[op].compute_inline()
        if anchor is out:
            local = s.cache_write(outputs[0], "local") if len(outputs) == 1 else None
            if local is None:
                raise ValueError("tile_reduce: a multi-output reduction is not supported")
            local_stage = s[local]
        else:
            local_stage = s[anchor]
            local_stage.set_scope("local")
        stage = s[out]
        axes = list(out.axis)
        j = axes[-1]
        jo, ji = stage.split(j, factor=nr)
        if len(axes) >= 2:
            io, ii = stage.split(axes[-2], factor=mr)
            tiles = (jo, io) if cfg["order"] == "ji" else (io, jo)
            stage.reorder(*axes[:-2], *tiles, ii, ji)
            fused = stage.fuse(*axes[:-2], *tiles)
        else:
            fused = jo
        stage.parallel(fused)
        _, jv = stage.split(ji, factor=lanes)
        stage.vectorize(jv)
        local_stage.compute_at(stage, fused)
        caxes = list(local_stage.op.axis)
        creduce = list(local_stage.op.reduce_axis)
        ko, ki = local_stage.split(creduce[-1], factor=kc)
        cjo, cjv = local_stage.split(caxes[-1], factor=lanes)
        inner = [caxes[-2], cjo] if len(caxes) >= 2 else [cjo]
        local_stage.reorder(*caxes[:-2], *creduce[:-1], ko, ki, *inner, cjv)
        if cfg["unroll"]:
            for iv in inner:
                local_stage.unroll(iv)
        local_stage.vectorize(cjv)
        for p in packed:
            paxes = s[p].op.axis
            s[p].vectorize(paxes[-1]) if nr % lanes == 0 else None
            s[p].parallel(paxes[0])
        return s, args

    def _apply_rfactor(self, cfg: Config):
        """Note [rfactor sketch]: over `parts` contiguous parts of the reduction (factored
        first, parallel) or over the rows, kv vectors of partials accumulated in a local stage
        (registers), vectorized innermost; then the short totals."""
        from tessera import te

        lanes, kv, parts = self.machine.lanes, cfg["kv"], cfg["parts"]
        s = te.create_schedule(self.out)
        for op in self.ops[:-1]:
            s[op].compute_inline()  # injective producers (a reduction's only one is the output)
        total = self.outputs[0]
        if parts > 1:  # each part a contiguous run of k: CF[..., p] = sum over the run
            kp, _ = s[total].split(self.out.reduce_axis[-1], nparts=parts)
            total = s.rfactor(total, kp, factor_axis=len(self.out.axis))
        _, ki = s[total].split(total.op.reduce_axis[-1], factor=kv * lanes)
        rf = s.rfactor(total, ki, factor_axis=len(total.op.axis))
        local = s.cache_write(rf, "local")
        stage = s[rf]
        *outer, kf = stage.op.axis  # (rows..., part, kf) or (rows..., kf)
        if parts > 1:
            stage.reorder(outer[-1], *outer[:-1], kf)
            outer = [outer[-1], *outer[:-1]]
        if outer:
            stage.parallel(outer[0])
        stage.vectorize(stage.split(kf, factor=lanes)[1])
        lstage = s[local]
        if outer:
            lstage.compute_at(stage, outer[-1])
        *lrows, lk = lstage.op.axis
        ka, kl = lstage.split(lk, factor=lanes)
        lstage.reorder(*lrows, *lstage.op.reduce_axis, ka, kl)
        lstage.unroll(ka)
        lstage.vectorize(kl)
        return s, self.args

    def _apply_spatial(self, cfg: Config):
        from tessera import te

        s = te.create_schedule(self.out)
        stage = s[self.out]
        axes = list(self.out.axis)
        vec = cfg["vec"]
        x = axes[-1]
        if len(axes) >= 2:
            yo, xo, yi, xi = stage.tile(axes[-2], x, cfg["ty"], cfg["tx"])
            stage.reorder(*axes[:-2], yo, xo, yi, xi)
            outer = stage.fuse(*axes[:-2], yo) if axes[:-2] else yo
            at = xo
        else:
            outer, xi = stage.split(x, factor=cfg["tx"])
            at = outer
        stage.parallel(outer)
        _, xv = stage.split(xi, factor=vec)
        stage.vectorize(xv)
        for op in reversed(self.ops[:-1]):
            where = cfg[f"at:{op.name}"]
            st = s[op]
            if where == "inline":
                st.compute_inline()
                continue
            if where == "tile":
                st.compute_at(stage, at)
            else:
                st.parallel(st.op.axis[0]) if len(st.op.axis) > 1 else None
            _, v = st.split(st.op.axis[-1], factor=vec)
            st.vectorize(v)
        return s, self.args


def _pack(t: Tensor, nr: int) -> Tensor:
    """t (..., N) as panels (ceil(N / nr), ..., nr); zero past N."""
    from tessera import te

    n, rest = t.shape[-1], len(t.shape) - 1
    n_const = _const(n)

    def panel(c, *r):
        col = c * nr + r[rest]
        if n_const is not None and n_const % nr == 0:
            return t[(*r[:rest], col)]
        return te.if_then_else(col < n, t[(*r[:rest], te.min(col, n - 1))], te.const(0, t.dtype))

    return te.compute(((n + nr - 1) // nr, *t.shape[:-1], nr), panel, name=f"{t.name}.packed")


def naive_schedule(outputs):
    """The schedule with no primitive applied (every stage at the root, loops in order)."""
    from tessera import te

    outputs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    return te.create_schedule([t.op for t in outputs])
