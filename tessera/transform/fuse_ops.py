"""Fuse op calls into groups that become one kernel each, by TVM's FuseOps rules.

    before:  %1 = nn.conv2d(%x, %w, ...); %2 = add(%1, %b); %3 = nn.relu(%2); return %3
    after:   %3 = fused(%x, %w, %b, func=fn fused_nn_conv2d_add_nn_relu(%p0, %p1, %p2) {
               %1 = nn.conv2d(%p0, %p1, ...); %2 = add(%1, %p2); %3 = nn.relu(%2); return %3
             }); return %3

Every call of the result is a `fused` call of a primitive function (see tessera/graph/ops/fused.py),
one op alone included. Constants become parameters of the group, scalars excepted (kept inside,
where a kernel folds them into its code). `fused_groups(func)` lists the groups.

See Note [fusion rules]. A call is fused into its immediate post-dominator (the first call that
every path from it to the function's outputs passes through), together with every call on those
paths, when the kinds on the paths allow it:
  - ELEMWISE/BROADCAST: when every call on the paths is ELEMWISE/BROADCAST and the post-dominator
    is one of these, INJECTIVE, a COMM_REDUCE (fused on its input side) or a group already
    anchored on an OUT_ELEMWISE_FUSABLE op;
  - OUT_ELEMWISE_FUSABLE (conv, dense, matmul, pooling): its element-wise epilogue (bias add,
    relu, residual add) when every call on the paths is ELEMWISE/BROADCAST and elementwise in it;
  - INJECTIVE (second round, so that conv groups are complete first): when every call on the
    paths is INJECTIVE or less; unlike TVM, also into a COMM_REDUCE post-dominator (the reduction
    inlines it on its input side just as it does an element-wise op);
  - a COMM_REDUCE ends its group; OPAQUE calls (and `fused` calls) stand alone.
A broadcast is elementwise with respect to an input of the output's shape (TVM's rule), so
`add(conv, bias[C, 1, 1])` is an element-wise epilogue of the conv. A value that is a function
output has no post-dominator: it ends its group (the group returns it). A group holds at most
`PassContext.config["fuse_ops.max_depth"]` calls (default 256). At opt_level 0 nothing fuses.
"""

from __future__ import annotations

from tessera.graph.ir import Call, Function
from tessera.graph.op import OpKind, get_op
from tessera.transform.fuse_group import build_groups, fused_groups
from tessera.transform.graph_pass import graph_pass
from tessera.transform.pass_context import PassContext

__all__ = ["fuse_ops", "fused_groups", "group_calls"]

DEFAULT_MAX_DEPTH = 256


class _Graph:
    """The call DAG: consumers with edge kinds, and the post-dominator tree."""

    def __init__(self, func: Function):
        fused = get_op("fused")
        self.kind = [OpKind.OPAQUE if c.op is fused else c.op.kind for c in func.body]
        index = {id(v): i for i, c in enumerate(func.body) for v in c.outputs}
        self.consumers: list[list[tuple[int, OpKind]]] = [[] for _ in func.body]
        for j, call in enumerate(func.body):
            for v in call.inputs:
                if id(v) in index:
                    self.consumers[index[id(v)]].append((j, self._edge_kind(j, call, v)))
        outputs = {id(v) for v in func.outputs}
        self.is_output = [any(id(v) in outputs for v in c.outputs) for c in func.body]
        self._post_dominators()

    def _edge_kind(self, j, call: Call, v) -> OpKind:
        kind = self.kind[j]
        # TVM: a broadcast op is elementwise on an input that already has the output's shape.
        if kind == OpKind.BROADCAST and all(v.type.shape == o.type.shape for o in call.outputs):
            return OpKind.ELEMWISE
        return kind

    def _post_dominators(self) -> None:
        n = len(self.kind)
        self.parent: list[int | None] = [None] * n
        self.dom_kind = [OpKind.OPAQUE] * n  # the max kind on the paths to the parent
        self.depth = [0] * n
        for i in reversed(range(n)):  # consumers come later in a topological order
            if self.is_output[i] or not self.consumers[i]:
                self.depth[i] = 1
                continue
            (node, kind), *rest = self.consumers[i]
            for j, edge in rest:
                node, kind = self._lca(node, j, max(kind, edge))
                if node is None:
                    break
            if node is not None:
                self.parent[i], self.dom_kind[i] = node, kind
                self.depth[i] = self.depth[node] + 1
            else:
                self.depth[i] = 1

    def _lca(self, a, b, kind):
        while a != b:
            if a is None or b is None:
                return None, kind
            if self.depth[a] < self.depth[b]:
                kind, b = max(kind, self.dom_kind[b]), self.parent[b]
            elif self.depth[a] > self.depth[b]:
                kind, a = max(kind, self.dom_kind[a]), self.parent[a]
            else:
                kind = max(kind, self.dom_kind[a], self.dom_kind[b])
                a, b = self.parent[a], self.parent[b]
        return a, kind


class _Fuser:
    """Union-find over calls; a group's kind is the max of its members' kinds."""

    def __init__(self, graph: _Graph, max_depth: int):
        self.g = graph
        self.max_depth = max_depth
        n = len(graph.kind)
        self.root = list(range(n))
        self.kind = list(graph.kind)
        self.size = [1] * n

    def find(self, i: int) -> int:
        while self.root[i] != i:
            self.root[i] = self.root[self.root[i]]
            i = self.root[i]
        return i

    def _paths(self, src: int, sink: int) -> set[int]:
        """The calls strictly between src and sink on paths from src (sink post-dominates src)."""
        seen, stack = set(), [j for j, _ in self.g.consumers[src]]
        while stack:
            j = stack.pop()
            if j == sink or j in seen:
                continue
            seen.add(j)
            stack.extend(k for k, _ in self.g.consumers[j])
        return seen

    def try_fuse(self, src: int, sink: int, ok_inner, ok_sink) -> None:
        inner = self._paths(src, sink)
        if not all(ok_inner(self.kind[self.find(j)]) for j in inner):
            return
        if not ok_sink(self.kind[self.find(sink)]):
            return
        members = {self.find(j) for j in inner | {src}} - {self.find(sink)}
        target = self.find(sink)
        if self.size[target] + sum(self.size[m] for m in members) > self.max_depth:
            return
        for m in members:
            self.root[m] = target
            self.size[target] += self.size[m]
            self.kind[target] = max(self.kind[target], self.kind[m])

    def run(self) -> list[int]:
        E, B, I, R = OpKind.ELEMWISE, OpKind.BROADCAST, OpKind.INJECTIVE, OpKind.COMM_REDUCE
        for phase in (0, 1):
            for i in range(len(self.root)):
                sink, dom = self.g.parent[i], self.g.dom_kind[i]
                kind = self.kind[self.find(i)]
                if sink is None or kind == OpKind.OPAQUE or self.find(i) == self.find(sink):
                    continue
                if kind == OpKind.OUT_ELEMWISE_FUSABLE:
                    if phase == 0 and dom == E:
                        self.try_fuse(i, sink, lambda k: k <= B, lambda k: k <= B)
                elif kind <= B:
                    if dom <= I or dom == R:
                        self.try_fuse(i, sink, lambda k: k <= B, lambda k: k != OpKind.OPAQUE)
                elif kind == I:
                    if phase == 1 and (dom <= I or dom == R):
                        self.try_fuse(i, sink, lambda k: k <= I, lambda k: k <= I or k == R)
        return [self.find(i) for i in range(len(self.root))]


def group_calls(func: Function) -> list[int]:
    """For each call of `func.body`, the index of its group's representative call."""
    ctx = PassContext.current()
    if ctx.opt_level == 0:
        return list(range(len(func.body)))
    max_depth = int(ctx.config.get("fuse_ops.max_depth", DEFAULT_MAX_DEPTH))
    return _Fuser(_Graph(func), max_depth).run()


@graph_pass(opt_level=0)
def fuse_ops(func: Function) -> Function:
    fused = get_op("fused")
    if all(c.op is fused for c in func.body):
        return func  # already fused
    return build_groups(func, group_calls(func))
