"""PassContext: the options every pass run sees — opt level, disabled passes, instruments.

    with PassContext(opt_level=3, disabled_pass=["unroll_loop"], instruments=[PrintIR()]):
        lib = tessera.build(s, [A, B, C])

`run_passes(passes, ir)` runs pass functions in order under the current context: a pass named in
`disabled_pass` is skipped, and each instrument sees the IR before and after every pass with the
pass's wall time. Pass names are the functions' `__name__`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

logger = logging.getLogger("tessera.transform")


class PassInstrument:
    """Base of instruments: override what you need."""

    def enter_pass_ctx(self) -> None:
        pass

    def exit_pass_ctx(self) -> None:
        pass

    def run_before_pass(self, name: str, ir) -> None:
        pass

    def run_after_pass(self, name: str, ir, seconds: float) -> None:
        pass


class PrintIR(PassInstrument):
    """Print the IR after each pass (or only after the named ones), with the pass's time."""

    def __init__(self, only: Iterable[str] | None = None, file=None):
        self.only = set(only) if only is not None else None
        self.file = file

    def run_after_pass(self, name, ir, seconds):
        if self.only is None or name in self.only:
            print(f"# after {name} ({seconds * 1e3:.2f} ms)\n{ir}\n", file=self.file)


class PassTiming(PassInstrument):
    """Collect the time of each pass: `timing.summary()` lists them, slowest first."""

    def __init__(self):
        self.times: dict[str, float] = {}

    def run_after_pass(self, name, ir, seconds):
        self.times[name] = self.times.get(name, 0.0) + seconds

    def summary(self) -> str:
        rows = sorted(self.times.items(), key=lambda kv: -kv[1])
        return "\n".join(f"{name:<32} {t * 1e3:9.2f} ms" for name, t in rows)


class PassContext:
    _stack: list[PassContext] = []

    def __init__(
        self,
        opt_level: int = 2,
        disabled_pass: Iterable[str] = (),
        instruments: Iterable[PassInstrument] = (),
        config: dict | None = None,
    ):
        if not 0 <= opt_level <= 3:
            raise ValueError(f"opt_level must be 0..3, got {opt_level}")
        self.opt_level = opt_level
        self.disabled_pass = set(disabled_pass)
        self.instruments = list(instruments)
        self.config = dict(config or {})

    @staticmethod
    def current() -> PassContext:
        return PassContext._stack[-1] if PassContext._stack else _DEFAULT

    def __enter__(self) -> PassContext:
        PassContext._stack.append(self)
        for inst in self.instruments:
            inst.enter_pass_ctx()
        return self

    def __exit__(self, *exc) -> None:
        for inst in self.instruments:
            inst.exit_pass_ctx()
        PassContext._stack.pop()

    def is_enabled(self, name: str) -> bool:
        return name not in self.disabled_pass


_DEFAULT = PassContext()


def run_passes(passes: Iterable[Callable], ir, ctx: PassContext | None = None):
    """Run `passes` in order on `ir` under `ctx` (default: the current context)."""
    ctx = ctx or PassContext.current()
    for p in passes:
        name = getattr(p, "__name__", str(p))
        if not ctx.is_enabled(name):
            logger.debug("skipping disabled pass %s", name)
            continue
        for inst in ctx.instruments:
            inst.run_before_pass(name, ir)
        start = time.perf_counter()
        ir = p(ir)
        seconds = time.perf_counter() - start
        logger.debug("pass %s took %.2f ms", name, seconds * 1e3)
        for inst in ctx.instruments:
            inst.run_after_pass(name, ir, seconds)
    return ir
