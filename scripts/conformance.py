"""Run the official ONNX backend *node* test suite against tessera and write the coverage page.

    .venv/bin/python scripts/conformance.py              # all node tests -> docs/onnx-coverage.md
    .venv/bin/python scripts/conformance.py -k conv -v   # a subset, printing each result
    .venv/bin/python scripts/conformance.py --check      # exit 1 if the page is out of date

Each test case (`onnx.backend.test.loader.load_model_tests(kind="node")`) runs in a forked
process of its own, with a timeout, through `tessera.frontend.onnx_backend`, and its outputs are
compared with the suite's own tolerances (`Runner.assert_similar_outputs`). A failure falls in
one reason class (REASONS); the page lists every ONNX op of the default domain with its status
and its passing/total node tests, and every failing test with its class and a short message.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import re
import signal
import sys
import time
import traceback
import warnings
from dataclasses import dataclass
from multiprocessing.connection import wait
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import onnx  # noqa: E402

DOC = REPO / "docs" / "onnx-coverage.md"
TIMEOUT_S = 60.0
TARGET = "llvm"
REASONS = (
    "unsupported op",
    "unsupported attribute",
    "dtype unsupported",
    "numerical mismatch",
    "crash",
)
# Element types tessera compiles; the rest (string, float8e8m0, complex, ...) fail up front.
SUPPORTED_ELEM_TYPES = {
    onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16,
    onnx.TensorProto.BFLOAT16, onnx.TensorProto.INT8, onnx.TensorProto.INT16,
    onnx.TensorProto.INT32, onnx.TensorProto.INT64, onnx.TensorProto.UINT8,
    onnx.TensorProto.UINT16, onnx.TensorProto.UINT32, onnx.TensorProto.UINT64,
    onnx.TensorProto.BOOL, onnx.TensorProto.FLOAT8E4M3FN, onnx.TensorProto.FLOAT8E4M3FNUZ,
    onnx.TensorProto.FLOAT8E5M2, onnx.TensorProto.FLOAT8E5M2FNUZ, onnx.TensorProto.FLOAT4E2M1,
    onnx.TensorProto.INT4, onnx.TensorProto.UINT4, onnx.TensorProto.INT2, onnx.TensorProto.UINT2,
    onnx.TensorProto.FLOAT8E8M0,
}  # fmt: skip


@dataclass(frozen=True)
class Result:
    name: str
    op: str
    reason: str | None  # None: passed
    message: str = ""
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.reason is None


# -- the cases ----------------------------------------------------------------------------------


def load_cases(pattern: str | None = None):
    """The node test cases of the installed onnx (those whose name matches `pattern`)."""
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the case generators overflow casts on purpose
        cases = load_model_tests(kind="node")
    cases = sorted(cases, key=lambda c: c.name)
    if pattern:
        rx = re.compile(pattern)
        cases = [c for c in cases if rx.search(c.name)]
    return cases


def default_ops() -> list[str]:
    """Every op of the installed onnx's default domain."""
    return sorted({s.name for s in onnx.defs.get_all_schemas() if s.domain in ("", "ai.onnx")})


def _squash(name: str) -> str:
    return name.lower().replace("_", "")


def op_of(case, ops: list[str]) -> str:
    """The ONNX op a node test exercises: its node's op, or for function-expanded and multi-node
    tests the longest op name that starts the test name."""
    nodes = case.model.graph.node
    if len(nodes) == 1 and "_expanded" not in case.name:
        return nodes[0].op_type
    test = _squash(case.name[len("test_") :])
    best = max((op for op in ops if test.startswith(op.lower())), key=len, default=None)
    return best or (nodes[-1].op_type if nodes else "?")


# -- one case -----------------------------------------------------------------------------------


def _elem_types(model) -> list[tuple[str, object]]:
    g = model.graph
    out = [(vi.name, vi.type) for vi in list(g.input) + list(g.output)]
    out += [(t.name, t.data_type) for t in g.initializer]
    return out


def unsupported_type(model) -> str | None:
    """A message if a graph input/output/initializer has a type tessera cannot hold."""
    for name, t in _elem_types(model):
        if isinstance(t, int):
            elem = t
        else:
            while t.WhichOneof("value") in ("sequence_type", "optional_type"):
                kind = t.WhichOneof("value")  # held as tensors (onnx_sequence.py)
                t = getattr(t, kind).elem_type
            kind = t.WhichOneof("value")
            if kind != "tensor_type":
                return f"{name!r} is a {str(kind).replace('_type', '')}, not a tensor"
            elem = t.tensor_type.elem_type
        if elem and elem not in SUPPORTED_ELEM_TYPES:
            return f"{name!r} has element type {onnx.TensorProto.DataType.Name(elem)}"
    return None


def classify(error: BaseException) -> str:
    """The reason class of an exception raised while preparing or running a case."""
    from tessera.frontend import UnsupportedOpError
    from tessera.graph_build import MissingComputeError

    text = str(error)
    if isinstance(error, UnsupportedOpError | MissingComputeError):
        return "unsupported op"
    if re.search(r"dtype|data type|element type|bfloat16|float8|string", text, re.I):
        return "dtype unsupported"
    if isinstance(error, ValueError | NotImplementedError) and text.startswith("node "):
        return "unsupported attribute"
    return "crash"


def short(error: BaseException) -> str:
    """One line: the exception's first line, without addresses or temp paths."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if isinstance(error, AssertionError):
        text = " ".join(lines[:3])
    else:
        text = lines[0] if lines else ""
        if isinstance(error, (KeyError, IndexError, AttributeError, TypeError, RuntimeError)):
            text = f"{type(error).__name__}: {text}"
    text = re.sub(r"0x[0-9a-f]+", "0x…", text)
    text = re.sub(r"/tmp/\S+", "<tmp>", text)
    text = text.replace("|", "/")
    return text if len(text) <= 160 else text[:157] + "…"


def _as_array(x):
    """numpy scalars (rank-0 values in the suite's data) as arrays; sequences stay lists."""
    return np.asarray(x) if isinstance(x, np.generic) else x


def _held(x) -> bool:
    """A value the backend takes and gives: an array, a list of arrays (a sequence) or None
    (an empty optional)."""
    return x is None or isinstance(x, np.ndarray) or (
        isinstance(x, list) and all(isinstance(v, np.ndarray) for v in x)
    )


def _flat_sequences(refs: list, outputs: list) -> tuple[list, list]:
    """A sequence output's elements as outputs of their own. The runner recurses into a
    sequence passing an element where it takes a list of outputs, so a rank-0 element (which
    has no len()) fails its comparison with a TypeError whatever the values."""
    if len(refs) != len(outputs):
        return refs, outputs  # the runner says so
    flat_refs, flat_outs = [], []
    for r, o in zip(refs, outputs, strict=True):
        if isinstance(r, list) and isinstance(o, list):
            if len(r) != len(o):
                raise AssertionError(f"a sequence of {len(o)} elements, expected {len(r)}")
            flat_refs += r
            flat_outs += o
        else:
            flat_refs.append(r)
            flat_outs.append(o)
    return flat_refs, flat_outs


def run_case(case, target: str = TARGET) -> tuple[str | None, str]:
    """(reason class or None, message): prepare, run and compare one test case."""
    from onnx.backend.test.runner import Runner, _normalize_tensor

    from tessera.frontend import onnx_backend

    bad = unsupported_type(case.model)
    if bad:
        return "dtype unsupported", bad
    try:
        # One process compiles: the suite already runs one case per core.
        rep = onnx_backend.prepare(case.model, "CPU", target=target, config={"codegen.jobs": 1})
        runs = []
        for inputs, ref_outputs in case.data_sets:
            inputs = [_as_array(_normalize_tensor(x)) for x in inputs]
            refs = [_as_array(_normalize_tensor(x)) for x in ref_outputs]
            if not all(_held(x) for x in inputs + refs):
                return "dtype unsupported", "values that are not tensors, sequences or optionals"
            runs.append((refs, list(rep.run(inputs))))
    except Exception as e:  # noqa: BLE001  (the suite records every failure)
        return classify(e), short(e)
    try:
        for refs, outputs in runs:
            refs, outputs = _flat_sequences(refs, outputs)
            Runner.assert_similar_outputs(refs, outputs, rtol=case.rtol, atol=case.atol)
    except AssertionError as e:
        return "numerical mismatch", short(e)
    return None, ""


def _child(conn, case, target):
    os.setsid()  # its own process group: a timeout kills what it started too
    warnings.simplefilter("ignore")
    try:
        conn.send(run_case(case, target))
    except BaseException as e:  # noqa: BLE001
        conn.send(("crash", short(e) + " " + traceback.format_exc(limit=1).splitlines()[-1]))
    finally:
        conn.close()


def _kill(proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:  # already gone, or setsid not reached yet
        proc.kill()
    proc.join()


# -- the suite ----------------------------------------------------------------------------------


def run_suite(cases, jobs: int = 2, timeout: float = TIMEOUT_S, target: str = TARGET,
              progress=None) -> list[Result]:  # fmt: skip
    """Run every case in a forked process of its own, `jobs` at a time; results in case order."""
    ctx = multiprocessing.get_context("fork")
    ops = default_ops()
    todo = list(enumerate(cases))
    running: dict[object, tuple] = {}  # conn -> (index, process, start)
    results: dict[int, Result] = {}

    def finish(conn, reason, message):
        index, proc, start = running.pop(conn)
        case = cases[index]
        results[index] = Result(case.name, op_of(case, ops), reason, message,
                                time.perf_counter() - start)  # fmt: skip
        proc.join(1)
        if proc.is_alive():
            _kill(proc)
        conn.close()
        if progress:
            progress(results[index], len(results), len(cases))

    while todo or running:
        while todo and len(running) < jobs:
            index, case = todo.pop(0)
            recv, send = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_child, args=(send, case, target))
            proc.start()
            send.close()
            running[recv] = (index, proc, time.perf_counter())
        ready = wait(list(running), timeout=0.5)
        for conn in ready:
            try:
                reason, message = conn.recv()
            except EOFError:
                code = running[conn][1].exitcode
                reason, message = "crash", f"the process died (exit code {code})"
            finish(conn, reason, message)
        now = time.perf_counter()
        for conn, (_, proc, start) in list(running.items()):
            if now - start > timeout:
                _kill(proc)
                finish(conn, "crash", f"timed out after {timeout:.0f} s")
    return [results[i] for i in range(len(cases))]


# -- the page -----------------------------------------------------------------------------------


def op_rows(results: list[Result]):
    """(op, status, passed, total) for every default-domain op."""
    import tessera.frontend.onnx  # noqa: F401  (registers the converters)
    from tessera.frontend.onnx_registry import _CONVERTERS

    by_op: dict[str, list[Result]] = {}
    for r in results:
        by_op.setdefault(r.op, []).append(r)
    rows = []
    for op in default_ops():
        tests = by_op.get(op, [])
        passed = sum(r.passed for r in tests)
        if tests and passed == len(tests):
            status = "supported"
        elif passed:
            status = "partially"
        elif ("", op) in _CONVERTERS:
            # it converts and runs; its cases cannot match (random draws): the reasons say why
            status = "supported (no node tests)" if not tests else "supported (no case matches)"
        else:
            status = "unsupported"
        rows.append((op, status, passed, len(tests)))
    return rows


def _op_reasons(tests: list[Result]) -> str:
    counts: dict[str, int] = {}
    for r in tests:
        if not r.passed:
            counts[r.reason] = counts.get(r.reason, 0) + 1
    return ", ".join(f"{k} ({v})" for k, v in sorted(counts.items()))


# What a user should know of an op whose behaviour no node test pins down: the choice made
# where the spec is silent and implementations differ, and where the op is checked instead.
OP_NOTES = {
    "MaxRoiPool": "a bin's true max, negative for an all-negative bin (as the spec's 'max "
    "pooling', Caffe and ORT 1.32; an older ORT answered FLT_MIN there), 0 for an empty bin; "
    "no onnx reference: checked against ORT in tests/frontend/test_onnx_image.py",
}

_STRINGS = "tessera compiles tensors of numbers and booleans; its runtime holds no strings"
# Why a case fails where it is by design or the suite's reference is at odds with ONNX
# Runtime, not a bug: (test name pattern, why). The other failures' messages say what is
# missing.
WHY = [
    (r"string|regex|label_encoder|strnormalizer", _STRINGS),
    (r"image_decoder", "decodes image files (JPEG, PNG, ...) into a tensor whose shape depends "
                       "on the bytes: not a tensor computation tessera compiles"),
    (r"bernoulli", "random: tessera draws Bernoulli (and RandomUniformLike) from its own "
                   "seeded Philox generator at run time; the expected values are draws of "
                   "numpy's unseeded generator, which no implementation reproduces (the "
                   "rates are tested in tests/frontend/test_onnx_random.py)"),
    (r"training_dropout", "random: tessera draws training-mode Dropout's mask from its own "
                          "seeded Philox generator at run time; the expected mask is numpy's "
                          "RandomState(0) stream, which no other generator reproduces (mask "
                          "rate and scaling are tested in tests/frontend/test_onnx_random.py)"),
    (r"attention.*fp16", "float16: the reference rounds every step of its softmax (exp, sum, "
                         "divide) to float16; tessera's float16 softmax rounds otherwise and "
                         "lands 1-2 float16 ulps away on a few elements, past rtol 1e-3"),
    (r"dft_inverse", "the reference's float32 rounding noise (about 2e-7) on outputs that are "
                     "exactly 0 exceeds the suite's atol of 1e-7 (tessera gives about 1e-16)"),
    (r"resize_downsample_scales_.*align_corners", "the reference divides by scale x length "
                                                  "(2.4) where ONNX Runtime and PyTorch divide "
                                                  "by the output length (2); tessera follows "
                                                  "ONNX Runtime"),
]  # fmt: skip


def why(name: str) -> str:
    return next((text for pattern, text in WHY if re.search(pattern, name)), "")


def _why_section(results: list[Result]) -> list[str]:
    groups: dict[str, int] = {}
    for r in results:
        if not r.passed:
            key = why(r.name) or "not supported yet: the message of each case below says what"
            groups[key] = groups.get(key, 0) + 1
    lines = ["", "## Why the remaining cases fail", "", "| cases | why |", "|---|---|"]
    lines += [f"| {n} | {text} |" for text, n in sorted(groups.items(), key=lambda kv: -kv[1])]
    return lines


def render(results: list[Result], target: str = TARGET) -> str:
    import onnxruntime

    n, ok = len(results), sum(r.passed for r in results)
    lines = [
        "# ONNX conformance: the backend node test suite",
        "",
        "Generated by `scripts/conformance.py` (do not edit by hand): every node test case of the",
        "installed `onnx`, compiled by tessera (`tessera.frontend.onnx_backend`, target "
        f"`{target}`) and",
        "compared with the suite's reference outputs and tolerances.",
        "",
        f"- onnx {onnx.__version__} (opset {onnx.defs.onnx_opset_version()}), "
        f"onnxruntime {onnxruntime.__version__}",
        f"- **{ok} of {n} node test cases pass ({100.0 * ok / max(n, 1):.1f}%)**",
        "- regenerate: `.venv/bin/python scripts/conformance.py` (about ten minutes on 2 cores); "
        "check: `scripts/test.sh -m slow tests/frontend/test_onnx_backend.py`",
        "",
        "## Failures by reason",
        "",
        "| reason | tests |",
        "|---|---|",
    ]
    for reason in REASONS:
        lines.append(f"| {reason} | {sum(r.reason == reason for r in results)} |")
    rows = op_rows(results)
    kinds = ("supported", "partially", "unsupported")
    counts = {s: sum(r[1].startswith(s) for r in rows) for s in kinds}
    lines += ["", f"## Ops ({len(rows)} in the default domain: {counts['supported']} supported, "
              f"{counts['partially']} partially, {counts['unsupported']} unsupported)", "",
              "| op | status | node tests passing | failures, or notes |",
              "|---|---|---|---|"]  # fmt: skip
    by_op: dict[str, list[Result]] = {}
    for r in results:
        by_op.setdefault(r.op, []).append(r)
    for op, status, passed, total in rows:
        count = f"{passed} / {total}" if total else "—"
        notes = _op_reasons(by_op.get(op, [])) or OP_NOTES.get(op, "")
        lines.append(f"| {op} | {status} | {count} | {notes} |")
    lines += _why_section(results)
    lines += ["", "## Failing tests", "", "| test | op | reason | message |", "|---|---|---|---|"]
    for r in results:
        if not r.passed:
            reason = why(r.name)
            message = f"{reason}; {r.message}" if reason else r.message
            if reason.startswith("random:"):  # which draws differ changes run to run (--check)
                message = reason
            lines.append(f"| {r.name} | {r.op} | {r.reason} | {message} |")
    return "\n".join(lines) + "\n"


def _print_progress(r: Result, done: int, total: int) -> None:
    mark = "ok" if r.passed else f"FAIL [{r.reason}] {r.message}"
    print(f"[{done}/{total}] {r.name} ({r.seconds:.1f}s): {mark}", flush=True)


_LOG_LINE = re.compile(r"^\[\d+/\d+\] (\S+) \(([\d.]+)s\): (?:ok|FAIL \[([^\]]+)\] ?(.*))$")


def results_from_log(text: str, cases) -> list[Result]:
    """The results a `-v` run printed (one line per case, as _print_progress writes them), in
    case order: the page can be rendered again without running the suite."""
    ops, seen = default_ops(), {}
    for line in text.splitlines():
        m = _LOG_LINE.match(line)
        if m:
            seen[m.group(1)] = (m.group(3), m.group(4) or "", float(m.group(2)))
    missing = [c.name for c in cases if c.name not in seen]
    if missing:
        raise SystemExit(f"the log has no result for {len(missing)} case(s), e.g. {missing[0]}")
    return [Result(c.name, op_of(c, ops), *seen[c.name]) for c in cases]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-k", dest="pattern", help="only the tests whose name matches this regex")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds per test case")
    ap.add_argument("--target", default=TARGET)
    ap.add_argument("-o", "--output", type=Path, default=DOC, help="the page to write")
    ap.add_argument("--check", action="store_true", help="exit 1 if the page is out of date")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every result")
    ap.add_argument("--from-log", type=Path, help="write the page from a whole -v run's output")
    args = ap.parse_args(argv)
    cases = load_cases(args.pattern)
    progress = _print_progress if args.verbose else None
    if args.from_log:
        results = results_from_log(args.from_log.read_text(), cases)
    else:
        results = run_suite(cases, args.jobs, args.timeout, args.target, progress)
    ok = sum(r.passed for r in results)
    print(f"{ok} of {len(results)} node test cases pass ({100.0 * ok / max(len(results), 1):.1f}%)")
    if args.pattern:
        return 0  # a subset never writes the page
    text = render(results, args.target)
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is out of date", file=sys.stderr)
            return 1
        return 0
    args.output.write_text(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
