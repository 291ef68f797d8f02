"""A fuzzer for the whole path a user's file takes: ONNX model -> compile -> run, and exported
artifact -> load -> run. Every case runs in a child process of its own, with a timeout.

    python -m tessera.testing.fuzz --models 2000 --artifacts 300 --seed 1 --timeout 60

A model case mutates a seed model (fuzz_models.py), then in the child: from_onnx, build, run
with random inputs; then (after tessera's verdict is reported) ONNX Runtime runs the same model
and the outputs are compared. An artifact case damages the bytes of an exported model, then
loads and runs it in the child. Each case is classified:

    error      a clean error (ValueError, TypeError, NotImplementedError, RuntimeError, ...)
    internal   a bare Python exception (KeyError, IndexError, ZeroDivisionError, ...): a bug
    correct    ran, and agrees with ONNX Runtime (or, for an artifact, with the intact one)
    accepted   ran; ONNX Runtime refused (or crashed on) the model, so there is no reference
    disputed   ran; disagrees with ONNX Runtime but agrees with onnx.reference, which ORT
               does not (an edge of the spec where ORT's answer is its own)
    wrong      ran, and disagrees with ONNX Runtime (and with onnx.reference)
    crash      the child died of a signal (or exited) before tessera's verdict
    hang       no verdict within the timeout

Children are forked from a parent that imported the frontend but started no thread and loaded
no native code, so a case starts in milliseconds. Findings (every case not error, correct or
accepted) are written to `--out` as ONNX files / artifact files with a JSON note.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import select
import signal
import struct
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

import numpy as np

CLEAN = (ValueError, TypeError, NotImplementedError, RuntimeError, OSError, MemoryError)
BARE = (LookupError, ArithmeticError, AttributeError, AssertionError, RecursionError)
FINDINGS = ("internal", "wrong", "crash", "hang")
_MEMORY_LIMIT = 6 << 30  # per child: a case that wants more fails there, not the machine


# -- the child -----------------------------------------------------------------------------------


def _send(fd: int, message: dict) -> None:
    data = pickle.dumps(message)
    os.write(fd, struct.pack("<I", len(data)) + data)


def _verdict_of(err: BaseException) -> dict:
    kind = "internal" if isinstance(err, BARE) or not isinstance(err, CLEAN) else "error"
    if isinstance(err, KeyError | IndexError) and type(err).__module__ != "builtins":
        kind = "error"
    where = traceback.extract_tb(err.__traceback__)[-1:] if kind == "internal" else []
    at = f" at {where[0].filename}:{where[0].lineno}" if where else ""
    return {"tessera": kind, "type": type(err).__name__, "message": f"{str(err)[:400]}{at}"}


def _random_inputs(specs, rng) -> dict:
    feeds = {}
    for name, dtype, shape in specs:
        if np.dtype(dtype).kind == "f":
            feeds[name] = rng.standard_normal(shape).astype(dtype)
        elif np.dtype(dtype).kind == "b":
            feeds[name] = rng.integers(0, 2, shape).astype(bool)
        else:
            feeds[name] = rng.integers(0, 3, shape).astype(dtype)
    return feeds


def _run_tessera_model(model, rng) -> tuple[dict, list]:
    import tessera
    from tessera.frontend import from_onnx
    from tessera.runtime import GraphModule
    from tessera.transform import PassContext

    mod, params = from_onnx(model)
    with PassContext(opt_level=3, config={"codegen.jobs": 1}):  # one core: a case at a time
        lib = tessera.build(mod, target="llvm", params=params)
    m = GraphModule(lib["default"]())
    shapes, dtypes = m.get_input_info()
    feeds = _random_inputs([(n, dtypes[n], shapes[n]) for n in shapes], rng)
    outputs = m.run_with(feeds)
    return feeds, outputs


def _compare(got: list, expected: list, values: bool = True) -> str:
    if len(got) != len(expected):
        return f"{len(got)} outputs, ONNX Runtime gives {len(expected)}"
    for k, (g, e) in enumerate(zip(got, expected, strict=True)):
        e = np.asarray(e)
        if g.shape != e.shape or g.dtype != e.dtype:
            return f"output {k}: {g.dtype}{list(g.shape)}, ONNX Runtime {e.dtype}{list(e.shape)}"
        if not values:
            continue
        if e.dtype.kind in "fc":
            tol = 1e-2 if e.dtype.itemsize <= 2 else 1e-3
            if not np.allclose(g, e, rtol=tol, atol=tol, equal_nan=True):
                return f"output {k}: max difference {np.nanmax(np.abs(g - e))}"
        elif not np.array_equal(g, e):
            return f"output {k}: values differ"
    return ""


def _model_case(fd: int, model_bytes: bytes, seed: int) -> None:
    import onnx

    model = onnx.load_from_string(model_bytes)
    rng = np.random.default_rng(seed)
    try:
        feeds, outputs = _run_tessera_model(model, rng)
    except BaseException as err:  # noqa: BLE001 -- classifying every failure is the point
        _send(fd, _verdict_of(err))
        return
    _send(fd, {"tessera": "ran"})
    try:
        from tessera.frontend.testing import run_ort

        expected = run_ort(model, feeds)
    except BaseException as err:  # noqa: BLE001
        _send(fd, {"ort": "refused", "message": f"{type(err).__name__}: {str(err)[:200]}"})
        return
    # a reduction over an empty input is undefined in ONNX (ORT's mean of nothing is 0,
    # numpy's NaN): with an empty input, only the outputs' shapes and dtypes must agree
    empty = any(a.size == 0 for a in feeds.values())
    diff = _compare(outputs, expected, values=not empty)
    if diff and _agrees_with_the_onnx_reference(model, feeds, outputs):
        diff = f"{diff}; tessera agrees with onnx.reference, ONNX Runtime does not"
        _send(fd, {"ort": "disputed", "message": diff})
        return
    _send(fd, {"ort": "wrong" if diff else "agrees", "message": diff})


def _agrees_with_the_onnx_reference(model, feeds, outputs) -> bool:
    """Whether onnx's reference evaluator (the spec in Python) gives tessera's outputs: where
    ONNX Runtime and the reference differ (a negative SAME_UPPER pad, ...), ORT is no judge."""
    try:
        from onnx.reference import ReferenceEvaluator

        expected = ReferenceEvaluator(model).run(None, feeds)
    except Exception:  # noqa: BLE001 -- the reference cannot run it: no second opinion
        return False
    return not _compare(outputs, list(expected))


def _artifact_case(fd: int, path: str, reference: str) -> None:
    from tessera.runtime import GraphModule, load_module

    try:
        m = GraphModule(load_module(path)["default"]())
        shapes, dtypes = m.get_input_info()
        feeds = _random_inputs(
            [(n, dtypes[n], shapes[n]) for n in shapes], np.random.default_rng(0)
        )
        outputs = m.run_with(feeds)
    except BaseException as err:  # noqa: BLE001
        _send(fd, _verdict_of(err))
        return
    _send(fd, {"tessera": "ran"})
    expected = GraphModule(load_module(reference)["default"]()).run_with(feeds)
    diff = _compare(outputs, expected)
    _send(fd, {"ort": "wrong" if diff else "agrees", "message": diff})


def _in_child(target, args: tuple, timeout: float) -> tuple[str, dict]:
    """Run target(fd, *args) in a forked child; (verdict, details)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(read)
        code = 0
        try:
            import faulthandler
            import resource

            faulthandler.disable()  # a crash is what the parent reports, not a dump here

            resource.setrlimit(resource.RLIMIT_AS, (_MEMORY_LIMIT, _MEMORY_LIMIT))
            _quiet_onnxruntime()
            target(write, *args)
        except BaseException:  # noqa: BLE001
            code = 3
        finally:
            os._exit(code)
    os.close(write)
    messages, buffer, deadline, status = [], b"", time.monotonic() + timeout, None
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            os.kill(pid, signal.SIGKILL)
            break
        ready, _, _ = select.select([read], [], [], min(left, 1.0))
        if ready:
            chunk = os.read(read, 1 << 16)
            if not chunk:
                break
            buffer += chunk
            while len(buffer) >= 4 and len(buffer) >= 4 + struct.unpack("<I", buffer[:4])[0]:
                n = struct.unpack("<I", buffer[:4])[0]
                messages.append(pickle.loads(buffer[4 : 4 + n]))
                buffer = buffer[4 + n :]
    os.close(read)
    _, status = os.waitpid(pid, 0)
    return _classify(messages, status, timed_out=time.monotonic() >= deadline)


def _classify(messages: list[dict], status: int, timed_out: bool) -> tuple[str, dict]:
    info = {k: v for m in messages for k, v in m.items()}
    first = messages[0] if messages else {}
    if "tessera" not in first:
        if timed_out:
            return "hang", info
        if os.WIFSIGNALED(status):
            return "crash", {**info, "signal": signal.Signals(os.WTERMSIG(status)).name}
        return "crash", {**info, "exit": os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1}
    if first["tessera"] != "ran":
        return first["tessera"], info
    reference = info.get("ort")
    if reference == "agrees":
        return "correct", info
    if reference == "wrong":
        return "wrong", info
    if reference == "disputed":
        return "disputed", info  # ORT differs from the ONNX reference, tessera does not
    return "accepted", info  # no reference: refused by ORT, or ORT crashed or hung


# -- the parent ----------------------------------------------------------------------------------


def _export_seeds(folder: Path, names: list[str], timeout: float) -> dict[str, Path]:
    """Export each seed model to an artifact (in a child: the parent loads no native code)."""

    def export(fd, name):
        import tessera
        from tessera.frontend import from_onnx
        from tessera.testing.fuzz_models import SEEDS

        mod, params = from_onnx(SEEDS[name](np.random.default_rng(0)))
        tessera.build(mod, target="llvm", params=params).export_library(folder / f"{name}.so")
        _send(fd, {"tessera": "ran"})

    done = {}
    for name in names:
        verdict, info = _in_child(export, (name,), timeout)
        if verdict not in ("accepted", "correct"):
            raise RuntimeError(f"fuzz: the seed {name} does not export: {verdict} {info}")
        done[name] = folder / f"{name}.so"
    return done


def run(
    models: int,
    artifacts: int,
    seed: int = 0,
    timeout: float = 60.0,
    out: Path | None = None,
    log=None,
    edits: int = 1,
) -> Counter:
    """Fuzz `models` model mutations and `artifacts` artifact mutations; the verdict counts.
    Findings go to `out` (when given); a progress line goes to `log` every 100 cases."""
    from tessera.testing.fuzz_models import SEEDS, mutate_bytes, mutate_model

    _preload()
    rng = np.random.default_rng(seed)
    counts: Counter = Counter()
    names = sorted(SEEDS)
    seeds = {n: SEEDS[n](np.random.default_rng(0)) for n in names}
    started = time.monotonic()

    def record(kind: str, k: int, verdict: str, info: dict, what: str, payload: bytes, ext: str):
        counts[f"{kind}:{verdict}"] += 1
        if verdict in FINDINGS and out is not None:
            out.mkdir(parents=True, exist_ok=True)
            (out / f"{kind}-{k}.{ext}").write_bytes(payload)
            note = {"verdict": verdict, "what": what, **_jsonable(info)}
            (out / f"{kind}-{k}.json").write_text(json.dumps(note, indent=1))
        if log is not None and (verdict in FINDINGS or sum(counts.values()) % 100 == 0):
            elapsed = time.monotonic() - started
            print(f"[{elapsed:7.0f}s] {dict(sorted(counts.items()))}", file=log, flush=True)
            if verdict in FINDINGS:
                print(f"  {kind} {k}: {verdict}: {what}: {info}", file=log, flush=True)

    for k in range(models):
        name = names[k % len(names)]
        edits_k = 1 + int(rng.integers(0, edits))
        model, what = mutate_model(seeds[name], rng, edits_k)
        data = model.SerializeToString()
        verdict, info = _in_child(_model_case, (data, int(rng.integers(1 << 30))), timeout)
        record("model", k, verdict, info, f"{name}: {what}", data, "onnx")
    if artifacts:
        with tempfile.TemporaryDirectory(prefix="tessera-fuzz-") as tmp:
            folder = Path(tmp)
            exported = _export_seeds(folder, names[:4], timeout * 4)
            for k in range(artifacts):
                name = names[k % 4]
                damaged, what = mutate_bytes(exported[name].read_bytes(), rng)
                path = folder / f"case-{k}.so"
                path.write_bytes(damaged)
                verdict, info = _in_child(_artifact_case, (str(path), str(exported[name])), timeout)
                record("artifact", k, verdict, info, f"{name}: {what}", damaged, "so")
                path.unlink()
    return counts


def _quiet_onnxruntime() -> None:
    try:
        import onnxruntime

        onnxruntime.set_default_logger_severity(4)  # its warnings on mutants are noise here
    except ImportError:
        pass


def _preload() -> None:
    """Import the compiler (and ONNX Runtime, when there) once in the parent, so that a forked
    case starts at once; none of them starts a thread or loads tessera's native code here."""
    import importlib
    import pkgutil

    import tessera

    skip = ("tessera.cli", "tessera.testing", "tessera.models")
    for info in pkgutil.walk_packages(tessera.__path__, "tessera."):
        if not info.name.startswith(skip):
            try:
                importlib.import_module(info.name)
            except ImportError:  # an optional part (a GPU backend) without its package
                pass
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        pass


def _jsonable(info: dict) -> dict:
    return {k: v if isinstance(v, str | int | float) else repr(v) for k, v in info.items()}


def recheck(folder: Path, log=None) -> Counter:
    """Run every model finding in `folder` (model-K.onnx) again, with today's classification
    (e.g. after a fix, or to ask onnx.reference about a wrong answer); the new verdict counts."""
    _preload()
    counts: Counter = Counter()
    for path in sorted(folder.glob("model-*.onnx")):
        verdict, info = _in_child(_model_case, (path.read_bytes(), 0), 120)
        counts[f"model:{verdict}"] += 1
        if log is not None:
            print(f"{path.name}: {verdict}: {info.get('message', '')}", file=log, flush=True)
    return counts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tessera.testing.fuzz", description=__doc__)
    parser.add_argument("--models", type=int, default=200, help="model mutations to run")
    parser.add_argument("--artifacts", type=int, default=50, help="artifact mutations to run")
    parser.add_argument("--seed", type=int, default=0, help="the random seed")
    parser.add_argument("--edits", type=int, default=2, help="at most this many edits a model")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per case")
    parser.add_argument("--out", type=Path, default=None, help="folder for the findings")
    parser.add_argument("--recheck", type=Path, default=None, help="rerun the findings in DIR")
    args = parser.parse_args(argv)
    if args.recheck is not None:
        counts = recheck(args.recheck, sys.stderr)
        print(json.dumps(dict(sorted(counts.items())), indent=1))
        return 1 if any(k.split(":")[1] in FINDINGS for k in counts) else 0
    # a cache of its own: mutants compile many kernels nobody needs afterwards
    with tempfile.TemporaryDirectory(prefix="tessera-fuzz-cache-") as cache:
        os.environ["TESSERA_CACHE_DIR"] = cache
        counts = run(
            args.models, args.artifacts, args.seed, args.timeout, args.out, sys.stderr, args.edits
        )
    print(json.dumps(dict(sorted(counts.items())), indent=1))
    bad = sum(n for key, n in counts.items() if key.split(":")[1] in FINDINGS)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
