"""The HTML tuning report from a small records database: one pair of best-so-far charts per
task, the default as a line, failures marked, and the final table's numbers."""

import re
from html.parser import HTMLParser

import pytest

from tessera import autotune
from tessera.autotune import Config, Database, Record, Task, Workload
from tessera.autotune.report import task_reports

FP = "llvm cpu=x vector_bits=256"


def _task(n):
    return Task(Workload("nn.dense", (((1, n), "float32"), ((4, n), "float32")), (), (), ()), "cpu")


def _rec(task, knob, seconds, t, error=None, **flags):
    return Record(task, FP, Config("packed", {"nv": knob}), seconds, error, t, **flags)


@pytest.fixture
def db_path(tmp_path):
    a, b = _task(8), _task(16)
    path = tmp_path / "tune.db"
    db = Database(path)
    for rec in [
        _rec(a, 1, 4e-6, 100.0, baseline=True),  # the default: 4 us
        _rec(b, 1, 10e-6, 100.5, baseline=True),  # the default: 10 us
        _rec(a, 2, 3e-6, 101.0),
        _rec(a, 4, None, 102.0, error="crash: the worker died (exit code -6)"),
        _rec(a, 8, 2e-6, 104.0),
        _rec(b, 2, 12e-6, 103.0),  # slower than the default: b keeps it
        # a's winner confirmed against the default (medians of runs in turns)
        _rec(a, 1, 4.2e-6, 105.0, again=True, baseline=True),
        _rec(a, 8, 2.1e-6, 105.1, again=True),
    ]:
        db.append(rec)
    return path, a, b


class _Parse(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.rows, self._row, self._cell = [], [], None, None

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "tr":
            self._row = []
        elif tag == "td":
            self._cell = ""

    def handle_endtag(self, tag):
        if tag == "td":
            self._row.append(self._cell.strip())
            self._cell = None
        elif tag == "tr" and self._row:
            self.rows.append(self._row)

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data


def test_report_has_a_curve_per_task_and_the_table(db_path, tmp_path):
    path, a, b = db_path
    out = autotune.report(path, tmp_path / "r.html", counts={a: 3, b: 1})
    text = out.read_text()
    p = _Parse()
    p.feed(text)
    # self-contained: no script, no external asset
    assert not any(t in ("script", "link", "img") for t, _ in p.tags)
    assert "http" not in re.sub(r'xmlns="http://www.w3.org/2000/svg"', "", text)
    svgs = [attrs for t, attrs in p.tags if t == "svg"]
    assert [s["data-by"] for s in svgs] == ["trials", "time"] * 2
    # one best-so-far curve and one default line per chart
    assert sum(t == "polyline" and a.get("class") == "best" for t, a in p.tags) == 4
    assert sum(t == "line" and a.get("class") == "default" for t, a in p.tags) == 4
    assert sum(t == "line" and a.get("class") == "failed" for t, a in p.tags) == 2  # a's crash
    # the table, heaviest first: a (3 calls x 4.2 us) before b (1 x 10 us)
    (ra, rb) = p.rows
    assert ra[0] == str(a) and rb[0] == str(b)
    assert ra[2:9] == ["3", "4.2 us", "2.1 us", "x2.00", "55.8%", "4", "1"]
    assert rb[2:9] == ["1", "10.0 us", "10.0 us", "x1.00", "44.2%", "2", "0"]
    assert ra[9] == str(Config("packed", {"nv": 8})) and rb[9] == "default"
    # the model estimate: (3 x 4.2 + 10) / (3 x 2.1 + 10)
    assert f"x{(3 * 4.2 + 10) / (3 * 2.1 + 10):.2f}" in text


def test_best_so_far_curves_by_trials_and_wall_time(db_path):
    path, a, b = db_path
    # without the calls each task counts once: b (10 us) is the heavier
    rb, ra = task_reports(Database(path))
    assert (ra.task, rb.task) == (a, b)
    # trial, seconds since the task's first record, best so far (the crash keeps the best)
    assert ra.curve() == [(1, 0.0, 4e-6), (2, 1.0, 3e-6), (3, 2.0, 3e-6), (4, 4.0, 2e-6)]
    assert rb.curve() == [(1, 0.0, 10e-6), (2, 2.5, 10e-6)]
    assert (ra.default_seconds, ra.tuned_seconds) == (4.2e-6, 2.1e-6)  # judged by the again
