"""The tuning report: one self-contained HTML file (inline SVG, no script, no external asset)
drawn from a records database.

    tessera.autotune.report("tune.db", "tune.html")
    tessera tune model.onnx --budget 10m --db tune.db --report tune.html

For every (task, target) the database holds, two charts of the best time so far: against the
trials (the records in the order they were written) and against the wall time since the
task's first record; each measured time is a dot, failed trials are red ticks on the axis,
and the default's time is a dashed line. Then the table: per task its default and tuned
time, the gain, its weight (its share of the model's default time: default time x calls;
`counts` gives the calls, which the database does not hold, else each task counts once),
trials and failures, and the config a build with the database takes. Records measured
`again` (a winner confirmed against the default, tuner._confirm) are not trials: they judge
the default and tuned times, as they do for `Database.best`.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from pathlib import Path

from tessera.autotune.records import Database, Record, _judged, best_of
from tessera.topi.strategy import Config, Task

_W, _H = 440, 220  # one chart, in SVG pixels
_PAD_L, _PAD_R, _PAD_T, _PAD_B = 64, 12, 12, 36


@dataclass
class TaskReport:
    """What the report shows of one (task, target): its trials in the order written."""

    task: Task
    target: str
    trials: list[Record]  # not `again`
    default: Config | None
    default_seconds: float | None
    tuned: Config | None
    tuned_seconds: float | None
    unit: str
    count: int = 1

    @property
    def failed(self) -> int:
        return sum(not r.ok for r in self.trials)

    @property
    def gain(self) -> float | None:
        if self.default_seconds and self.tuned_seconds:
            return self.default_seconds / self.tuned_seconds
        return None

    def curve(self) -> list[tuple[int, float, float]]:
        """(trial, seconds since the first record, best so far) after each passing trial."""
        out, best = [], math.inf
        t0 = self.trials[0].timestamp if self.trials else 0.0
        for i, r in enumerate(self.trials, 1):
            if r.ok and r.seconds < best:
                best = r.seconds
            if best < math.inf:
                out.append((i, r.timestamp - t0, best))
        return out


def task_reports(db: Database, counts: dict | None = None) -> list[TaskReport]:
    """A TaskReport per (task, target) of `db`, heaviest first (counts: {task: calls})."""
    counts = counts or {}
    groups: dict[tuple, list[Record]] = {}
    for r in db.records:
        groups.setdefault((r.task, r.target), []).append(r)
    out = []
    for (task, target), recs in groups.items():
        recs = sorted(recs, key=lambda r: r.timestamp)  # stable: written order within a tie
        judged = {c: r for (_, c), r in _judged(recs).items()}
        baseline = [r for r in recs if r.baseline]
        default = baseline[0].config if baseline else None
        d = judged.get(default)
        default_s = d.seconds if d is not None and d.ok else None
        best = best_of(recs)
        tuned, tuned_s = (best.config, best.seconds) if best is not None else (None, None)
        if default_s is not None and (tuned_s is None or tuned_s >= default_s):
            tuned, tuned_s = default, default_s
        trials = [r for r in recs if not r.again]
        unit = recs[0].unit
        count = max(1, int(counts.get(task, 1)))
        out.append(
            TaskReport(task, target, trials, default, default_s, tuned, tuned_s, unit, count)
        )
    out.sort(key=lambda t: -(t.default_seconds or 0) * t.count)
    return out


def report(db_path, out_path, counts: dict | None = None, title: str | None = None) -> Path:
    """Write the HTML report of the records database `db_path` to `out_path` (returned).
    `counts`: {task: calls of the model that run it} for the weights (else 1 each)."""
    db = Database(db_path)
    reports = task_reports(db, counts)
    title = title or f"tuning report: {Path(db_path).name}"
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(reports, title, weighted=counts is not None))
    return out


def _fmt(seconds: float | None, unit: str) -> str:
    if seconds is None:
        return "-"
    if unit != "seconds":
        return f"{seconds:,.0f}"
    return f"{seconds * 1e6:,.1f}"


def _unit_label(unit: str) -> str:
    return "us" if unit == "seconds" else unit


def _scale(lo: float, hi: float, a: float, b: float):
    span = (hi - lo) or 1.0
    return lambda v: a + (v - lo) / span * (b - a)


def _ticks(lo: float, hi: float, n: int = 4) -> list[float]:
    if hi <= lo:
        return [lo]
    return [lo + (hi - lo) * i / n for i in range(n + 1)]


def _chart(rep: TaskReport, by_time: bool) -> str:
    """One SVG chart of the best so far (by trials, or by wall time)."""
    curve = rep.curve()
    k = 1 if by_time else 0
    xs_all = [r.timestamp - rep.trials[0].timestamp for r in rep.trials] if by_time else None
    n = len(rep.trials)
    x_hi = max(xs_all) if by_time and xs_all else max(n, 1)
    x_lo = 0.0 if by_time else 1.0
    times = [r.seconds for r in rep.trials if r.ok]
    if rep.default_seconds is not None:
        times.append(rep.default_seconds)
    scale = 1e6 if rep.unit == "seconds" else 1.0
    y_lo = min(times) * scale * 0.95 if times else 0.0
    y_hi = max(times) * scale * 1.05 if times else 1.0
    fx = _scale(x_lo, x_hi, _PAD_L, _W - _PAD_R)
    fy = _scale(y_lo, y_hi, _H - _PAD_B, _PAD_T)
    xlabel = "wall time (s)" if by_time else "trials"
    parts = [
        f'<svg class="curve" data-by="{"time" if by_time else "trials"}" width="{_W}" '
        f'height="{_H}" viewBox="0 0 {_W} {_H}" xmlns="http://www.w3.org/2000/svg">',
        f'<rect x="{_PAD_L}" y="{_PAD_T}" width="{_W - _PAD_L - _PAD_R}" '
        f'height="{_H - _PAD_T - _PAD_B}" fill="#fafafa" stroke="#ccc"/>',
    ]
    for v in _ticks(y_lo, y_hi):
        y = fy(v)
        parts.append(
            f'<line x1="{_PAD_L - 4}" y1="{y:.1f}" x2="{_PAD_L}" y2="{y:.1f}" stroke="#888"/>'
        )
        parts.append(
            f'<text x="{_PAD_L - 6}" y="{y + 4:.1f}" font-size="10" text-anchor="end">'
            f"{v:,.4g}</text>"
        )
    for v in _ticks(x_lo, x_hi):
        x = fx(v)
        y0 = _H - _PAD_B
        parts.append(f'<line x1="{x:.1f}" y1="{y0}" x2="{x:.1f}" y2="{y0 + 4}" stroke="#888"/>')
        parts.append(
            f'<text x="{x:.1f}" y="{y0 + 15}" font-size="10" text-anchor="middle">{v:,.3g}</text>'
        )
    parts.append(
        f'<text x="{(_PAD_L + _W - _PAD_R) / 2}" y="{_H - 4}" font-size="11" '
        f'text-anchor="middle">{xlabel}</text>'
    )
    parts.append(
        f'<text x="12" y="{(_H - _PAD_B + _PAD_T) / 2}" font-size="11" text-anchor="middle" '
        f'transform="rotate(-90 12 {(_H - _PAD_B + _PAD_T) / 2})">'
        f"{_unit_label(rep.unit)}</text>"
    )
    if rep.default_seconds is not None:
        y = fy(rep.default_seconds * scale)
        parts.append(
            f'<line class="default" x1="{_PAD_L}" y1="{y:.1f}" x2="{_W - _PAD_R}" y2="{y:.1f}" '
            f'stroke="#e67e22" stroke-dasharray="5,3"><title>default '
            f"{_fmt(rep.default_seconds, rep.unit)}</title></line>"
        )
    for i, r in enumerate(rep.trials):
        x = fx(xs_all[i] if by_time else i + 1)
        if r.ok:
            parts.append(
                f'<circle cx="{x:.1f}" cy="{fy(r.seconds * scale):.1f}" r="2" fill="#999">'
                f"<title>{html.escape(str(r.config))}: {_fmt(r.seconds, rep.unit)}</title>"
                "</circle>"
            )
        else:
            y0 = _H - _PAD_B
            parts.append(
                f'<line class="failed" x1="{x:.1f}" y1="{y0 - 6}" x2="{x:.1f}" y2="{y0}" '
                f'stroke="#c0392b"><title>{html.escape(str(r.config))}: '
                f"{html.escape(str(r.error))}</title></line>"
            )
    if curve:
        pts, prev = [], None
        for point in curve:
            x, y = fx(point[k]), fy(point[2] * scale)
            if prev is not None:
                pts.append(f"{x:.1f},{prev:.1f}")  # a step: the best holds until it improves
            pts.append(f"{x:.1f},{y:.1f}")
            prev = y
        parts.append(
            f'<polyline class="best" points="{" ".join(pts)}" fill="none" stroke="#2471a3" '
            'stroke-width="2"/>'
        )
    parts.append("</svg>")
    return "\n".join(parts)


_CSS = """
body { font-family: sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 3px 8px; font-size: 13px; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
.task { margin: 1.2em 0; }
.task h3 { font-size: 14px; font-family: monospace; margin: 0.3em 0; }
.legend span { margin-right: 1.5em; font-size: 12px; }
"""


def render(reports: list[TaskReport], title: str, weighted: bool = False) -> str:
    """The report's HTML for `reports` (task_reports)."""
    total = sum((r.default_seconds or 0) * r.count for r in reports) or 1.0
    rows = []
    for r in reports:
        gain = f"x{r.gain:.2f}" if r.gain else "-"
        weight = (r.default_seconds or 0) * r.count / total
        config = "default" if r.tuned == r.default else str(r.tuned)
        u = _unit_label(r.unit)
        rows.append(
            "<tr class='task-row'>"
            f"<td><code>{html.escape(str(r.task))}</code></td>"
            f"<td>{html.escape(r.target)}</td>"
            f"<td class='n'>{r.count}</td>"
            f"<td class='n default'>{_fmt(r.default_seconds, r.unit)} {u}</td>"
            f"<td class='n tuned'>{_fmt(r.tuned_seconds, r.unit)} {u}</td>"
            f"<td class='n gain'>{gain}</td>"
            f"<td class='n weight'>{weight:.1%}</td>"
            f"<td class='n'>{len(r.trials)}</td>"
            f"<td class='n'>{r.failed}</td>"
            f"<td><code>{html.escape(config)}</code></td>"
            "</tr>"
        )
    timed = [r for r in reports if r.gain and r.unit == "seconds"]
    summary = ""
    if timed:
        before = sum(r.count * r.default_seconds for r in timed)
        after = sum(r.count * r.tuned_seconds for r in timed)
        calls = "" if weighted else " (each task counted once: the calls were not given)"
        summary = f"<p>estimated model speedup from tuned kernels: x{before / after:.2f}{calls}</p>"
    sections = []
    for i, r in enumerate(reports):
        sections.append(
            f"<div class='task' id='task-{i}'><h3>{html.escape(str(r.task))}</h3>"
            f"<div>{html.escape(r.target)}: {len(r.trials)} trials, {r.failed} failed, default "
            f"{_fmt(r.default_seconds, r.unit)}, tuned {_fmt(r.tuned_seconds, r.unit)} "
            f"{_unit_label(r.unit)}</div>"
            f"{_chart(r, by_time=False)}\n{_chart(r, by_time=True)}</div>"
        )
    head = (
        "<tr><th>task</th><th>target</th><th>calls</th><th>default</th><th>tuned</th>"
        "<th>gain</th><th>weight</th><th>trials</th><th>failed</th><th>config</th></tr>"
    )
    legend = (
        "<p class='legend'><span style='color:#2471a3'>&#9644; best so far</span>"
        "<span style='color:#e67e22'>- - default</span>"
        "<span style='color:#999'>&#9679; a trial</span>"
        "<span style='color:#c0392b'>| a failed trial</span></p>"
    )
    return (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>\n"
        f"<h1>{html.escape(title)}</h1>\n<h2>Tasks</h2>\n"
        f"<table class='summary'>{head}\n" + "\n".join(rows) + "</table>\n"
        f"{summary}\n<h2>Best time so far</h2>\n{legend}\n"
        + "\n".join(sections)
        + "\n</body></html>\n"
    )
