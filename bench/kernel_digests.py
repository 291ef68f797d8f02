"""Digests of every kernel a model compiles to: a check that a refactoring changed no code.

    .venv/bin/python bench/kernel_digests.py out.json [resnet50,shufflenet,mobilenet_v2,bert]
    # on two checkouts (PYTHONPATH=<other checkout>), then compare the two JSON files

For each model: the sha256 (16 hex digits) of each distinct kernel's source (LLVM IR), sorted,
built at opt level 3 for the host with the compile cache off. Equal lists mean the same machine
code, so the same speed. Prints each model's kernel count and build seconds to stderr.
"""

import hashlib
import importlib.util
import json
import sys
import time
from pathlib import Path

import tessera
import tessera.driver as driver
import tessera.models as models
from tessera.frontend import from_onnx

DEFAULT = "resnet50,shufflenet,mobilenet_v2,bert"


def _zoo():
    spec = importlib.util.spec_from_file_location("zoo", Path(__file__).parent / "model_zoo.py")
    zoo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(zoo)
    return zoo


def _model(name: str):
    if name == "mobilenet_v2":
        return _zoo().mobilenet_v2()
    if name == "bert":
        return _zoo().bert_encoder()
    return models.light_model(name)


def kernel_digests(model) -> list[str]:
    recorded: list[str] = []
    compile_groups = driver.compile_groups

    def recording(func, target, optimize):
        kernels, names = compile_groups(func, target, optimize)
        recorded.extend(hashlib.sha256(k.source.encode()).hexdigest()[:16] for k in kernels)
        return kernels, names

    mod, params = from_onnx(model)
    driver.compile_groups = recording
    try:
        with tessera.transform.PassContext(opt_level=3, config={"codegen.cache": False}):
            tessera.build(mod, target="llvm", params=params)
    finally:
        driver.compile_groups = compile_groups
    return sorted(recorded)


def main() -> None:
    out = {}
    for name in (sys.argv[2] if len(sys.argv) > 2 else DEFAULT).split(","):
        start = time.time()
        out[name] = kernel_digests(_model(name))
        print(name, len(out[name]), round(time.time() - start, 1), file=sys.stderr, flush=True)
    Path(sys.argv[1]).write_text(json.dumps(out, indent=0))


if __name__ == "__main__":
    main()
