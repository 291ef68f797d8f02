"""Benchmark on an NVIDIA GPU: ResNet-50, MobileNetV2 and BERT-base (seq 128) at batch 1 and 8,
compiled by tessera for CUDA, next to ONNX Runtime's CUDA execution provider (or PyTorch eager
where ONNX Runtime's GPU build is not installed); latency ratio and agreement.

    .venv/bin/python bench/gpu.py [--models resnet50,mobilenet_v2,bert_base] [--batches 1,8]
                                  [--arch sm_80] [--repeat 50] [--markdown docs/perf_gpu.md]

NOT RUNNABLE WITHOUT A GPU: it needs an NVIDIA GPU with its driver, cuda-python and NVRTC
(scripts/setup.d/50-gpu.sh), and onnxruntime-gpu or torch for the reference. On a machine
without one it says so and exits with status 2. The numbers in docs/performance.md come from
runs on a lent GPU machine; CI only checks that every kernel compiles (tests/gpu).

Per model and batch: tessera's compile time; latency (median of `--repeat` runs after warm-up,
each run timed from launch to `cuCtxSynchronize`, the two runtimes alternating in blocks so that
clock and thermal drift hit both); the ratio of medians; agreement max |tessera - ref| / max |ref|.
This is a benchmark, not a test: nothing asserts a time.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent


def _zoo():
    spec = importlib.util.spec_from_file_location("bench_model_zoo", ROOT / "model_zoo.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def make_model(name: str, batch: int):
    """(onnx model, feeds) of a benchmark model at `batch`."""
    zoo = _zoo()
    rng = np.random.default_rng(0)
    if name == "resnet50":
        from tessera.models import light_model

        model = light_model("resnet50")
        model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = batch
        return model, {model.graph.input[0].name: rng.standard_normal((batch, 3, 224, 224))}
    if name == "mobilenet_v2":
        model = zoo.mobilenet_v2(1.0, 224, batch=batch)
        return model, {model.graph.input[0].name: rng.standard_normal((batch, 3, 224, 224))}
    if name == "bert_base":
        model = zoo.bert_encoder(batch=batch, seq=128)
        return model, zoo.bert_inputs(model)
    raise SystemExit(f"unknown model {name!r}")


def _as_f32(feeds: dict) -> dict:
    return {k: v.astype(np.float32) if v.dtype == np.float64 else v for k, v in feeds.items()}


def reference_runner(model, feeds):
    """A callable running the model on the GPU by ONNX Runtime (CUDA EP) or PyTorch; its name."""
    try:
        import onnxruntime as ort

        if "CUDAExecutionProvider" in ort.get_available_providers():
            sess = ort.InferenceSession(
                model.SerializeToString(), providers=["CUDAExecutionProvider"]
            )
            return (lambda: sess.run(None, feeds)[0]), "onnxruntime-cuda"
    except ImportError:
        pass
    try:
        import onnx2torch  # noqa: F401
        import torch
    except ImportError:
        raise SystemExit(
            "no GPU reference: install onnxruntime-gpu (or torch and onnx2torch)"
        ) from None
    net = onnx2torch.convert(model).cuda().eval()
    args = [torch.from_numpy(v).cuda() for v in feeds.values()]

    def run():
        with torch.no_grad():
            out = net(*args)
        torch.cuda.synchronize()
        return out.cpu().numpy()

    return run, "torch-eager"


def bench_one(name: str, batch: int, arch: str, repeat: int) -> dict:
    import tessera
    from tessera.frontend import from_onnx

    model, feeds = make_model(name, batch)
    feeds = _as_f32(feeds)
    start = time.perf_counter()
    mod, params = from_onnx(model)
    lib = tessera.build(mod, target=f"cuda -arch={arch}", params=params)
    compile_s = time.perf_counter() - start
    m = lib["default"](tessera.cuda(0))
    m.set_input(**feeds)
    ref, ref_name = reference_runner(model, feeds)

    def ours():
        m.run()

    times = {"tessera": [], ref_name: []}
    for fn in (ours, ref):  # warm-up
        for _ in range(3):
            fn()
    for _ in range(max(1, repeat // 5)):
        for key, fn in (("tessera", ours), (ref_name, ref)):
            for _ in range(5):
                t = time.perf_counter()
                fn()
                times[key].append(time.perf_counter() - t)
    got, want = m.get_output(0).numpy(), ref()
    agree = float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-12))
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    return {
        "model": name,
        "batch": batch,
        "compile_s": compile_s,
        "tessera_ms": med["tessera"],
        "ref": ref_name,
        "ref_ms": med[ref_name],
        "ratio": med["tessera"] / med[ref_name],
        "agreement": agree,
    }


def markdown(rows: list[dict]) -> str:
    lines = [
        "| model | batch | tessera ms | reference | ref ms | ratio | agreement | compile s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['batch']} | {r['tessera_ms']:.2f} | {r['ref']} | "
            f"{r['ref_ms']:.2f} | {r['ratio']:.2f} | {r['agreement']:.1e} | {r['compile_s']:.1f} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="resnet50,mobilenet_v2,bert_base")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--arch", default="sm_80")
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--markdown", default=None)
    args = parser.parse_args(argv)
    from tessera.runtime.cuda_device import CUDAUnavailable, device_api

    try:
        device_api(0)
    except CUDAUnavailable as err:
        print(f"bench/gpu.py needs an NVIDIA GPU: {err}", file=sys.stderr)
        return 2
    rows = []
    for name in args.models.split(","):
        for batch in map(int, args.batches.split(",")):
            try:
                rows.append(bench_one(name, batch, args.arch, args.repeat))
            except Exception as err:  # one model's failure is a row, the suite goes on
                print(f"{name} batch {batch}: {type(err).__name__}: {err}", file=sys.stderr)
    table = markdown(rows)
    print(table)
    if args.markdown:
        Path(args.markdown).write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
