"""bench/pretune.py's README: writing one machine kind's section keeps every other kind's
(sections, sub-headings and all), and a rerun of a kind replaces only its own; bench/tune.py's
turns fill enough time on a small model."""

import time
from types import SimpleNamespace

from bench_modules import load_bench

pretune = load_bench("pretune")
tune = load_bench("tune")

ARGS = SimpleNamespace(threads=2, argv=["--budget", "0"], stat="median", rounds=3, margin=0.01)


def _write(folder, kind, line):
    pretune.write_readme(folder / "README.md", kind, ARGS, [line], [f"{kind}: check"])


def test_readme_keeps_the_other_kinds(tmp_path):
    for kind in ("x86_64-avx2-a", "x86_64-avx512-b"):
        (tmp_path / f"{kind}.jsonl").write_text("")
    _write(tmp_path, "x86_64-avx2-a", "first kind's candidate")
    with open(tmp_path / "README.md", "a") as f:  # a section's own sub-heading stays with it
        f.write("## Earlier runs of this session\n\nnotes of the first kind\n")
    _write(tmp_path, "x86_64-avx512-b", "second kind's candidate")
    text = (tmp_path / "README.md").read_text()
    assert text.count("# Shipped pre-tuned configs") == 1
    assert text.index("## x86_64-avx2-a") < text.index("notes of the first kind")
    assert text.index("notes of the first kind") < text.index("## x86_64-avx512-b")
    assert "first kind's candidate" in text and "second kind's candidate" in text
    _write(tmp_path, "x86_64-avx2-a", "first kind, rerun")  # replaces its own section only
    text = (tmp_path / "README.md").read_text()
    assert "first kind's candidate" not in text and "first kind, rerun" in text
    assert "notes of the first kind" not in text  # it was part of the replaced section
    assert "second kind's candidate" in text
    assert [k for k, _ in pretune.readme_sections(tmp_path / "README.md")] == [
        "x86_64-avx2-a",
        "x86_64-avx512-b",
    ]


def test_turns_of_a_small_model_fill_their_time():
    calls = []
    block, repeat = tune.turn_sizes(lambda: calls.append(1), 20)  # a run of ~0 s
    assert block >= 1000 and repeat == 10 * block and len(calls) == 2
    block, repeat = tune.turn_sizes(lambda: time.sleep(0.03), 20)  # 30 ms: the old turns
    assert block == 5 and repeat == 50
