"""Benchmark: tessera against Arm's CMSIS-NN on the same DS-CNN (keyword spotting), layer by
layer, float32, on the emulated Cortex-M4F (mps2-an386): instructions per layer, RAM and flash.

    .venv/bin/python bench/cmsis_nn.py [--cmsis ../shared/baselines] [--seed 0] [--int8]
                                       [--board mps2-an386 | mps3-an547]

The CMSIS-NN side is a C program written here (weights converted to CMSIS-NN's NHWC layouts,
`arm_convolve_wrapper_f32`, `arm_depthwise_conv_wrapper_f32`, `arm_avg_pool_f32`,
`arm_fully_connected_f32`, `arm_softmax_f32`), built from the baseline sources in
../shared/baselines (never copied into tessera) with the same gcc and flags, and run on the
same board with the same instruction counter between the same markers. Its output is checked
against tessera's before any count is reported, so both compute the same model. The tessera
side is `tessera.micro.Session`. With --int8, also the MLPerf Tiny setting: tessera's int8
DS-CNN (mlperf_tiny.quantize_int8) against CMSIS-NN's s8 kernels with DSP on the same layers,
per layer, for the four MLPerf Tiny models (--models; the CMSIS-NN program's weights are
random: counts only, outputs not compared).
With --board mps3-an547 (Cortex-M55) both sides are built for the M55: tessera's int8 kernels
take MVE (topi/micro/mve.py) and CMSIS-NN, built with -mcpu=cortex-m55, its MVE paths
(`ARM_MATH_MVEI`, which its headers define from the compiler's `__ARM_FEATURE_MVE`).
A benchmark, not a test: nothing here asserts a count.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
from pathlib import Path

import numpy as np
from onnx import helper, numpy_helper

import tessera
from tessera.micro import Session, boards, mlperf_tiny, toolchain
from tessera.runtime import GraphModule, cpu

ROOT = Path(__file__).resolve().parents[1]
BOARD = "mps2-an386"


def _layers(model):
    """DS-CNN's layers in order: (kind, first ONNX node name, weights, attrs)."""
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    layers = []
    for node in model.graph.node:
        attrs = {a.name: a for a in node.attribute}
        if node.op_type == "Conv":
            w, b = inits[node.input[1]], inits[node.input[2]]
            group = attrs["group"].i if "group" in attrs else 1
            kind = "dw" if group > 1 else "conv"
            stride = list(attrs["strides"].ints)[0]
            pads = list(attrs["pads"].ints)
            layers.append((kind, node.name, (w, b), {"stride": stride, "pad": pads[:2]}))
        elif node.op_type == "AveragePool":
            layers.append(("avgpool", node.name, (), {"kernel": list(attrs["kernel_shape"].ints)}))
        elif node.op_type == "Gemm":
            layers.append(("fc", node.name, (inits[node.input[1]], inits[node.input[2]]), {}))
        elif node.op_type == "Softmax":
            layers.append(("softmax", node.name, (), {}))
    return layers


def _array(name: str, a: np.ndarray) -> str:
    values = ", ".join(f"{v!r}f" for v in np.asarray(a, np.float32).reshape(-1).tolist())
    return f"static const float {name}[{a.size}] = {{{values}}};"


def cmsis_program(model, x: np.ndarray) -> tuple[str, list[str]]:
    """(C source of DS-CNN on CMSIS-NN, the ONNX node name of each measured layer)."""
    lines = [
        '#include "arm_nnfunctions.h"',
        "#include <stdint.h>",
        "#include <string.h>",
        "void tessera_mark_begin(void);",
        "void tessera_mark_end(void);",
        "int write_output(const void* data, uint32_t n);",
        _array("input", x),  # NCHW with C = 1 is NHWC
    ]
    h, w, c = x.shape[2], x.shape[3], x.shape[1]
    body, names = [], []
    for k, (kind, name, weights, attrs) in enumerate(_layers(model)):
        src, dst = ("input" if k == 0 else f"act{(k - 1) % 2}"), f"act{k % 2}"
        names.append(name)
        relu = "{0.0f, ARM_NN_F32_FINITE_MAX}"
        if kind in ("conv", "dw"):
            wt, b = weights
            cout, _, kh, kw = wt.shape
            s, (ph, pw) = attrs["stride"], attrs["pad"]
            oh, ow = (h + 2 * ph - kh) // s + 1, (w + 2 * pw - kw) // s + 1
            if kind == "conv" and kh == 10:  # DS-CNN's first conv pads 4/5 rows: one more
                oh = (h + 4 + 5 - kh) // s + 1
            layout = wt.transpose(0, 2, 3, 1) if kind == "conv" else wt[:, 0].transpose(1, 2, 0)
            lines += [_array(f"w{k}", layout), _array(f"b{k}", b)]
            dims = f"{{1, {h}, {w}, {c}}}, fd = {{{cout if kind == 'conv' else 1}, {kh}, {kw}, "
            dims += f"{c if kind == 'conv' else cout}}}, bd = {{1, 1, 1, {cout}}}, "
            dims += f"od = {{1, {oh}, {ow}, {cout}}}"
            body.append(f"  {{ cmsis_nn_dims id = {dims};")
            tile = f"{{{s}, {s}}}, {{{pw}, {ph}}}, {{1, 1}}, {relu}"
            if kind == "conv":
                body.append(
                    f"    cmsis_nn_conv_params_f32 p = {{{tile}, ARM_NN_WEIGHT_FORMAT_STANDARD}};"
                )
                call = "arm_convolve_wrapper_f32"
            else:
                body.append(f"    cmsis_nn_dw_conv_params_f32 p = {{1, {tile}}};")
                call = "arm_depthwise_conv_wrapper_f32"
            body.append(
                f"    MEASURE({call}(&ctx, &p, &id, {src}, &fd, w{k}, &bd, b{k}, &od, {dst})); }}"
            )
            h, w, c = oh, ow, cout
        elif kind == "avgpool":
            kh, kw = attrs["kernel"]
            body.append(
                f"  {{ cmsis_nn_dims id = {{1, {h}, {w}, {c}}}, fd = {{1, {kh}, {kw}, 1}}, "
                f"od = {{1, 1, 1, {c}}};"
            )
            body.append("    cmsis_nn_pool_params_f32 p = {{1, 1}, {0, 0}, "
                        "{-ARM_NN_F32_FINITE_MAX, ARM_NN_F32_FINITE_MAX}};")  # fmt: skip
            body.append(f"    MEASURE(arm_avg_pool_f32(&ctx, &p, &id, {src}, &fd, &od, {dst})); }}")
            h = w = 1
        elif kind == "fc":
            wt, b = weights
            lines += [_array(f"w{k}", wt), _array(f"b{k}", b)]
            n_out, n_in = wt.shape
            body.append(
                f"  {{ cmsis_nn_dims id = {{1, 1, 1, {n_in}}}, fd = {{{n_in}, 1, 1, {n_out}}}, "
                f"bd = {{1, 1, 1, {n_out}}}, od = {{1, 1, 1, {n_out}}};"
            )
            body.append("    cmsis_nn_fc_params_f32 p = {{-ARM_NN_F32_FINITE_MAX, "
                        "ARM_NN_F32_FINITE_MAX}, ARM_NN_WEIGHT_FORMAT_STANDARD};")  # fmt: skip
            body.append(
                f"    MEASURE(arm_fully_connected_f32(&ctx, &p, &id, {src}, &fd, w{k}, &bd, b{k}, "
                f"&od, {dst}, ARM_NN_LAYOUT_NHWC)); }}"
            )
            c = n_out
        else:
            body.append(f"  MEASURE(arm_softmax_f32({src}, 1, {c}, {dst}));")
            last = dst
    lines += [
        "static float act0[64 * 25 * 5], act1[64 * 25 * 5];",
        "static float scratch[8192] __attribute__((aligned(16)));",
        "#define MEASURE(x) do { tessera_mark_begin(); arm_cmsis_nn_status st = x; "
        "tessera_mark_end(); if (st != ARM_CMSIS_NN_SUCCESS) return 10; } while (0)",
        "int main(void) {",
        "  cmsis_nn_context ctx = {scratch, sizeof scratch};",
        *body,
        f"  return write_output({last}, {c} * sizeof(float));",
        "}",
    ]
    return "\n".join(lines) + "\n", names


def _s8_layers(model):
    """The float model's layers for the int8 program, in order: (op, node, input names, attrs,
    weights); Relu and Flatten become aliases (CMSIS-NN folds a ReLU into the activation range
    of the layer before it; NHWC data is already flat)."""
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    for node in model.graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        weights = [inits[n] for n in node.input if n in inits]
        data = [n for n in node.input if n not in inits]
        yield node.op_type, node.name, data, node.output[0], attrs, weights


def cmsis_program_s8(model, seed: int = 0) -> tuple[str, list[str]]:
    """The model's layers on CMSIS-NN's int8 kernels (the MLPerf Tiny setting, DSP on the M4):
    convolutions (arm_convolve_wrapper_s8, arm_depthwise_conv_wrapper_s8), pooling
    (arm_avgpool_s8), dense (arm_fully_connected_s8), residual adds (arm_elementwise_add_s8)
    and softmax (arm_softmax_s8), with random int8 weights and inputs and fixed
    requantization (multiplier 0.5, shift -7): the instruction-count baseline for tessera's
    int8 kernels (outputs are not compared). Activations share buffers by liveness."""
    rng = np.random.default_rng(seed)

    def s8(name, shape):
        values = ", ".join(map(str, rng.integers(-127, 128, shape).reshape(-1).tolist()))
        return f"static const int8_t {name}[{int(np.prod(shape))}] = {{{values}}};"

    def i32(name, n, value=None):
        values = rng.integers(-1000, 1000, n) if value is None else np.full(n, value)
        return f"static int32_t {name}[{n}] = {{{', '.join(map(str, values.tolist()))}}};"

    layers = list(_s8_layers(model))
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    h, w, c = (dims[2], dims[3], dims[1]) if len(dims) == 4 else (1, 1, dims[-1])
    lines = [
        '#include "arm_nnfunctions.h"',
        "#include <stdint.h>",
        "void tessera_mark_begin(void);",
        "void tessera_mark_end(void);",
        "int write_output(const void* data, uint32_t n);",
        s8("input", (h * w * c,)),
    ]
    first = model.graph.input[0].name
    canon = {first: first}  # Relu and Flatten outputs are their input's buffer
    for op, _, data, out, _, _ in layers:
        canon[out] = canon[data[0]] if op in ("Relu", "Flatten") else out
    last_use = {v: len(layers) for v in (canon[model.graph.output[0].name],)}
    for k, (_, _, data, _, _, _) in enumerate(layers):
        for n in data:
            v = canon[n]
            last_use[v] = max(last_use.get(v, k), k)
    shape, where = {first: (h, w, c)}, {first: "input"}
    slots: list[list] = []  # [bytes, the value it holds or None]

    def buffer(k, value, size):
        """A buffer for `value`, computed by layer k: one whose value is dead by then."""
        for slot in slots:
            if slot[1] is not None and last_use[slot[1]] < k:
                slot[1] = None
        for i, slot in enumerate(slots):
            if slot[1] is None:
                slot[0], slot[1] = max(slot[0], size), value
                return f"buf{i}"
        slots.append([size, value])
        return f"buf{len(slots) - 1}"

    body, names = [], []
    for k, (op, name, data, out, attrs, weights) in enumerate(layers):
        src = canon[data[0]]
        h, w, c = shape[src]
        if op in ("Relu", "Flatten"):
            shape[src] = (1, 1, h * w * c) if op == "Flatten" else (h, w, c)
            continue
        names.append(name)
        if op == "Conv":
            wt = weights[0]
            cout, _, kh, kw = wt.shape
            s = list(attrs.get("strides", [1, 1]))[0]
            pt, pl, pb, pr = list(attrs.get("pads", [0, 0, 0, 0]))
            oh, ow = (h + pt + pb - kh) // s + 1, (w + pl + pr - kw) // s + 1
            dw = attrs.get("group", 1) > 1
            fshape = (1, kh, kw, cout) if dw else (cout, kh, kw, c)
            lines += [s8(f"w{k}", fshape), i32(f"b{k}", cout)]
            lines += [i32(f"m{k}", cout, 1 << 30), i32(f"s{k}", cout, -7)]
            dst = buffer(k, out, oh * ow * cout)
            d = f"{{1, {h}, {w}, {c}}}, fd = {{{fshape[0]}, {kh}, {kw}, {fshape[3]}}}, "
            d += f"bd = {{1, 1, 1, {cout}}}, od = {{1, {oh}, {ow}, {cout}}}"
            body.append(f"  {{ cmsis_nn_dims id = {d};")
            body.append(f"    cmsis_nn_per_channel_quant_params q = {{m{k}, s{k}}};")
            tile = f"{{{s}, {s}}}, {{{pl}, {pt}}}, {{1, 1}}, {{-128, 127}}"
            if dw:
                body.append(f"    cmsis_nn_dw_conv_params p = {{0, 0, 1, {tile}}};")
                size = "arm_depthwise_conv_wrapper_s8_get_buffer_size(&p, &id, &fd, &od)"
                call = "arm_depthwise_conv_wrapper_s8"
            else:
                body.append(f"    cmsis_nn_conv_params p = {{0, 0, {tile}}};")
                size = "arm_convolve_wrapper_s8_get_buffer_size(&p, &id, &fd, &od)"
                call = "arm_convolve_wrapper_s8"
            body.append(f"    if ({size} > (int32_t)sizeof scratch) return 11;")
            args = f"&ctx, &p, &q, &id, {where[src]}, &fd, w{k}, &bd, b{k}, &od, {dst}"
            body.append(f"    MEASURE({call}({args})); }}")
            shape[out] = (oh, ow, cout)
        elif op in ("AveragePool", "GlobalAveragePool"):
            kh, kw = attrs["kernel_shape"] if op == "AveragePool" else (h, w)
            dst = buffer(k, out, c)
            body.append(
                f"  {{ cmsis_nn_dims id = {{1, {h}, {w}, {c}}}, fd = {{1, {kh}, {kw}, 1}}, "
                f"od = {{1, 1, 1, {c}}};"
            )
            body.append("    cmsis_nn_pool_params p = {{1, 1}, {0, 0}, {-128, 127}};")
            body.append(
                f"    MEASURE(arm_avgpool_s8(&ctx, &p, &id, {where[src]}, &fd, &od, {dst})); }}"
            )
            shape[out] = (1, 1, c)
        elif op == "Gemm":
            n_out, n_in = weights[0].shape
            lines += [s8(f"w{k}", (n_out, n_in)), i32(f"b{k}", n_out)]
            dst = buffer(k, out, n_out)
            body.append(
                f"  {{ cmsis_nn_dims id = {{1, 1, 1, {n_in}}}, fd = {{{n_in}, 1, 1, {n_out}}}, "
                f"bd = {{1, 1, 1, {n_out}}}, od = {{1, 1, 1, {n_out}}};"
            )
            body.append("    cmsis_nn_fc_params p = {0, 0, 0, {-128, 127}};")
            body.append("    cmsis_nn_per_tensor_quant_params q = {1 << 30, -7};")
            body.append("    if (arm_fully_connected_s8_get_buffer_size(&fd) > 0)")
            body.append(f"      arm_vector_sum_s8(ctx.buf, {n_in}, {n_out}, w{k}, 0, 0, b{k});")
            body.append(
                f"    MEASURE(arm_fully_connected_s8(&ctx, &p, &q, &id, {where[src]}, &fd, w{k}, "
                f"&bd, b{k}, &od, {dst})); }}"
            )
            shape[out] = (1, 1, n_out)
        elif op == "Add":
            other = canon[data[1]]
            dst = buffer(k, out, h * w * c)
            body.append(
                f"  MEASURE(arm_elementwise_add_s8({where[src]}, {where[other]}, 0, 1 << 30, 0, "
                f"0, 1 << 30, 0, 20, {dst}, 0, 1 << 30, -21, -128, 127, {h * w * c}));"
            )
            shape[out] = (h, w, c)
        elif op == "Softmax":
            dst = buffer(k, out, c)
            body.append(
                f"  tessera_mark_begin(); arm_softmax_s8({where[src]}, 1, {c}, 1077952576, 23, "
                f"-248, {dst}); tessera_mark_end();"
            )
            shape[out] = (1, 1, c)
        else:
            raise ValueError(f"no CMSIS-NN int8 layer for {op} ({name})")
        where[out] = dst
    last = canon[model.graph.output[0].name]
    h, w, c = shape[last]
    lines += [f"static int8_t buf{i}[{size}];" for i, (size, _) in enumerate(slots)]
    lines += [
        "static int32_t scratch[8192];",
        "#define MEASURE(x) do { tessera_mark_begin(); arm_cmsis_nn_status st = x; "
        "tessera_mark_end(); if (st != ARM_CMSIS_NN_SUCCESS) return 10; } while (0)",
        "int main(void) {",
        "  cmsis_nn_context ctx = {scratch, sizeof scratch};",
        *body,
        f"  return write_output({where[last]}, {h * w * c});",
        "}",
    ]
    return "\n".join(lines) + "\n", names


_RUNTIME = r"""
#include <stdint.h>
#include <string.h>
static inline uint32_t semihost(uint32_t op, const void* arg) {
  register uint32_t r0 __asm__("r0") = op;
  register const void* r1 __asm__("r1") = arg;
  __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
  return r0;
}
__attribute__((noreturn)) void tessera_exit(int code) {
  uint32_t block[2] = {0x20026u, (uint32_t)code};
  semihost(0x20, block);
  for (;;) {}
}
void tessera_fault(uint32_t ipsr, const uint32_t* frame) {
  (void)ipsr;
  (void)frame;
  tessera_exit(93);
}
__attribute__((noinline, used)) void tessera_mark_begin(void) { __asm__ volatile(""); }
__attribute__((noinline, used)) void tessera_mark_end(void) { __asm__ volatile(""); }
int write_output(const void* data, uint32_t n) {
  uint32_t open[3] = {(uint32_t)(uintptr_t)"out.bin", 5, 7};
  int32_t fd = (int32_t)semihost(0x01, open);
  uint32_t w[3] = {(uint32_t)fd, (uint32_t)(uintptr_t)data, n};
  return fd < 0 || semihost(0x05, w) != 0;
}
"""


def _int8_file(stem: str) -> bool:
    if any(t in stem for t in ("f16", "f32", "flt", "_s4")):
        return False
    return "s8" in stem or not any(t in stem for t in ("s16", "s64"))


def _library_sources(nn: Path, int8: bool) -> list[str]:
    every = sorted((nn / "Source").rglob("*.c"))
    if int8:  # the 8-bit kernels and their support code (no float, 4- or 16-bit kernels)
        return [str(p) for p in every if _int8_file(p.stem)]
    tables = nn / "Source" / "NNSupportFunctions" / "arm_nntables_flt.c"
    return [str(p) for p in every if "f32" in p.stem] + [str(tables)]


def run_cmsis(source: str, cmsis: Path, n_out: int, int8: bool = False):
    """(output, per-layer instruction counts, {text, data, bss} bytes) of the program."""
    nn = cmsis / "cmsis-nn"
    board = boards.get_board(BOARD)
    sources = _library_sources(nn, int8)
    with tempfile.TemporaryDirectory(prefix="tessera-cmsis-") as tmp:
        folder = Path(tmp)
        (folder / "model.c").write_text(source)
        (folder / "runtime.c").write_text(_RUNTIME)
        (folder / "board.ld").write_text(board.linker_script())
        startup = boards.FIRMWARE_DIR / "startup.c"
        cmd = [toolchain.GCC, *toolchain.cpu_flags(board.mcpu), *toolchain.OPT_FLAGS]
        cmd += ["-std=c99", "-DARM_NN_ENABLE_F32=1", "-DARM_MATH_DSP", f"-I{nn / 'Include'}"]
        cmd += [f"-I{cmsis / 'cmsis-core' / 'CMSIS' / 'Core' / 'Include'}", "-nostartfiles"]
        cmd += ["--specs=nano.specs", "--specs=nosys.specs", "-Wl,--gc-sections", "-T", "board.ld"]
        cmd += ["model.c", "runtime.c", str(startup), *sources, "-lm", "-o", "cmsis.elf"]
        toolchain.run(cmd, "building the CMSIS-NN program", cwd=folder)
        elf = folder / "cmsis.elf"
        marks = boards.symbol_addresses(elf, ("tessera_mark_begin", "tessera_mark_end"))
        plugin = boards.insncount_plugin()
        counts_file = folder / "counts.txt"
        plugin_arg = (
            f"{plugin},begin={marks['tessera_mark_begin']:#x},"
            f"end={marks['tessera_mark_end']:#x},out={counts_file}"
        )
        proc = subprocess.run(
            board.qemu_command(elf, plugin_arg), cwd=folder, capture_output=True, timeout=300
        )
        if proc.returncode != 0:
            raise RuntimeError(f"the CMSIS-NN program exited with {proc.returncode}")
        counts = [int(x.split()[-1]) for x in counts_file.read_text().splitlines() if "region" in x]
        output = np.fromfile(folder / "out.bin", np.int8 if int8 else np.float32)[:n_out]
        size = toolchain.run([toolchain.SIZE, str(elf)], "size").splitlines()[1].split()
        return output, counts, {"text": int(size[0]), "data": int(size[1]), "bss": int(size[2])}


def main() -> None:
    global BOARD
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cmsis", default=str(ROOT.parent.parent / "shared" / "baselines"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--int8", action="store_true", help="also the int8 models: tessera's and CMSIS-NN's kernels"
    )
    parser.add_argument("--models", default=",".join(mlperf_tiny.MODELS), help="for --int8")
    parser.add_argument("--board", default=BOARD, help="mps2-an386 (M4F) or mps3-an547 (M55)")
    parser.add_argument(
        "--no-float",
        action="store_true",
        help="skip the float32 DS-CNN (on the M55, Debian's gcc 12 cannot link CMSIS-NN's MVE "
        "float kernels: undefined __ARM_undef)",
    )
    args = parser.parse_args()
    BOARD = args.board
    cmsis = Path(args.cmsis)
    if not (cmsis / "cmsis-nn" / "Include" / "arm_nnfunctions.h").exists():
        raise SystemExit(f"no CMSIS-NN at {cmsis} (pass --cmsis DIR holding cmsis-nn/)")
    summary = "cmsis_nn:"
    if not args.no_float:
        summary += " " + _float_ds_cnn(cmsis, args.seed) + ";"
    for name in args.models.split(",") if args.int8 else ():
        net = mlperf_tiny.MODELS[name](args.seed)
        mine8, theirs8 = _int8_baseline(name, net, cmsis, args.seed)
        summary += f" {name} int8 {mine8 / 1e6:.2f}M vs {theirs8 / 1e6:.2f}M "
        summary += f"({mine8 / theirs8:.2f}x);"
    print(f"{summary.rstrip(';')}, on {BOARD}")


def _float_ds_cnn(cmsis: Path, seed: int) -> str:
    """The float32 DS-CNN on both sides, outputs checked, per layer; its summary."""
    model = mlperf_tiny.kws_ds_cnn(seed)
    x = np.random.default_rng(1).standard_normal((1, 1, 49, 10)).astype(np.float32)
    mod, params = tessera.frontend.from_onnx(model, {"input": x.shape})
    lib = tessera.build(mod, target=_target(), params=params)
    m = GraphModule(lib["default"](cpu(0)))
    m.set_input("input", x)
    m.run()
    host = m.get_output(0).numpy().reshape(-1)
    with Session(lib, board=BOARD) as s:
        s.set_input("input", x)
        counts = s.run()
    source, names = cmsis_program(model, x)
    out, cmsis_counts, size = run_cmsis(source, cmsis, host.size)
    if not np.allclose(out, host, rtol=1e-4, atol=1e-6):
        raise SystemExit(f"CMSIS-NN and tessera disagree: {out} vs {host}")
    ours = {}
    for call, n in zip(lib.plan["calls"], counts, strict=True):
        key = call["nodes"][0] if call.get("nodes") else call["kernel"]
        ours[key] = ours.get(key, 0) + n
    print(f"DS-CNN float32 on {BOARD}: outputs agree (max diff {np.abs(out - host).max():.1e})")
    print(f"{'layer (ONNX node)':22} {'tessera':>12} {'CMSIS-NN':>12} {'ratio':>7}")
    for name, theirs in zip(names, cmsis_counts, strict=True):
        mine = ours.pop(name, 0)
        print(f"{name:22} {mine:12,d} {theirs:12,d} {mine / theirs:7.2f}")
    for name, mine in ours.items():  # calls with no CMSIS-NN counterpart (a reshape)
        print(f"{name:22} {mine:12,d} {'-':>12}")
    total, theirs = sum(counts), sum(cmsis_counts)
    report = lib.memory_report()
    print(f"{'total':22} {total:12,d} {theirs:12,d} {total / theirs:7.2f}")
    print(
        f"tessera: flash {report['flash_bytes']['total']:,} B (weights + kernels + entry), "
        f"RAM {report['ram_bytes']['arena']:,} B arena; CMSIS-NN program: text "
        f"{size['text']:,} B (weights + library + runtime), bss {size['bss']:,} B"
    )
    return (
        f"tessera {total / 1e6:.1f}M vs CMSIS-NN {theirs / 1e6:.1f}M "
        f"instructions ({total / theirs:.2f}x), DS-CNN float32"
    )


def _target() -> str:
    return f"c -device=micro -mcpu={boards.get_board(BOARD).mcpu}"


def tessera_int8_counts(model) -> tuple[dict, dict]:
    """Instructions per ONNX layer of tessera's int8 model (quantized by
    mlperf_tiny.quantize_int8) on the board, and its memory report."""
    qmodel = mlperf_tiny.quantize_int8(model)
    shape = tuple(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim)
    mod, params = tessera.frontend.from_onnx(qmodel, {"input": shape})
    lib = tessera.build(mod, target=_target(), params=params)
    x = np.random.default_rng(1).integers(-128, 128, shape).astype(np.int8)  # int8 input
    with Session(lib, board=BOARD) as s:
        s.set_input("input", x)
        counts = s.run()
    ours: dict[str, int] = {}
    for call, n in zip(lib.plan["calls"], counts, strict=True):
        # a QDQ model's node names: the layer, or the layer's Quantize/DequantizeLinear
        node = call["nodes"][0] if call.get("nodes") else call["kernel"]
        layer = node.replace("_matmul", "").split("_QuantizeLinear")[0]
        layer = layer.split("_DequantizeLinear")[0]
        ours[layer] = ours.get(layer, 0) + n
    return ours, lib.memory_report()


def _int8_baseline(name: str, model, cmsis: Path, seed: int) -> tuple[int, int]:
    """Per layer: tessera's int8 kernels and CMSIS-NN's (DSP) on the same layers. The weights
    differ (CMSIS-NN's program takes random int8 weights and a fixed requantization), so
    outputs are not compared; instruction counts of these kernels do not depend on values.
    Both take and return int8 tensors (mlperf_tiny.quantize_int8)."""
    source, names = cmsis_program_s8(model, seed)
    _, counts, size = run_cmsis(source, cmsis, 1, int8=True)
    ours, report = tessera_int8_counts(model)
    ours_total = sum(ours.values())
    print(f"{name} int8 on {BOARD}: tessera (quantized by ONNX Runtime, QDQ) vs CMSIS-NN s8")
    print(f"{'layer (ONNX node)':22} {'tessera':>12} {'CMSIS-NN':>12} {'ratio':>7}")
    for name, theirs in zip(names, counts, strict=True):
        mine = ours.pop(name, 0)
        print(f"{name:22} {mine:12,d} {theirs:12,d} {mine / theirs:7.2f}")
    for name, mine in ours.items():  # quantize, flatten: no CMSIS-NN call (its input is int8)
        print(f"{name:22} {mine:12,d} {'-':>12}")
    theirs = sum(counts)
    ram, flash = report["ram_bytes"], report["flash_bytes"]
    print(f"{'total':22} {ours_total:12,d} {theirs:12,d} {ours_total / theirs:7.2f}")
    print(
        f"tessera int8: RAM {ram['total']:,} B (arena {ram['arena']:,} B), flash "
        f"{flash['total']:,} B (code {flash['code']:,} B); CMSIS-NN program: text "
        f"{size['text']:,} B, bss {size['bss']:,} B"
    )
    return ours_total, theirs


if __name__ == "__main__":
    main()
