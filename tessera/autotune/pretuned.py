"""Pre-tuned configs shipped with the package, keyed by machine kind (TopHub without staleness).

    machine_kind(Target("llvm"))    # "x86_64-avx2-fma2-v256-L1_32K-L2_512K-c2": Zen 3, 2 threads
    shipped_configs(Target("llvm"))    # {task: config} from pretuned/<kind>.jsonl, or {}

`tessera.build` of a graph module takes these configs for the tasks that have no explicit config
and no record in the user's tuning database (precedence: explicit configs > the database of
PassContext config "tuning.database" > shipped > defaults); PassContext config
"tuning.pretuned": False (`--no-pretuned` on the command line) turns them off. The build log
says which tasks took a shipped config. A file holds the records of one machine kind, and
every record names its kind: a record is never used for a target of another kind.

Note [machine kind]
~~~~~~~~~~~~~~~~~~~
A config's speed depends on what the schedule rules read of the machine: the ISA (vector
instructions and registers), the vector width, the FMA pipes (Note [FMA chains] in
topi/x86/cpu.py), the L1 and L2 data caches (the block sizes fit them) and the threads that
share the parallel loops. The kind is those, each coarse enough that machines of one kind share
it: the ISA level (x86: avx512 > avx2 > avx > sse, with "fma" and the FMA pipes; AArch64:
sve/neon, dotprod), the vector bits, each cache size rounded down to a power of two
("L1_32K" holds 32K to 64K-1; Zen 2 and Zen 3 share L1 32K and L2 512K, Skylake-X's L2 1M and
Ice Lake's 1.25M share L2_1M), and the threads (`Target.num_cores`) rounded down to a power of
two. Cache sizes are only known for the host's own CPU (sysfs): a target that names another
CPU (`-mcpu=haswell` built on a Zen 3) has no kind, and no shipped config applies to it; the
same for targets that are not a CPU of x86_64 or AArch64.
"""

from __future__ import annotations

import json
from pathlib import Path

from tessera.autotune.records import _ConfigScope
from tessera.logging import get_logger
from tessera.target import Target
from tessera.topi.strategy import Config, Task

log = get_logger(__name__)

PRETUNED_DIR = Path(__file__).parent / "pretuned"


def _pow2_floor(n: int) -> int:
    return 1 << (max(1, int(n)).bit_length() - 1)


def _size(nbytes: int) -> str:
    n = _pow2_floor(nbytes)
    return f"{n >> 20}M" if n >= 1 << 20 else f"{n >> 10}K"


def isa_level(target: Target) -> str | None:
    """The ISA part of the machine kind (Note [machine kind]), or None for other CPUs."""
    from tessera.topi.x86.cpu import fma_per_cycle

    arch = target.llvm_triple.split("-", 1)[0]
    f = target.features
    if arch == "x86_64":
        level = next(
            (name for name, feat in _X86_LEVELS if feat in f),
            "sse",
        )
        fma = f"-fma{fma_per_cycle(target)}" if "fma" in f else ""
        return f"x86_64-{level}{fma}"
    if arch in ("aarch64", "arm64"):
        level = "sve" if "sve" in f else "neon"
        dot = "-dotprod" if "dotprod" in f else ""
        return f"aarch64-{level}{dot}"
    return None


_X86_LEVELS = (("avx512", "avx512f"), ("avx2", "avx2"), ("avx", "avx"))


def machine_kind(target) -> str | None:
    """The key of the shipped configs that apply to `target` (Note [machine kind]), or None
    when none can: a target for another CPU than the host's, a micro board, a GPU."""
    from tessera.target import _host_cpu
    from tessera.topi.x86.cpu import cache_sizes

    target = target if isinstance(target, Target) else Target(str(target))
    if not target.kind_info.cpu or getattr(target, "device", None) == "micro":
        return None
    if not target.is_host or target.llvm_cpu != _host_cpu()[0]:
        return None  # the caches of a named CPU are not known here
    isa = isa_level(target)
    if isa is None:
        return None
    caches = cache_sizes()
    return (
        f"{isa}-v{target.vector_width_bits}-L1_{_size(caches[1])}-L2_{_size(caches[2])}"
        f"-c{_pow2_floor(target.num_cores)}"
    )


def shipped_path(kind: str) -> Path:
    return PRETUNED_DIR / f"{kind}.jsonl"


def shipped_records(target) -> list:
    """The shipped records of `target`'s machine kind (none when it has no kind or file)."""
    from tessera.autotune.records import Record

    kind = machine_kind(target)
    path = shipped_path(kind) if kind else None
    if path is None or not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            r = Record.from_json(line)
            if r.target == kind and r.ok:  # a record names its kind: never another's
                records.append(r)
    return records


def shipped_configs(target) -> dict[Task, Config]:
    """{task: config} of the shipped records for `target`'s kind still valid for today's
    config spaces (Note [added knobs] in records.py: a knob added since they were tuned takes
    its default; a record changed any other way is dropped)."""
    from tessera.autotune.records import current_config

    target = target if isinstance(target, Target) else Target(str(target))
    out = {}
    for r in shipped_records(target):
        config = current_config(r.task, r.config, target)  # Note [added knobs] in records.py
        if config is not None:
            out[r.task] = config
    return out


def covered_by(database, target) -> set:
    """The tasks a user's tuning database has a passing record of on `target` (its best, or
    the default that tuning kept): the shipped configs leave them alone."""
    from tessera.autotune.records import Database, target_fingerprint

    path = Path(database)
    if not path.exists():
        return set()
    fp = target_fingerprint(target)
    return {r.task for r in Database(path).records if r.target == fp and r.ok}


class apply_pretuned(_ConfigScope):
    """`with apply_pretuned(target, enabled, database, configs):` graph builds inside take the
    shipped config of each task that `configs` (explicit) and `database` (the user's records)
    do not cover; logs at INFO which tasks took one when the block ends. `used`: those tasks."""

    def __init__(self, target, enabled=True, database=None, configs=None):
        self.target = target if isinstance(target, Target) else Target(str(target))
        self.enabled = bool(enabled)
        self.database = database
        self.explicit = set(configs or {})
        self.configs: dict[Task, Config] = {}
        self.used: list[Task] = []

    def __enter__(self):
        if self.enabled:
            self.configs = shipped_configs(self.target)
            if self.configs and self.database is not None:
                covered = covered_by(self.database, self.target)
                self.configs = {t: c for t, c in self.configs.items() if t not in covered}
            self.configs = {t: c for t, c in self.configs.items() if t not in self.explicit}
        return self._enter()  # the outermost scope of a build: inner scopes win

    def __exit__(self, *exc):
        seen = self._exit(exc)
        self.used = [t for t in seen if t in self.configs]
        if self.used:
            kind = machine_kind(self.target)
            log.info("%d of %d tasks took a shipped config (%s)", len(self.used), len(seen), kind)
        for t in self.used:
            log.info("%s: shipped config %s", t, self.configs[t])


def write_shipped(path, kind: str, records, extra: list[dict] | None = None) -> None:
    """Write the shipped file of `kind`: one record per line (its target set to the kind), each
    with its measurements (`extra[i]`, e.g. the in-model ratio that let it in)."""
    lines = []
    for i, r in enumerate(records):
        d = json.loads(r.to_json())
        d["target"] = kind
        d.pop("features", None)
        if extra:
            d["measured"] = extra[i]
        lines.append(json.dumps(d, sort_keys=True))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text("".join(line + "\n" for line in lines))
