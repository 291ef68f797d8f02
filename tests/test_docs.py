"""The docs run: every ```python block of README.md and docs/*.md is executed, its output checked.

How a doc is read (docs/tutorial-te.md is the worked example):

- A file's ```python blocks run in order in one namespace, in a temporary working directory (so
  `myadd.so` lands there). `<!-- no-test -->` on the line before a fence skips that block; fenced
  blocks of other languages (bash, c, ...) are never run.
- A ```text block after a python block (before the next python block) shows what that block
  prints. It must match the output of now: line by line, trailing spaces ignored, a line `...`
  stands for any number of lines and `...` inside a line for any text (timings).
  `<!-- output: varies -->` before the fence turns the comparison off (assembly, which depends on
  the CPU).
- Every ```text block that is a whole PrimFunc (starts with `primfn`, has no `...`) must parse
  with `tir.parse_prim_func`.

After a deliberate change of the IR text, rewrite the outputs shown (whole-output blocks only):

    .venv/bin/python tests/test_docs.py --update docs/tutorial-te.md
"""

from __future__ import annotations

import contextlib
import difflib
import io
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

NO_TEST = "<!-- no-test -->"
OUTPUT_VARIES = "<!-- output: varies -->"
_FENCE = re.compile(r"^(\s*)```\s*([\w+-]*)\s*$")


@dataclass
class Block:
    """One fenced block: its language, its text and where it sits in the file."""

    lang: str
    text: str
    first: int  # index of the first content line (0-based), the fence is the line before
    end: int  # index of the closing fence
    marker: str  # the HTML comment on the line before the fence, or ""
    indent: str = ""  # the fence's indent (a block inside a list item)

    @property
    def line(self) -> int:
        return self.first + 1  # 1-based, for messages


def read_blocks(text: str) -> list[Block]:
    """The fenced blocks of a markdown text, in order."""
    lines = text.split("\n")
    blocks, i = [], 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        end = i + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        if end == len(lines):
            raise ValueError(f"line {i + 1}: a ``` fence that is never closed")
        prev = next((ln.strip() for ln in reversed(lines[:i]) if ln.strip()), "")
        marker = prev if prev in (NO_TEST, OUTPUT_VARIES) else ""
        indent = m.group(1)  # a fence inside a list item: its lines carry the fence's indent
        body = "\n".join(ln.removeprefix(indent) for ln in lines[i + 1 : end])
        blocks.append(Block(m.group(2).lower(), body, i + 1, end, marker, indent))
        i = end + 1
    return blocks


def output_matches(expected: str, actual: str) -> bool:
    """Does `actual` match `expected`, where `...` is a wildcard (a whole line: any lines)?"""
    pattern = []
    for line in expected.rstrip("\n").split("\n"):
        line = line.rstrip()
        if line == "...":
            pattern.append(r"(?:[^\n]*\n)*?")
        else:
            pattern.append(r"[^\n]*?".join(re.escape(part) for part in line.split("...")) + r"\n")
    normalized = "".join(ln.rstrip() + "\n" for ln in actual.rstrip("\n").split("\n"))
    return re.fullmatch("".join(pattern), normalized) is not None


def _run_block(block: Block, namespace: dict, filename: str) -> str:
    # Leading newlines make traceback line numbers those of the markdown file.
    code = compile("\n" * (block.first) + block.text, filename, "exec")
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(code, namespace)
    except Exception as error:
        error.add_note(f"in the python block at {filename}:{block.line}")
        raise
    return out.getvalue()


def run_doc(path: Path) -> list[tuple[Block, Block, str]]:
    """Run the python blocks of `path`; (code block, text block, output) for each output shown."""
    shown, namespace, last, output = [], {"__name__": "__main__"}, None, ""
    for block in read_blocks(path.read_text()):
        if block.lang == "python" and block.marker != NO_TEST:
            last, output = block, _run_block(block, namespace, str(path))
        elif block.lang == "python":
            last = None  # text after a skipped block shows that block's output: not checked
        elif block.lang == "text" and last is not None:
            shown.append((last, block, output))
    return shown


def _diff(expected: str, actual: str) -> str:
    lines = difflib.unified_diff(
        expected.splitlines(), actual.splitlines(), "shown in the doc", "printed now", lineterm=""
    )
    return "\n".join(lines)


def check_doc(path: Path) -> list[str]:
    """Run a doc; one message for every output it shows that differs from what the code prints."""
    problems = []
    for code, text, output in run_doc(path):
        if text.marker != OUTPUT_VARIES and not output_matches(text.text, output):
            problems.append(
                f"{path.name}:{text.line}: the output shown differs from what the block at line "
                f"{code.line} prints now\n{_diff(text.text, output)}"
            )
    return problems


def _doc_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("path", DOC_FILES, ids=_doc_id)
def test_doc_runs_and_shows_its_real_output(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    problems = check_doc(path)
    assert not problems, (
        "\n\n".join(problems) + f"\n\n(if the change is intended: "
        f".venv/bin/python tests/test_docs.py --update {_doc_id(path)})"
    )


@pytest.mark.parametrize("path", DOC_FILES, ids=_doc_id)
def test_doc_primfuncs_parse(path):
    from tessera import tir

    for block in read_blocks(path.read_text()):
        text = block.text.strip()
        if block.lang == "text" and text.startswith("primfn") and "..." not in text:
            try:
                tir.parse_prim_func(text)
            except Exception as error:
                pytest.fail(f"{path.name}:{block.line}: the PrimFunc shown does not parse: {error}")


# -- the harness itself ----------------------------------------------------------------------


def test_output_matches_wildcards():
    assert output_matches("a\nb", "a\nb  \n")
    assert output_matches("a\n...\nd", "a\nb\nc\nd")
    assert output_matches("a\n...\nd", "a\nd")
    assert output_matches("time: ... ms", "time: 0.25 ms")
    assert output_matches("...\nc", "a\nb\nc")
    assert not output_matches("a\nb", "a\nb\nc")
    assert not output_matches("a\n...\nd", "a\nb\nc")
    assert not output_matches("time: ... ms", "time: 0.25 s")
    assert not output_matches("a ... d", "a b\nc d")  # an in-line ... stays in its line


def test_read_blocks_markers_and_languages():
    doc = "\n".join(
        [
            "<!-- no-test -->",
            "```python",
            "raise RuntimeError",
            "```",
            "text",
            "```python",
            "print(1)",
            "```",
            "<!-- output: varies -->",
            "",
            "```text",
            "1",
            "```",
            "```bash",
            "ls",
            "```",
        ]
    )
    blocks = read_blocks(doc)
    assert [(b.lang, b.marker, b.line) for b in blocks] == [
        ("python", NO_TEST, 3),
        ("python", "", 7),
        ("text", OUTPUT_VARIES, 12),
        ("bash", "", 15),
    ]
    indented = read_blocks("- a list item:\n\n  ```text\n    x\n  y\n  ```\n")
    assert indented[0].text == "  x\ny"  # the fence's indent goes, the text's own stays
    with pytest.raises(ValueError, match="never closed"):
        read_blocks("```python\nprint(1)\n")


def test_check_doc_reports_wrong_output_and_skips_marked_blocks(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(
        "<!-- no-test -->\n```python\nraise RuntimeError\n```\n"
        "```python\nx = 2\nprint(x)\n```\n```text\n2\n```\n"
        "```python\nprint(x + 1)\n```\n```text\n4\n```\n"
    )
    problems = check_doc(doc)
    assert len(problems) == 1 and "doc.md:16" in problems[0] and "+3" in problems[0]


def test_failing_block_names_its_line(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("# t\n\n```python\nx = 1\nraise KeyError('boom')\n```\n")
    with pytest.raises(KeyError) as info:
        run_doc(doc)
    assert "doc.md:4" in str(info.value.__notes__)
    assert info.traceback[-1].lineno + 1 == 5  # the markdown line of the raise


# -- regenerating the outputs shown ------------------------------------------------------------


def update_doc(path: Path) -> int:
    """Rewrite each whole-output text block (one per code block, no `...`) with today's output."""
    lines = path.read_text().split("\n")
    shown = run_doc(path)
    per_code: dict[int, list] = {}
    for code, text, output in shown:
        per_code.setdefault(code.first, []).append((text, output))
    changed = 0
    for entries in sorted(per_code.values(), key=lambda e: -e[0][0].first):
        text, output = entries[0]
        if len(entries) != 1 or text.marker == OUTPUT_VARIES or "..." in text.text:
            continue
        new = [(text.indent + ln).rstrip() for ln in output.rstrip("\n").split("\n")]
        if lines[text.first : text.end] != new:
            lines[text.first : text.end] = new
            changed += 1
    path.write_text("\n".join(lines))
    return changed


def test_update_doc_rewrites_whole_outputs_only(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    doc = tmp_path / "doc.md"
    doc.write_text(
        "```python\nprint('a')\nprint('b')\n```\n```text\nold\n```\n"
        "```python\nprint(1.5)\n```\n```text\nkept ...\n```\n"
    )
    assert update_doc(doc) == 1
    assert doc.read_text().startswith("```python\nprint('a')\nprint('b')\n```\n```text\na\nb\n```")
    assert "kept ...\n" in doc.read_text()
    assert len(check_doc(doc)) == 1  # the hand-written block still differs, and says so


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] != "--update":
        sys.exit("usage: tests/test_docs.py --update FILE.md [FILE.md ...]")
    import os
    import tempfile

    for name in sys.argv[2:]:
        doc = Path(name).resolve()
        with tempfile.TemporaryDirectory() as tmp:
            os.chdir(tmp)
            print(f"{name}: {update_doc(doc)} output block(s) rewritten")
