"""Sequential: a list of passes that runs as one pass, each pass from its minimum opt level.

    opt = Sequential([infer_types, fold_constant, (eliminate_common_subexpr, 3), fuse_ops])
    with PassContext(opt_level=2):
        mod = opt(mod)          # eliminate_common_subexpr is skipped below opt_level 3

A pass's minimum level is the one given next to it, else its own `opt_level` attribute (set by
`graph_pass`), else 0. The whole sequence runs only from its own `opt_level` on. Passes named in
`PassContext.disabled_pass` are skipped, and instruments see every pass inside (`run_passes`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from tessera.transform.pass_context import PassContext, run_passes


class Sequential:
    def __init__(self, passes: Iterable, opt_level: int = 0, name: str = "sequential"):
        self.passes: list[tuple[Callable, int]] = []
        for p in passes:
            fn, level = p if isinstance(p, tuple) else (p, getattr(p, "opt_level", 0))
            if not callable(fn):
                raise TypeError(f"Sequential {name!r}: {fn!r} is not a pass (a callable)")
            if not 0 <= level <= 3:
                raise ValueError(f"Sequential {name!r}: opt level {level} of {fn!r} is not 0..3")
            self.passes.append((fn, level))
        self.opt_level = opt_level
        self.__name__ = name

    def enabled_passes(self, ctx: PassContext | None = None) -> list[Callable]:
        """The passes that run under `ctx` (default: the current context), in order."""
        ctx = ctx or PassContext.current()
        if ctx.opt_level < self.opt_level:
            return []
        return [fn for fn, level in self.passes if level <= ctx.opt_level]

    def __call__(self, ir):
        ctx = PassContext.current()
        return run_passes(self.enabled_passes(ctx), ir, ctx)

    def __repr__(self) -> str:
        shown = ", ".join(f"{getattr(fn, '__name__', fn)}@{lvl}" for fn, lvl in self.passes)
        return f"Sequential({self.__name__}: {shown})"
