"""Targets: what machine code is generated for, parsed from the strings users know.

    Target("llvm")                                   # this machine, CPU detected at run time
    Target("llvm -mcpu=skylake-avx512 -num-cores=2") # a named CPU
    Target("llvm -mtriple=aarch64-linux-gnu")        # cross-compile (no JIT)
    Target("llvm -mattr=+avx2,+fma")                 # extra (or, with '-', fewer) CPU features
    Target("c"), Target("cuda -arch=sm_80")

A Target is an immutable value: `str(t)` parses back to an equal Target. Schedules ask it what
the CPU offers (`features`, `vector_width_bits`, `vector_lanes(dtype)`, `num_cores`); the LLVM
code generator asks it for the triple, CPU name and feature string (`llvm_triple`, `llvm_cpu`,
`llvm_features`). The host CPU is read from LLVM when asked, never assumed (no AVX-512 or AMX
unless this machine has it).

Everything the compiler does differently per target kind is one row of the target table
(`TargetKind`, `TARGET_KINDS`): its options, runtime device, strategy keys, code generator,
kernel compiler, linker, toolchain identity and cache fingerprint. The compiler asks the row
(`target.kind_info.resolve("link")(...)`), never `if target.kind == ...`; a new target is a new
row (`register_target_kind`, docs/architecture.md "Adding a target").
"""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass

from tessera.ir.dtype import DType

_INT_OPTIONS = ("num-cores", "max-num-threads", "msve-vector-bits", "stack-bytes")
_NUMBER_OPTIONS = ("dram-bytes-per-cycle",)  # a measured bandwidth: 5.5 as well as 8
_BOOL_OPTIONS = ("fast-math",)

_SSE = {"sse", "sse2"}
_SSE4 = _SSE | {"sse3", "ssse3", "sse4.1", "sse4.2", "popcnt"}
_AVX = _SSE4 | {"avx"}
_AVX2 = _AVX | {"avx2", "fma", "f16c", "bmi", "bmi2"}
_AVX512 = _AVX2 | {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"}
_VNNI = _AVX512 | {"avx512vnni"}
_BF16 = _VNNI | {"avx512bf16"}
_AMX = _BF16 | {"avxvnni", "avx512fp16", "amx-tile", "amx-int8", "amx-bf16"}
# Armv8.2-A cores with DotProd and half-precision arithmetic (FEAT_FP16: fmla v.8h)
_ARMV82 = {"neon", "dotprod", "fullfp16"}

# Features of the CPU names users pass to -mcpu, for when the CPU is not this machine's (LLVM
# knows them too, but llvmlite cannot read a target machine's features back).
CPU_FEATURES: dict[str, frozenset[str]] = {
    name: frozenset(feats)
    for names, feats in [
        (("x86-64", "generic", "k8", "core2"), _SSE),
        (("x86-64-v2", "nehalem", "westmere", "btver2"), _SSE4),
        (("sandybridge", "ivybridge"), _AVX),
        (("x86-64-v3", "haswell", "broadwell", "skylake", "znver1", "znver2", "znver3"), _AVX2),
        (("alderlake", "raptorlake", "meteorlake"), _AVX2 | {"avxvnni"}),
        (("x86-64-v4", "skylake-avx512", "skx"), _AVX512),
        (("cascadelake", "icelake-client", "icelake-server", "tigerlake", "rocketlake"), _VNNI),
        (("cooperlake", "znver4"), _BF16),
        (("znver5",), _BF16 | {"avxvnni"}),
        (("sapphirerapids", "emeraldrapids", "graniterapids"), _AMX),
        (("cortex-a53", "cortex-a57", "cortex-a72"), {"neon"}),
        (("cortex-a55", "cortex-a76"), _ARMV82),
        (("neoverse-n1", "apple-m1", "apple-m2", "apple-m3"), _ARMV82),
        (("neoverse-v1", "neoverse-n2", "neoverse-v2"), _ARMV82 | {"sve", "i8mm"}),
        # microcontrollers ("c -device=micro -mcpu=cortex-m4", docs/micro.md)
        (("cortex-m0", "cortex-m0plus", "cortex-m3"), ()),
        (("cortex-m4", "cortex-m7", "cortex-m33"), {"dsp", "fp"}),
        (("cortex-m55",), {"dsp", "fp", "mve", "mve.fp"}),
    ]
    for name in names
}
# the triple of a microcontroller CPU (no OS: "none-eabi", hard float where it has an FPU)
MICRO_TRIPLES = {
    "cortex-m0": "thumbv6m-none-eabi",
    "cortex-m0plus": "thumbv6m-none-eabi",
    "cortex-m3": "thumbv7m-none-eabi",
    "cortex-m4": "thumbv7em-none-eabihf",
    "cortex-m7": "thumbv7em-none-eabihf",
    "cortex-m33": "thumbv8m.main-none-eabihf",
    "cortex-m55": "thumbv8.1m.main-none-eabihf",
}
_DEVICES = ("micro",)
# The SVE vector length of the Arm cores that have SVE (Note [fixed-length SVE] in
# tessera/topi/arm/strategy.py): code for a core is built for its length unless
# -msve-vector-bits says otherwise.
SVE_VECTOR_BITS = {"neoverse-v1": 256, "neoverse-n2": 128, "neoverse-v2": 128}
# -mattr names that tune code generation instead of naming an instruction set (Note [512-bit
# vectors]): a target that gives them still runs on the host
_TUNING_ATTRS = frozenset({"prefer-256-bit"})
# the baseline of an architecture, when neither -mcpu nor the host tells more
_ARCH_BASELINE = {"x86_64": _SSE, "aarch64": frozenset({"neon"}), "arm64": frozenset({"neon"})}


@functools.cache
def _host_triple() -> str:
    import llvmlite.binding as llvm

    return llvm.get_process_triple()


@functools.cache
def _host_cpu() -> tuple[str, frozenset[str]]:
    """(cpu name, enabled features) of this machine, as LLVM detects them."""
    import llvmlite.binding as llvm

    try:
        features = frozenset(k for k, on in llvm.get_host_cpu_features().items() if on)
    except RuntimeError:  # LLVM cannot detect features on some hosts
        features = _ARCH_BASELINE.get(_arch(_host_triple()), frozenset())
    return llvm.get_host_cpu_name(), features


def _arch(triple: str) -> str:
    return triple.split("-", 1)[0]


_OS_NAMES = ("linux", "none", "windows", "darwin", "macosx", "ios", "android", "freebsd")


def _normalize_triple(triple: str) -> str:
    """arch-os-env (what GNU tools are named: aarch64-linux-gnu) as LLVM's arch-vendor-os-env.

    LLVM reads a triple's words by position: in "armv7a-linux-gnueabihf" it takes "linux" for
    the vendor and misses the hard-float ABI of "gnueabihf" (floats then pass in integer
    registers, and calls into the board's libm get garbage)."""
    words = triple.split("-")
    if len(words) == 3 and words[1] in _OS_NAMES:
        words.insert(1, "unknown")
    return "-".join(words)


# -- the target table ------------------------------------------------------------------------------


@dataclass(frozen=True)
class TargetKind:
    """One row of the target table: what the compiler does for targets of this kind.

    The entries that name code are "module:attribute" strings, imported when first asked for
    (`resolve`), so this module stays at the bottom of the package layering:

    - options: the `-key=value` options the kind accepts ('-' kept in names);
    - device: the runtime device type its kernels run on ("cpu", "cuda");
    - cpu: whether it describes a CPU (features, vector width and `is_host` mean something);
    - strategy_keys: Target -> the strategy and schedule keys to try, most specific first
      ("x86", "arm", "generic"): which `topi/<key>/` strategies and schedule rules apply;
    - layout_strategies: whether graph passes may ask the strategies for blocked layouts and
      packed weights (alter_layout, pack_weights): the kernels of those layouts compile for it;
    - tir_passes: the tir pass list between te.lower and code generation;
    - build: list of PrimFuncs, Target -> runtime.Module (kernels callable from Python);
    - build_kernels: (schedule | PrimFunc | IRModule, args, Target, name) -> a module, for a
      kind with its own lowering (GPUs: kernels split at thread bindings); None: te.lower, the
      kind's tir passes and `build`;
    - build_graph: (graph IRModule, Target, params) -> a compiled model, for a kind with its
      own graph build (GPUs: one device arena, launches); None: the CPU executor plan;
    - gpu_backend: a GPU kind's `codegen.gpu.GPUBackend` (C dialect, warp shuffles, how source
      becomes device code);
    - compile_kernel: PrimFunc, Target -> codegen.aot.CompiledKernel (object code);
    - link: kernels, executor plan, Target -> (runtime.Module, entry address or None);
    - cross_link: the same, for a target of another architecture than this machine's (its
      module exports with the target's cross toolchain; tessera/cross/);
    - toolchain: () -> a string naming the code generator's version (part of cache keys);
    - fingerprint: Target -> list of plain data the generated code depends on (cache keys).

    An entry left None is a step the kind cannot do yet; asking for it raises a clear error.
    """

    name: str
    options: tuple[str, ...]
    device: str = "cpu"
    cpu: bool = True
    strategy_keys: Callable[[Target], tuple[str, ...]] | None = None
    layout_strategies: bool = False
    tir_passes: str | None = "tessera.driver:TIR_PASSES"
    build: str | None = None
    build_kernels: str | None = None
    build_graph: str | None = None
    compile_kernel: str | None = None
    link: str | None = None
    cross_link: str | None = None
    gpu_backend: str | None = None
    toolchain: str | None = None
    fingerprint: str | None = None

    def resolve(self, entry: str):
        """The object an entry names (imported now); ValueError when the kind has none."""
        ref = getattr(self, entry)
        if ref is None:
            built = [k for k, row in TARGET_KINDS.items() if getattr(row, entry) is not None]
            raise ValueError(
                f"target kind {self.name!r} has no {entry} step yet (kinds that have one: "
                f"{', '.join(built)})"
            )
        module, _, attr = ref.partition(":")
        return getattr(importlib.import_module(module), attr)

    def keys(self, target: Target) -> tuple[str, ...]:
        return self.strategy_keys(target) if self.strategy_keys is not None else ("generic",)


def cpu_strategy_keys(target: Target) -> tuple[str, ...]:
    """Strategy keys of a CPU target: its architecture's (from the triple), then "cpu" (rules
    over the vector width, registers and caches: right for any CPU), then "generic"."""
    triple = target.llvm_triple
    if triple.startswith(("x86_64", "i686", "i386")):
        return ("x86", "cpu", "generic")
    if triple.startswith(("aarch64", "arm")):
        return ("arm", "cpu", "generic")
    return ("cpu", "generic")


def c_strategy_keys(target: Target) -> tuple[str, ...]:
    """A microcontroller's own kernels ("micro": topi/micro/) first, then the CPU's keys."""
    keys = cpu_strategy_keys(target)
    return ("micro", *keys) if target.device == "micro" else keys


TARGET_KINDS: dict[str, TargetKind] = {}

# Note [described machine]
# What a CPU's schedule rules read besides its features, vector width, registers and caches,
# as target options with defaults for a typical machine (a cross target has nothing else to go
# by; the host too, unless told):
#   -dram-bytes-per-cycle  DRAM bytes one core receives per cycle (8: what DRAM gives one core
#                          of a desktop or server part; `bench/stream.py` measures this
#                          machine's: its triad's GB/s over the cores and the clock). The
#                          compute-to-bandwidth balance of the rules (Note [machine balance] in
#                          topi/x86/cpu.py) divides by it.
#   -stack-bytes           the stack of a thread that runs kernels (8 MiB: glibc's default for
#                          the runtime's pthreads and Linux's for the main thread). Kernels keep
#                          small buffers on it; their caps are shares of it (topi/x86/cpu.py
#                          `stack_share`).
CPU_DESCRIPTION_OPTIONS = ("dram-bytes-per-cycle", "stack-bytes")
DEFAULT_DRAM_BYTES_PER_CYCLE = 8
DEFAULT_STACK_BYTES = 8 << 20


def register_target_kind(kind: TargetKind) -> TargetKind:
    """Add (or replace) a row of the target table."""
    TARGET_KINDS[kind.name] = kind
    return kind


register_target_kind(
    TargetKind(
        "llvm",
        options=(
            "mtriple",
            "mcpu",
            "mattr",
            "num-cores",
            "mabi",
            "fast-math",
            "msve-vector-bits",
            *CPU_DESCRIPTION_OPTIONS,
        ),  # fmt: skip
        strategy_keys=cpu_strategy_keys,
        layout_strategies=True,
        build="tessera.codegen.llvm.build:build_llvm",
        compile_kernel="tessera.codegen.llvm.build:compile_kernel",
        link="tessera.codegen.aot:link_llvm",
        cross_link="tessera.cross.link:link_cross",
        toolchain="tessera.codegen.llvm.build:toolchain_identity",
        fingerprint="tessera.codegen.cache:cpu_fingerprint",
    )
)
register_target_kind(
    TargetKind(
        "c",
        options=("mtriple", "mcpu", "mattr", "num-cores", "device", *CPU_DESCRIPTION_OPTIONS),
        strategy_keys=c_strategy_keys,
        # C kernels take the CPU schedules but not the blocked layouts or packed weights: the
        # C target is for portable (and bare-metal) code, and is not measured on those kernels.
        layout_strategies=False,
        build="tessera.codegen.c:build_c",
        compile_kernel="tessera.codegen.aot:compile_c_kernel",
        link="tessera.codegen.aot:link_c",
        toolchain="tessera.codegen.cache:c_compiler_identity",
        fingerprint="tessera.codegen.cache:c_fingerprint",
    )
)
register_target_kind(
    TargetKind(
        "cuda",
        options=("arch", "max-num-threads"),
        device="cuda",
        cpu=False,
        strategy_keys=lambda target: ("cuda", "generic"),
        build_kernels="tessera.codegen.gpu:build_gpu",
        build_graph="tessera.codegen.gpu_graph:build_graph_gpu",
        gpu_backend="tessera.codegen.gpu:CUDA_BACKEND",
    )
)
register_target_kind(
    TargetKind(
        "opencl",  # OpenCL C, run through pyopencl (docs/gpu.md)
        options=("max-num-threads",),
        device="opencl",
        cpu=False,
        strategy_keys=lambda target: ("opencl", "generic"),
        build_kernels="tessera.codegen.gpu:build_gpu",
        build_graph="tessera.codegen.gpu_graph:build_graph_gpu",
        gpu_backend="tessera.codegen.gpu:OPENCL_BACKEND",
    )
)


# strategy key -> the modules that register its strategies, schedules and target-specific ops
# (`topi/<key>/`), imported the first time a target with that key asks for a strategy
STRATEGY_MODULES: dict[str, tuple[str, ...]] = {
    "x86": ("tessera.topi.x86.strategy",),
    "cpu": ("tessera.topi.x86.strategy",),  # the x86 kernels' rules hold for any CPU
    "arm": ("tessera.topi.arm.strategy",),  # ARM's register tile (docs/arm.md)
    "micro": ("tessera.topi.micro.strategy",),  # Cortex-M int8 kernels (docs/micro.md)
    "cuda": ("tessera.topi.gpu.strategy",),  # tiled matmuls, implicit-GEMM conv (docs/gpu.md)
    "opencl": ("tessera.topi.gpu.strategy",),
    "generic": (),
}


def load_strategies(keys=None) -> None:
    """Import the strategy modules of these strategy keys (all keys when None)."""
    for key in STRATEGY_MODULES if keys is None else keys:
        for module in STRATEGY_MODULES.get(key, ()):
            importlib.import_module(module)


def target_kind(kind: str) -> TargetKind:
    """The row of `kind`; ValueError naming the known kinds."""
    if kind not in TARGET_KINDS:
        known = ", ".join(TARGET_KINDS)
        raise ValueError(f"unknown target kind {kind!r}; known kinds: {known}")
    return TARGET_KINDS[kind]


def _default_num_cores() -> int:
    """The runtime's thread count (which honours TESSERA_NUM_THREADS), else this process's cores."""
    try:
        from tessera.runtime import config

        return int(config.num_threads())
    except (ImportError, AttributeError):
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def _parse_text(text: str) -> tuple[str, dict]:
    words = text.split()
    if not words:
        raise ValueError("empty target string; expected e.g. 'llvm' or 'llvm -mcpu=skylake'")
    kind, opts = words[0], {}
    for word in words[1:]:
        if not word.startswith("-"):
            raise ValueError(f"target {text!r}: option {word!r} must look like -key=value")
        key, eq, value = word.lstrip("-").partition("=")
        opts[key] = value if eq else True
    return kind, opts


def _normalize(kind: str, opts: dict) -> dict:
    options = target_kind(kind).options
    out = {}
    for key, value in opts.items():
        key = key.replace("_", "-")
        if key not in options:
            known = ", ".join(f"-{k}" for k in options)
            raise ValueError(f"unknown option -{key} for target {kind!r}; known: {known}")
        if key in _INT_OPTIONS:
            try:
                value = int(value)
            except (TypeError, ValueError):
                raise ValueError(f"target option -{key} needs an integer, got {value!r}") from None
            if value < 1:
                raise ValueError(f"target option -{key} must be >= 1, got {value}")
            if key == "msve-vector-bits" and (value % 128 or value > 2048):
                raise ValueError(f"-msve-vector-bits must be 128, 256, ... 2048, got {value}")
        elif key in _NUMBER_OPTIONS:
            try:
                value = float(value)
            except (TypeError, ValueError):
                raise ValueError(f"target option -{key} needs a number, got {value!r}") from None
            if not value > 0 or value == float("inf"):
                raise ValueError(f"target option -{key} must be > 0, got {value}")
            value = int(value) if value.is_integer() else value
        elif key in _BOOL_OPTIONS:
            if not (value is True or str(value).lower() in ("1", "true", "on", "yes")):
                continue
            value = True
        elif key == "mattr":
            value = _parse_mattr(value)
        elif key == "device" and value not in _DEVICES:
            raise ValueError(f"unknown -device={value}; known: {', '.join(_DEVICES)}")
        elif not isinstance(value, str) or not value:
            raise ValueError(f"target option -{key} needs a value (-{key}=...)")
        out[key] = value
    return out


def _parse_mattr(value) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else list(value)
    attrs = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        if item[0] not in "+-":
            item = "+" + item
        attrs.append(item)
    if not attrs:
        raise ValueError("target option -mattr needs features, e.g. -mattr=+avx2,+fma")
    return tuple(attrs)


class _HostAttr:
    """`Target.host()` is this machine's llvm target; `t.host` is the target of t's host code
    (for cuda: the CPU that launches kernels; default: this machine). Both names are the ones
    TVM users know, hence one attribute that answers on the class and on an instance."""

    def __get__(self, obj, cls):
        if obj is None:
            return lambda: Target(f"llvm -mcpu={_host_cpu()[0]}")
        return obj._host if obj._host is not None else Target("llvm")


class Target:
    """A compilation target: a kind ("llvm", "c", "cuda") with options. Immutable."""

    def __init__(self, target: str | dict | Target, host: str | dict | Target | None = None):
        if isinstance(target, Target):
            kind, opts, host = target.kind, dict(target._opts), host or target._host
        elif isinstance(target, str):
            kind, opts = _parse_text(target)
        elif isinstance(target, dict):
            opts = {k: v for k, v in target.items() if k not in ("kind", "host")}
            kind = target.get("kind")
            host = host or target.get("host")
            if not isinstance(kind, str):
                raise ValueError(f"target dict needs a 'kind' string, got {target!r}")
        else:
            raise TypeError(f"Target expects a string, dict or Target, got {type(target).__name__}")
        self.kind = kind
        self._opts = _normalize(kind, opts)
        self._host = Target(host) if host is not None and not isinstance(host, Target) else host
        if self.mcpu is not None and self.mcpu not in CPU_FEATURES and not self._mcpu_is_host():
            raise ValueError(
                f"unknown -mcpu={self.mcpu}; known CPUs: {', '.join(sorted(CPU_FEATURES))}"
            )

    host = _HostAttr()  # Target.host(): this machine; t.host: t's host target

    # `with target:` makes it Target.current() (as in TVM), for passes that depend on the
    # target (alter_layout) while `build` runs the graph passes.
    _scope: list[Target] = []

    def __enter__(self) -> Target:
        Target._scope.append(self)
        return self

    def __exit__(self, *exc) -> None:
        Target._scope.pop()

    @staticmethod
    def current() -> Target | None:
        """The innermost target entered with `with target:`, or None."""
        return Target._scope[-1] if Target._scope else None

    # -- options --------------------------------------------------------------------------------

    @property
    def kind_info(self) -> TargetKind:
        """This target's row of the target table."""
        return TARGET_KINDS[self.kind]

    @property
    def mcpu(self) -> str | None:
        return self._opts.get("mcpu")

    @property
    def mtriple(self) -> str | None:
        return self._opts.get("mtriple")

    @property
    def mattr(self) -> tuple[str, ...]:
        return self._opts.get("mattr", ())

    @property
    def fast_math(self) -> bool:
        return bool(self._opts.get("fast-math", False))

    @property
    def arch(self) -> str | None:
        """The CUDA architecture (`-arch=sm_80`), for cuda targets."""
        return self._opts.get("arch")

    @property
    def device(self) -> str | None:
        """The device class: "micro" for bare-metal microcontrollers (no OS, no heap)."""
        return self._opts.get("device")

    @property
    def num_cores(self) -> int:
        return self._opts.get("num-cores") or _default_num_cores()

    @property
    def dram_bytes_per_cycle(self) -> float:
        """DRAM bytes per cycle one core receives (-dram-bytes-per-cycle, else 8: Note
        [described machine])."""
        return self._opts.get("dram-bytes-per-cycle") or DEFAULT_DRAM_BYTES_PER_CYCLE

    @property
    def stack_bytes(self) -> int:
        """The stack of a thread running kernels (-stack-bytes, else 8 MiB: Note [described
        machine])."""
        return self._opts.get("stack-bytes") or DEFAULT_STACK_BYTES

    # -- what the machine offers ----------------------------------------------------------------

    @property
    def llvm_triple(self) -> str:
        if self.mtriple is None and self.device == "micro":
            return MICRO_TRIPLES.get(self.mcpu, "arm-none-eabi")
        return _normalize_triple(self.mtriple) if self.mtriple else _host_triple()

    def _same_arch_as_host(self) -> bool:
        return _arch(self.llvm_triple) == _arch(_host_triple())

    def _mcpu_is_host(self) -> bool:
        return self.mcpu == _host_cpu()[0] and self._same_arch_as_host()

    @property
    def features(self) -> frozenset[str]:
        """CPU feature names as LLVM spells them: "avx2", "fma", "avx512f", "amx-int8", "neon"."""
        if not self.kind_info.cpu:
            return frozenset()
        if self.mcpu is None or self._mcpu_is_host():
            if self._same_arch_as_host():
                base = _host_cpu()[1]
            else:
                base = _ARCH_BASELINE.get(_arch(self.llvm_triple), frozenset())
        else:
            base = CPU_FEATURES[self.mcpu]
        feats = set(base)
        for attr in self.mattr:
            (feats.add if attr[0] == "+" else feats.discard)(attr[1:])
        return frozenset(feats)

    @property
    def sve_vector_bits(self) -> int | None:
        """The SVE vector length code is built for (-msve-vector-bits, else the -mcpu's length
        in SVE_VECTOR_BITS); None without SVE or for a core of unknown length."""
        if "sve" not in self.features:
            return None
        return self._opts.get("msve-vector-bits") or SVE_VECTOR_BITS.get(self.mcpu)

    @property
    def vector_width_bits(self) -> int:
        feats = self.features
        if self.sve_vector_bits is not None:
            return self.sve_vector_bits
        if "avx512f" in feats:
            return 512
        if "avx2" in feats or "avx" in feats:
            return 256
        if self.device == "micro":
            # scalar code: a Cortex-M has no vector registers but MVE's, and gcc -O2 does not
            # vectorize the C generator's lane loops for MVE (DS-CNN ran 1.7x more instructions)
            return 32
        return 128

    @property
    def half_arithmetic(self) -> bool:
        """Whether the core computes in float16 (ARM's FEAT_FP16, "fullfp16"): its float16
        convs and products take the blocked kernels on half lanes (Note [half blocks])."""
        return "fullfp16" in self.features

    @property
    def blocked_float_dtypes(self) -> tuple[str, ...]:
        """The float types whose convs and products take the blocked kernels: float32, and
        float16 where the core computes in half."""
        return ("float32", "float16") if self.half_arithmetic else ("float32",)

    @property
    def vector_registers(self) -> int:
        """Architectural vector registers: 32 with AVX-512 and on AArch64, else 16."""
        if "avx512f" in self.features or self.llvm_triple.startswith(("aarch64", "arm64")):
            return 32
        return 16

    def vector_lanes(self, dtype) -> int:
        """How many elements of `dtype` fill one vector register."""
        bits = max(DType.parse(dtype).element.bits, 8)
        return max(1, self.vector_width_bits // bits)

    @property
    def is_host(self) -> bool:
        """True when code for this target can run on this machine."""
        if not self.kind_info.cpu or not self._same_arch_as_host():
            return False
        return self.features - _TUNING_ATTRS <= _host_cpu()[1]

    @property
    def llvm_cpu(self) -> str:
        if self.mcpu is not None:
            return self.mcpu
        return _host_cpu()[0] if self._same_arch_as_host() else "generic"

    # Note [512-bit vectors]
    # LLVM tunes most Intel cores with AVX-512 (Skylake-AVX512 to Sapphire Rapids, and the
    # client cores a VM may report, such as "rocketlake") to prefer 256-bit vectors: loops that
    # its own vectorizers widen get ymm registers there, while the kernels tessera vectorizes
    # explicitly for `vector_width_bits` (512) get zmm. One width for both: x86 targets with
    # AVX-512 turn the preference off ("-prefer-256-bit"), unless -mattr names it
    # ("-mattr=+prefer-256-bit" keeps LLVM's choice).

    @property
    def llvm_features(self) -> str:
        """The feature string for LLVM's target machine: the host's features plus -mattr."""
        attrs = list(self.mattr)
        if self.mcpu is None and self._same_arch_as_host():
            import llvmlite.binding as llvm

            try:
                host = llvm.get_host_cpu_features().flatten().split(",")
            except RuntimeError:
                host = []
            given = {a[1:] for a in attrs}
            attrs = [f for f in host if f and f[1:] not in given] + attrs
        if (
            "avx512f" in self.features
            and self.llvm_triple.startswith("x86_64")
            and not any(a[1:] == "prefer-256-bit" for a in self.mattr)
        ):
            # Note [512-bit vectors]
            attrs.append("-prefer-256-bit")
        return ",".join(attrs)

    # -- value semantics ------------------------------------------------------------------------

    def _key(self):
        return (self.kind, tuple(sorted(self._opts.items())), str(self._host or ""))

    def __eq__(self, other):
        if isinstance(other, str):
            try:
                other = Target(other)
            except ValueError:
                return False
        return isinstance(other, Target) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __str__(self) -> str:
        words = [self.kind]
        for key in self.kind_info.options:
            if key not in self._opts:
                continue
            value = self._opts[key]
            if key == "mattr":
                value = ",".join(value)
            words.append(f"-{key}" if value is True else f"-{key}={value}")
        return " ".join(words)

    def __repr__(self) -> str:
        return f"Target({str(self)!r})"

    def to_dict(self) -> dict:
        d = {"kind": self.kind, **{k.replace("-", "_"): v for k, v in self._opts.items()}}
        if "mattr" in d:
            d["mattr"] = list(d["mattr"])
        if self._host is not None:
            d["host"] = self._host.to_dict()
        return d
