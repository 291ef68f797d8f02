"""`tessera tune` for real in a subprocess: a tiny budget writes records and prints the table,
a rerun resumes, and `tessera compile --db` builds with the records (saying so with -v)."""

import json
import re
from collections import Counter

import pytest

from tessera.cli.tune import parse_budget


@pytest.mark.parametrize(
    "text, seconds", [("10m", 600), ("90s", 90), ("1h30m", 5400), ("45", 45), ("2.5m", 150)]
)
def test_parse_budget(text, seconds):
    assert parse_budget(text) == seconds


@pytest.mark.parametrize("text", ["10x", "m10", "", "10m5"])
def test_parse_budget_refuses_what_is_not_a_duration(text):
    import click

    with pytest.raises(click.BadParameter):
        parse_budget(text)


def test_tune_then_compile_with_the_database(cli, tmp_path, cnn_path):
    db = tmp_path / "tune.db"
    html = tmp_path / "tune.html"
    result = cli("tune", cnn_path, "--budget", "60s", "--trials", "2", "--db", db, "--report", html)
    assert result.returncode == 0, result.stderr
    assert "default" in result.stdout and "tuned" in result.stdout and "speedup" in result.stdout
    # the last stage, said in the report: winners judged in the model, the untuned model when
    # a winner was kept, or no stage when none was found
    assert "in-model confirmation" in result.stdout
    lines = db.read_text().splitlines()
    # a verdict of the in-model confirmation per winner (records marked "in_model")
    verdicts = [r for r in map(json.loads, lines) if r.get("in_model")]
    assert ("no winner to confirm" in result.stdout) == (not verdicts)
    per_task = Counter(json.loads(line)["digest"] for line in lines if "in_model" not in line)
    # the report: two charts (by trials, by wall time) and a table row per task of the database
    page = html.read_text()
    assert page.count('<svg class="curve"') == 2 * len(per_task)
    assert page.count("<tr class='task-row'>") == len(per_task)
    # every task has its default; the budget goes by share of time, so a task whose kernel
    # takes almost none may get no candidate at all; a task whose candidate won has the winner
    # and the default measured again (confirmed)
    assert 3 <= max(per_task.values()) <= 5 and min(per_task.values()) >= 1

    again = cli("tune", cnn_path, "--budget", "60s", "--trials", "1", "--db", db, "-q")
    assert again.returncode == 0, again.stderr
    now = db.read_text().splitlines()
    assert now[: len(lines)] == lines and len(now) > len(lines)
    # the rerun measured nothing twice, but for a winner and its default measured again to
    # confirm the win (records marked "again")
    keys = [
        (r["digest"], json.dumps(r["config"]))
        for r in map(json.loads, now)
        if not r.get("again") and not r.get("in_model")
    ]
    assert len(set(keys)) == len(keys)

    out = tmp_path / "m.so"
    built = cli("-v", "compile", cnn_path, "--db", db, "-o", out)
    assert built.returncode == 0, built.stderr
    # the tasks with a record are built with it; which tasks a build asks depends on the
    # configs (a pool is asked its layout only after a conv that packs its output, and a pool
    # is not measurable alone: it has no passing record), so only a lower bound is certain
    asked = re.search(r"(\d+) of (\d+) tasks tuned", built.stderr)
    assert asked and int(asked[1]) >= 3, built.stderr


def test_tune_on_a_dask_cluster(cli, tmp_path, cnn_path):
    """`--cluster ADDRESS`: the candidates are measured on the workers of a running Dask
    cluster (a LocalCluster of this test's process), the records written by the command."""
    distributed = pytest.importorskip("distributed")
    db = tmp_path / "tune.db"
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        address = cluster.scheduler_address
        result = cli(
            "tune",
            cnn_path,
            "--budget",
            "60s",
            "--trials",
            "2",
            "--db",
            db,
            "--cluster",
            address,
            "--no-in-model",
            "-q",
        )
    assert result.returncode == 0, result.stderr
    assert "speedup" in result.stdout
    records = [json.loads(line) for line in db.read_text().splitlines()]
    # --no-in-model: the winners are kept as measured, with no confirmation in the model
    assert "in-model confirmation" not in result.stdout
    assert not any(r.get("in_model") for r in records)
    # every task's default, measured on the cluster, and candidates besides
    digests = {r["digest"] for r in records}
    assert len(digests) >= 2
    assert {r["digest"] for r in records if r.get("baseline")} == digests
    assert len(records) > len(digests)
    assert any(r["error"] is None and not r.get("baseline") for r in records), records
