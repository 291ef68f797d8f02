"""Benchmark: instructions executed under QEMU by tessera's ARM kernels against a naive build.

    .venv/bin/python bench/arm.py [--targets aarch64-neon,aarch64-sve,armv7-neon] [--only dense]
    .venv/bin/python bench/arm.py --sve [--only dense]
    .venv/bin/python bench/arm.py --fp16
    .venv/bin/python bench/arm.py --i8mm [--only 768]

For each op and ARM target (tessera.cross.testing.ARM_TARGETS) two builds of the same op, each
counted alone under QEMU user mode by the instruction-counting plugin (one call, one thread;
tessera.cross.count_kernel_instructions, which runs a kernel on zero-filled buffers):

- naive: the op's compute rule with no schedule at all (the loop nest as written, the padded
  input as a stage of its own), compiled by the same LLVM for the same CPU (which may still
  auto-vectorize it); int8: uint8 x int8 products summed in int32;
- tessera: the kernel of the one-op ONNX model built with the strategies' defaults (for ARM
  targets the "arm" strategies, then the "cpu" ones), without the layout transforms of the
  model's input and output.

--sve compares instead, per op, tessera's kernels for one SVE core (neoverse-v1) built two
ways: with SVE off (-mattr=-sve: the 128-bit NEON kernels) and with its 256-bit SVE (Note
[fixed-length SVE]), both run on QEMU's max CPU.

--fp16 counts one run of a float16 conv + dense model (tessera.cross.testing.fp16_model) on
cortex-a76 and neoverse-v1, with their half-precision arithmetic (FEAT_FP16) and without it
(-mattr=-fullfp16: each operation widened to float32), the float32 model's count on the same
core (Note [half blocks]: the float16 build does fewer), and its largest error against the
float32 model of the same weights (ONNX Runtime), relative to the output's scale.

--i8mm counts, per int8 matrix product and I8MM core (neoverse-n2: 128-bit SVE, the NEON
kernels; neoverse-v1: 256-bit SVE), the naive build, the dot kernels without I8MM
(-mattr=-i8mm: the sdot pair of Note [int8 dot], NEON or SVE) and the usmmla kernel of
qnn.dense (Note [i8mm matrix step] in topi/arm/int8_mmla.py), on QEMU's max CPU.

Instruction counts are exact and repeatable, so one run suffices; they are not times (an
emulator's wall clock says nothing of a board's), and the machine's load does not change them.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tessera.cross.testing import (  # noqa: E402
    ARM_TARGETS,
    conv_case,
    fp16_model,
    int8_matmul_case,
    matmul_case,
    missing_tools,
    naive_and_tessera_counts,
    naive_kernel_count,
    tessera_kernel_count,
)

# name -> builder of (ONNX model, te tensors); shapes from ResNet-50, MobileNetV2 and BERT
CASES = {
    "conv 3x3 64->64 28x28 (winograd)": lambda: conv_case(64, 64, 28, 3),
    "conv 3x3 s2 64->128 28x28": lambda: conv_case(64, 128, 28, 3, stride=2),
    "conv 1x1 64->256 28x28": lambda: conv_case(64, 256, 28, 1),
    "depthwise 3x3 96 28x28": lambda: conv_case(96, 96, 28, 3, groups=96),
    "depthwise 3x3 s2 96 56x56": lambda: conv_case(96, 96, 56, 3, stride=2, groups=96),
    "dense 16x768 @ 768x768": lambda: matmul_case(16, 768, 768),
    "dense 1x512 @ 512x1000": lambda: matmul_case(1, 512, 1000),
    "matmul 4x(64x64 @ 64x64)": lambda: matmul_case(64, 64, 64, constant_b=False, batch=4),
    "int8 matmul 16x768 @ 768x768": lambda: int8_matmul_case(16, 768, 768),
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--targets", default=",".join(ARM_TARGETS), help="of " + ", ".join(ARM_TARGETS))
    ap.add_argument("--only", default="", help="run the cases whose name contains this")
    ap.add_argument("--sve", action="store_true", help="neoverse-v1: NEON build vs SVE build")
    ap.add_argument("--fp16", action="store_true", help="float16 with and without FEAT_FP16")
    ap.add_argument("--i8mm", action="store_true", help="int8: naive vs sdot vs usmmla")
    args = ap.parse_args(argv)
    if args.sve:
        return sve_table(args.only)
    if args.i8mm:
        return i8mm_table(args.only)
    if args.fp16:
        return fp16_table()
    rows = []
    with tempfile.TemporaryDirectory(prefix="tessera-bench-arm-") as tmp:
        for target_name in args.targets.split(","):
            target = ARM_TARGETS[target_name][0]
            if missing_tools(target):
                print(f"{target_name}: not installed: {missing_tools(target)}", file=sys.stderr)
                continue
            for name, build in CASES.items():
                if args.only not in name:
                    continue
                naive, ours = naive_and_tessera_counts(build(), target_name, Path(tmp))
                rows.append((name, target_name, naive, ours))
                print(f"  {target_name:13s} {name:34s} {naive:>12,d} {ours:>12,d}", file=sys.stderr)
    print("| kernel | target | naive | tessera | naive / tessera |")
    print("|---|---|---:|---:|---:|")
    for name, target_name, naive, ours in rows:
        print(f"| {name} | {target_name} | {naive:,d} | {ours:,d} | {naive / ours:.1f}x |")
    return 0


SVE_CORE = ARM_TARGETS["aarch64-sve"][0]  # neoverse-v1: 256-bit SVE


def count_rows(cases: dict, only: str, counts_of) -> list[tuple] | None:
    """(name, *counts_of(case, folder)) per case whose name contains `only`, each printed to
    stderr as it comes; None (and a message) when the aarch64 tools are not installed."""
    if missing_tools(SVE_CORE):
        print(f"not installed: {missing_tools(SVE_CORE)}", file=sys.stderr)
        return None
    rows = []
    with tempfile.TemporaryDirectory(prefix="tessera-bench-arm-") as tmp:
        for name, build in cases.items():
            if only not in name:
                continue
            for counts in counts_of(build(), Path(tmp)):
                rows.append((name, *counts))
                print(f"  {name:34s} {counts}", file=sys.stderr)
    return rows


def sve_table(only: str) -> int:
    """Per op: tessera's kernel for neoverse-v1 with SVE off (NEON) and on (256-bit SVE)."""

    def counts_of(case, tmp):
        neon = tessera_kernel_count(case, SVE_CORE + " -mattr=-sve", "max", tmp / "n.so")
        yield neon, tessera_kernel_count(case, SVE_CORE, "max", tmp / "s.so")

    rows = count_rows(CASES, only, counts_of)
    if rows is None:
        return 1
    print("| kernel (neoverse-v1) | NEON build | SVE build (256-bit) | NEON / SVE |")
    print("|---|---:|---:|---:|")
    for name, neon, sve in rows:
        print(f"| {name} | {neon:,d} | {sve:,d} | {neon / sve:.2f}x |")
    return 0


I8MM_CASES = {
    "int8 matmul 16x768 @ 768x768": lambda: int8_matmul_case(16, 768, 768),
    "int8 matmul 128x768 @ 768x768": lambda: int8_matmul_case(128, 768, 768),
    "int8 matmul 1x512 @ 512x1000": lambda: int8_matmul_case(1, 512, 1000),
}


def i8mm_table(only: str) -> int:
    """Per int8 product and I8MM core: naive, sdot (-mattr=-i8mm) and usmmla builds."""

    def counts_of(case, tmp):
        for core in ("neoverse-n2", "neoverse-v1"):
            target = f"llvm -mtriple=aarch64-linux-gnu -mcpu={core}"
            naive = naive_kernel_count(case, target, "max", tmp / "naive.so")
            sdot = tessera_kernel_count(case, target + " -mattr=-i8mm", "max", tmp / "s.so")
            yield core, naive, sdot, tessera_kernel_count(case, target, "max", tmp / "m.so")

    rows = count_rows(I8MM_CASES, only, counts_of)
    if rows is None:
        return 1
    print("| kernel | core | naive | sdot | usmmla | sdot / usmmla | naive / usmmla |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name, core, naive, sdot, mmla in rows:
        print(f"| {name} | {core} | {naive:,d} | {sdot:,d} | {mmla:,d} | {sdot / mmla:.2f}x "
              f"| {naive / mmla:.1f}x |")  # fmt: skip
    return 0


def fp16_table() -> int:
    """The float16 model's instructions with FEAT_FP16 and widened, per core."""
    import numpy as np

    import tessera
    from tessera.cross import count_instructions, run_under_qemu
    from tessera.frontend.testing import run_ort

    if missing_tools(SVE_CORE):
        print(f"not installed: {missing_tools(SVE_CORE)}", file=sys.stderr)
        return 1
    models, x = fp16_model()
    expected = run_ort(models[np.float32], {"x": x.astype(np.float32)})
    mod, params = tessera.frontend.from_onnx(models[np.float16])
    mod32, params32 = tessera.frontend.from_onnx(models[np.float32])
    print("| core | fp16 (fmla on halves) | widened (-mattr=-fullfp16) | float32 model "
          "| widened / fp16 | float32 / fp16 | error |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="tessera-bench-arm-") as tmp:
        for cpu in ("cortex-a76", "neoverse-v1"):
            counts, errors = [], []
            for extra in ("", " -mattr=-fullfp16"):
                target = f"llvm -mtriple=aarch64-linux-gnu -mcpu={cpu}{extra}"
                lib = tessera.build(mod, target=target, params=params)
                path = lib.export_library(Path(tmp) / "fp16.so")
                got = run_under_qemu(path, {"x": x}, cpu="max")
                for g, e in zip(got, expected, strict=True):
                    errors.append(np.abs(g.astype(np.float32) - e).max() / np.abs(e).max())
                counts.append(count_instructions(path, {"x": x}, cpu="max"))
            target = f"llvm -mtriple=aarch64-linux-gnu -mcpu={cpu}"
            lib = tessera.build(mod32, target=target, params=params32)
            path = lib.export_library(Path(tmp) / "fp32.so")
            counts.append(count_instructions(path, {"x": x.astype(np.float32)}, cpu="max"))
            half, wide, single = counts
            print(f"| {cpu} | {half:,d} | {wide:,d} | {single:,d} | {wide / half:.1f}x "
                  f"| {single / half:.2f}x | {max(errors):.1e} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
