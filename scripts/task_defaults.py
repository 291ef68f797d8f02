"""Print the default config of every task of ResNet-50, ShuffleNet, MobileNetV2 and a BERT
layer (host and AVX2 targets), one line each: diff the output of two checkouts to see that a
change of the strategies' rules leaves the defaults alone.

    PYTHONPATH=. .venv/bin/python scripts/task_defaults.py > defaults.txt
"""

import importlib.util
import json
from pathlib import Path

import tessera
from tessera import autotune
from tessera.frontend import from_onnx
from tessera.transform import PassContext

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    spec = importlib.util.spec_from_file_location("zoo", ROOT / "bench" / "model_zoo.py")
    zoo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(zoo)
    models = {
        "resnet50": lambda: tessera.models.light_model("resnet50"),
        "shufflenet": lambda: tessera.models.light_model("shufflenet"),
        "mobilenet_v2": zoo.mobilenet_v2,
        "bert": lambda: zoo.bert_encoder(layers=1, seq=32),
    }
    for name in ("llvm", "llvm -mcpu=haswell"):
        target = tessera.Target(name)
        for model, make in models.items():
            mod, params = from_onnx(make())
            with PassContext(opt_level=3):
                contexts = {}
                for task in autotune.extract_tasks(mod, params, target, contexts=contexts):
                    config = task.default(target, contexts.get(task))
                    knobs = json.dumps(config.knobs(), sort_keys=True)
                    print(name, model, task, config.impl, knobs)


if __name__ == "__main__":
    main()
