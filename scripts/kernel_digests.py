"""Print a digest of the optimized TIR of every kernel of the bench/models.py suite (host
target, opt level 3), one line each: diff the output of two checkouts to see which kernels a
change touches (equal digests: the same code, so the same speed, whatever the machine's load).

    PYTHONPATH=. .venv/bin/python scripts/kernel_digests.py [resnet50,bert_base,...] [target]

The target defaults to "llvm" (this machine); another CPU's kernels are lowered without being
run ("llvm -mcpu=skylake-avx512" on an AVX2 machine).
"""

import hashlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import models  # noqa: E402  (bench/models.py: the suite)

import tessera  # noqa: E402
from tessera.driver import fused_function, optimize  # noqa: E402
from tessera.frontend import from_onnx  # noqa: E402
from tessera.graph_build.lower_group import distinct_groups, lower_group  # noqa: E402
from tessera.transform import PassContext  # noqa: E402


def main() -> None:
    names = sys.argv[1].split(",") if len(sys.argv) > 1 and sys.argv[1] else list(models.SUITE)
    target = tessera.Target(sys.argv[2] if len(sys.argv) > 2 else "llvm")
    for name in names:
        mod, params = from_onnx(models.SUITE[name].build())
        with PassContext(opt_level=3):
            groups, _ = distinct_groups(fused_function(mod, target, params))
            for group in groups:
                text = str(optimize(lower_group(group, target), target))
                print(target, name, group.name, hashlib.sha256(text.encode()).hexdigest()[:16])


if __name__ == "__main__":
    main()
