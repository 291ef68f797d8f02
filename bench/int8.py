"""Benchmark: int8 against fp32, tessera against ONNX Runtime, in one process, batch 1.

    .venv/bin/python bench/int8.py [--model resnet50] [--threads 2] [--runs 20] [--calib 8]
    .venv/bin/python bench/int8.py --model mobilenet_v2
    .venv/bin/python bench/int8.py --model bert          # BERT-base: ORT int8 is dynamic

Five runners, taking turns of a few runs each (medians in ms): tessera fp32; tessera int8 (its own
post-training quantization, tessera.quantize, its defaults); ONNX Runtime fp32; ONNX Runtime int8
(the same model through onnxruntime.quantization.quantize_static, QDQ, per-channel int8 weights,
uint8 activations, the same calibration feeds); tessera running ORT's QDQ file. Accuracy: the
SQNR of each int8 output against its fp32 one, and how many elements of tessera's run of the
QDQ file are within one output quantization step of ORT's run of it.

`--nchw-int8` adds tessera int8 with its activations in NCHW between the int8 convs (the
PassContext config "alter_layout.int8": False), against the default blocked layout (Note
[blocked int8 activations]), and checks that both give the same output bit for bit.

`--integer-depthwise` adds tessera int8 as the previous round built it: its depthwise convs on
the int8 tap-word kernel (the PassContext config "alter_layout.int8_float_depthwise": False)
and a ReLU/clip before a quantize left unfolded (pass fold_qnn_clamp disabled), against the
default (Note [float depthwise]); both give the same output bit for bit.

`--config` sets QConfig fields of tessera int8 (keyword arguments: calibrate='minmax');
`--also` adds a second tessera int8 with other fields, timed in the same turns, and prints its
SQNR and time against the first (new against old: `--also "calibrate='minmax',
weight_rounding='nearest'"`, the defaults before GPTQ).

`--layers N` adds where the time goes: every kernel call of tessera int8 and tessera fp32 timed
natively (`GraphModule.profile`), and each node of ORT int8 from its own profiler, medians over
`--runs` runs taken in turns (a per-call median shrugs off the preemptions of a shared
machine that inflate whole-run times); it prints the sums of those medians, the sums of
each call's minimum (a call of a few ms often runs once unpreempted even under a heavy load:
the figure least moved by other processes), and the N slowest
tessera int8 calls next to the ORT int8 nodes of the same source conv/matmul.

`--model` takes an onnx light model name, `mobilenet_v2` or `bert` (bench/model_zoo.py's
MobileNetV2 and BERT-base encoder; random weights: timings are real, accuracies are of a random
network) or an .onnx path; calibration feeds are seeded uniform [0, 1) samples (BERT: token
ids, model_zoo.bert_inputs). For BERT, ORT's int8 is `quantize_dynamic` (MatMulInteger on its
matmuls, activation scales at run time: ORT's recipe for transformers), and tessera runs that
file; tessera's own int8 quantizes the same matmuls with calibrated scales. A
benchmark, not a test: nothing here asserts a time. The machine may be shared: compare ratios
from one run, not absolute times across runs.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tessera  # noqa: E402
from tessera.frontend import from_onnx  # noqa: E402
from tessera.quantize import QConfig, quantize, sqnr_db  # noqa: E402
from tessera.runtime import GraphModule, cpu  # noqa: E402
from tessera.transform import PassContext  # noqa: E402


def _zoo():
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "model_zoo.py")
    spec = importlib.util.spec_from_file_location("bench_model_zoo", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load(name: str) -> onnx.ModelProto:
    if name.endswith(".onnx"):
        return onnx.load(name)
    if name == "mobilenet_v2":
        return _zoo().mobilenet_v2()
    if name == "bert":
        return _zoo().bert_encoder()
    from tessera.models import light_model

    return light_model(name)


def make_feeds(model: onnx.ModelProto, count: int, rng) -> list[dict]:
    """Seeded feeds: uniform [0, 1) float inputs; a BERT encoder's token inputs."""
    inits = {t.name for t in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits]
    if any(i.name == "input_ids" for i in inputs):
        return [_zoo().bert_inputs(model, seed=int(rng.integers(1 << 30))) for _ in range(count)]
    feeds = []
    for _ in range(count):
        feed = {}
        for vi in inputs:
            shape = tuple(d.dim_value or 1 for d in vi.type.tensor_type.shape.dim)
            feed[vi.name] = rng.random(shape, dtype=np.float32)
        feeds.append(feed)
    return feeds


def tessera_runner(mod, params, feed, config=None, disabled=()):
    with PassContext(opt_level=3, config=config, disabled_pass=list(disabled)):
        lib = tessera.build(mod, target="llvm", params=params)
    m = GraphModule(lib["default"](cpu(0)))
    for name, x in feed.items():
        m.set_input(name, x)

    def run():
        m.run()
        return m.get_output(0).numpy()

    run.module = m
    return run


def ort_runner(path_or_bytes, threads, feed):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(path_or_bytes, opts, providers=["CPUExecutionProvider"])
    return lambda: sess.run(None, feed)[0]


def ort_quantize(model, feeds, folder, dynamic=False):
    from onnxruntime import quantization as q

    if dynamic:  # ORT's recipe for transformers: int8 weights, activation scales at run time
        src, dst = os.path.join(folder, "fp32.onnx"), os.path.join(folder, "dynamic.onnx")
        onnx.save(model, src)
        q.quantize_dynamic(src, dst, weight_type=q.QuantType.QInt8, op_types_to_quantize=["MatMul"])
        return dst

    class Reader(q.CalibrationDataReader):
        def __init__(self):
            self.it = iter(feeds)

        def get_next(self):
            return next(self.it, None)

    src, dst = os.path.join(folder, "fp32.onnx"), os.path.join(folder, "qdq.onnx")
    onnx.save(modernized(model), src)
    # ORT's recommended first step: shape inference and its optimizer (batch-norms folded)
    from onnxruntime.quantization.shape_inference import quant_pre_process

    quant_pre_process(src, src, skip_symbolic_shape=True)
    q.quantize_static(
        src, dst, Reader(), quant_format=q.QuantFormat.QDQ, per_channel=True,
        activation_type=q.QuantType.QUInt8, weight_type=q.QuantType.QInt8,
    )  # fmt: skip
    return dst


def modernized(model: onnx.ModelProto) -> onnx.ModelProto:
    """Opset 13 with weights not listed as inputs, as ORT's quantizer needs (the light models
    are opset 9 with their initializers among the graph inputs)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    inits = {t.name for t in out.graph.initializer}
    keep = [i for i in out.graph.input if i.name not in inits]
    del out.graph.input[:]
    out.graph.input.extend(keep)
    out.ir_version = max(out.ir_version, 7)
    for imp in out.opset_import:
        if imp.domain in ("", "ai.onnx") and imp.version < 13:
            # ResNet-style light models use ops whose opset 9 and 13 forms agree on their
            # attributes (onnx's version converter rejects these files)
            imp.version = 13
    onnx.checker.check_model(out)
    return out


def output_step(qdq: onnx.ModelProto) -> float:
    """The scale of the DequantizeLinear that produces the graph's output, else 0."""
    out = qdq.graph.output[0].name
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in qdq.graph.initializer}
    producer = {o: n for n in qdq.graph.node for o in n.output}
    node = producer.get(out)
    while node is not None and node.op_type != "DequantizeLinear" and node.input:
        node = producer.get(node.input[0])
    if node is None or node.input[1] not in inits:
        return 0.0
    return float(inits[node.input[1]])


def call_seconds(module, runs: int) -> tuple[list, np.ndarray]:
    """(the calls of one run, each call's seconds in `runs` profiled runs: (runs, calls))."""
    calls = module.profile(repeat=1)
    seconds = [[p.seconds for p in module.profile(repeat=1)] for _ in range(runs)]
    return calls, np.array(seconds)


def ort_node_medians(
    path: str, threads: int, feed: dict, runs: int, stat=np.median
) -> dict[str, float]:
    """Median (`stat`) seconds of each node of an ORT session over `runs` runs (ORT's
    profiler)."""
    import json

    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    opts.enable_profiling = True
    with tempfile.TemporaryDirectory(prefix="tessera-ort-profile-") as tmp:
        opts.profile_file_prefix = os.path.join(tmp, "ort_profile")  # gone with the directory
        sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        for _ in range(runs + 1):
            sess.run(None, feed)
        with open(sess.end_profiling()) as f:
            events = json.load(f)
    per_node: dict[str, list[float]] = {}
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            per_node.setdefault(e["name"][: -len("_kernel_time")], []).append(e["dur"] * 1e-6)
    return {k: float(stat(v[1:] or v)) for k, v in per_node.items()}  # first: warm-up


def _anchor(nodes: list[str]) -> str:
    """The conv or matmul a fused call is built around: the first such source node."""
    first = nodes[0] if nodes else ""
    return next((n for n in nodes if n.endswith(("Conv", "Gemm", "MatMul"))), first)


def print_layers(modules: dict, ort_path: str, threads: int, feed: dict, runs: int, top: int):
    """Sums of per-call medians (tessera) and per-node medians (ORT int8); the `top` slowest
    tessera int8 calls next to ORT's nodes of the same anchor (its fused QLinearConv etc.)."""
    timings = {}
    for _ in range(2):  # in turns, twice
        for name, module in modules.items():
            calls, secs = call_seconds(module, max(1, runs // 2))
            old = timings.get(name, (calls, []))[1]
            timings[name] = (calls, list(old) + list(secs))
    ort_nodes = ort_node_medians(ort_path, threads, feed, runs)
    sums = {k: float(np.median(np.array(v[1]), axis=0).sum()) * 1e3 for k, v in timings.items()}
    print("\nper-call medians summed (ms): " + ", ".join(f"{k} {v:.2f}" for k, v in sums.items())
          + f", ORT int8 nodes {sum(ort_nodes.values()) * 1e3:.2f}")  # fmt: skip
    # a call of a few ms often runs unpreempted once: the sums of minimums are the figure least
    # moved by the other processes of a loaded machine
    mins = {k: float(np.min(np.array(v[1]), axis=0).sum()) * 1e3 for k, v in timings.items()}
    print("per-call minimums summed (ms): " + ", ".join(f"{k} {v:.2f}" for k, v in mins.items()))
    calls, secs = timings["tessera int8"][0], np.median(np.array(timings["tessera int8"][1]), 0)
    order = np.argsort(-secs)[:top]
    print(f"  {'tessera int8 ms':>15} {'ORT int8 ms':>11}  anchor / kernel")
    for k in order:
        anchor = _anchor(calls[k].nodes)
        ort_ms = sum(v for n, v in ort_nodes.items() if anchor and n.startswith(anchor)) * 1e3
        print(f"  {secs[k] * 1e3:15.3f} {ort_ms:11.3f}  {anchor} / {calls[k].kernel[:60]}")


def timed(runners: dict, runs: int) -> dict:
    """Median ms of each runner, timed in turns once the others' threads are idle (ORT's spin
    for ~30 ms after a run: Note [fair turns] in tessera/cli/bench.py)."""
    from tessera.cli.bench import measure_in_blocks

    times, _ = measure_in_blocks(runners, repeat=runs, warmup=1, duration=None)
    return {k: float(np.median(v)) * 1e3 for k, v in times.items()}


def config_fields(text: str) -> dict:
    """{"equalize": False, ...} from "equalize=False,..." (keyword arguments, values as Python
    literals: keep_float_roles=('depthwise', 'last') works)."""
    import ast

    call = ast.parse(f"f({text})", mode="eval").body
    return {k.arg: ast.literal_eval(k.value) for k in call.keywords}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--calib", type=int, default=8)
    ap.add_argument("--layers", type=int, default=0, help="print the N slowest int8 calls")
    ap.add_argument(
        "--nchw-int8",
        action="store_true",
        help="also tessera int8 with NCHW activations (alter_layout.int8 off)",
    )
    ap.add_argument(
        "--integer-depthwise",
        action="store_true",
        help="also tessera int8 with its depthwise convs on the int8 tap-word kernel and "
        "ReLU/clip before quantize unfolded (the graph before Note [float depthwise])",
    )
    ap.add_argument(
        "--config",
        default="",
        help="QConfig fields of tessera int8, e.g. calibrate='auto',weight_rounding='gptq'",
    )
    ap.add_argument(
        "--also",
        default="",
        help="QConfig fields of a second tessera int8 "
        '("tessera int8 also"), timed in the same turns: new against old',
    )
    args = ap.parse_args(argv)
    os.environ["TESSERA_NUM_THREADS"] = str(args.threads)
    tessera.runtime.set_num_threads(args.threads)
    model = load(args.model)
    rng = np.random.default_rng(0)
    feeds = make_feeds(model, args.calib, rng)
    x = make_feeds(model, 1, rng)[0]
    dynamic = "input_ids" in x
    t0 = time.perf_counter()
    mod, params = from_onnx(model)
    result = quantize(mod, params, feeds, QConfig(keep_float_below_db=0,
                                                  **config_fields(args.config)))  # fmt: skip
    print(result)
    print(f"tessera.quantize: {time.perf_counter() - t0:.1f} s")
    also = None
    if args.also:
        also = quantize(mod, params, feeds, QConfig(keep_float_below_db=0,
                                                    **config_fields(args.also)))  # fmt: skip
        print(f"tessera int8 also ({args.also}):\n{also}")
    kind = "dynamic" if dynamic else "QDQ"
    with tempfile.TemporaryDirectory() as folder:
        qdq_path = ort_quantize(model, feeds, folder, dynamic)
        qdq = onnx.load(qdq_path)
        qmod, qparams = from_onnx(qdq)
        runners = {
            "tessera fp32": tessera_runner(mod, params, x),
            "tessera int8": tessera_runner(result.mod, {}, x),
            "ORT fp32": ort_runner(model.SerializeToString(), args.threads, x),
            f"ORT int8 ({kind})": ort_runner(qdq_path, args.threads, x),
            f"tessera on ORT {kind}": tessera_runner(qmod, qparams, x),
        }
        if also is not None:
            runners["tessera int8 also"] = tessera_runner(also.mod, {}, x)
        if args.nchw_int8:  # Note [blocked int8 activations] in tessera/topi/qnn.py
            nchw = tessera_runner(result.mod, {}, x, {"alter_layout.int8": False})
            runners["tessera int8 NCHW"] = nchw
        if args.integer_depthwise:  # Note [float depthwise], Note [clamps folded into quantize]
            config = {"alter_layout.int8_float_depthwise": False}
            runners["tessera int8 integer dw"] = tessera_runner(
                result.mod, {}, x, config, disabled=["fold_qnn_clamp"]
            )
        outs = {k: fn() for k, fn in runners.items()}
        ms = timed(runners, args.runs)
        if args.layers:
            names = ["tessera fp32", "tessera int8"] + ["tessera int8 NCHW"] * args.nchw_int8
            names += ["tessera int8 integer dw"] * args.integer_depthwise
            modules = {k: runners[k].module for k in names}
            print_layers(modules, qdq_path, args.threads, x, args.runs, args.layers)
    print(f"\n{args.model}, batch 1, {args.threads} threads, median of {args.runs} runs in turns")
    for k, v in ms.items():
        print(f"  {k:<22} {v:8.2f} ms")
    ort8, on_file = f"ORT int8 ({kind})", f"tessera on ORT {kind}"
    print(f"  int8 speed-up: tessera {ms['tessera fp32'] / ms['tessera int8']:.2f}x over its fp32,"
          f" {ms[ort8] / ms['tessera int8']:.2f}x over ORT int8; on the {kind} file "
          f"{ms[ort8] / ms[on_file]:.2f}x over ORT")  # fmt: skip
    step = output_step(qdq)
    diff = np.abs(outs[on_file] - outs[ort8])
    within = float(np.mean(diff <= step * 1.001)) if step else float("nan")
    print(f"  SQNR vs fp32: tessera int8 {sqnr_db(outs['tessera fp32'], outs['tessera int8']):.1f}"
          f" dB, ORT int8 {sqnr_db(outs['ORT fp32'], outs[ort8]):.1f} dB; tessera on the file "
          f"vs ORT on it {sqnr_db(outs[ort8], outs[on_file]):.1f} dB")  # fmt: skip
    if also is not None:
        print(
            f"  tessera int8 also ({args.also}): SQNR vs fp32 "
            f"{sqnr_db(outs['tessera fp32'], outs['tessera int8 also']):.1f} dB, "
            f"{ms['tessera int8 also'] / ms['tessera int8']:.2f}x the time of tessera int8; "
            f"levels {also.levels()}"
        )
    exact = 100 * np.mean(diff == 0)
    for name, label in (
        ("tessera int8 NCHW", "blocked vs NCHW int8 activations"),
        ("tessera int8 integer dw", "float vs integer depthwise (this graph vs the previous)"),
    ):
        if name in outs:
            same = np.array_equal(outs["tessera int8"], outs[name])
            ratio = ms[name] / ms["tessera int8"]
            print(f"  {label}: {ratio:.2f}x, outputs {'bit-exact' if same else 'DIFFER'}")
    if step:
        print(f"  tessera vs ORT on the {kind} file: {100 * within:.2f}% of elements within one "
              f"output step ({step:.4g}), max diff {diff.max():.4g}, bit-exact "
              f"{exact:.2f}%")  # fmt: skip
    else:  # a float output (dynamic quantization): no step to count in; its SQNR is above
        print(f"  tessera vs ORT on the {kind} file: a float output, max diff "
              f"{diff.max():.4g}, bit-exact {exact:.2f}%")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
