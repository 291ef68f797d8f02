import pytest

from tessera.transform import PassContext, PassInstrument, PassTiming, PrintIR, run_passes


def add_one(x):
    return x + 1


def double(x):
    return x * 2


def test_passes_run_in_order():
    assert run_passes([add_one, double], 3) == 8
    assert run_passes([double, add_one], 3) == 7


def test_disabled_pass_is_skipped():
    with PassContext(disabled_pass=["double"]):
        assert run_passes([add_one, double], 3) == 4
    assert run_passes([add_one, double], 3) == 8


def test_instruments_see_each_pass(capsys):
    seen = []

    class Record(PassInstrument):
        def run_before_pass(self, name, ir):
            seen.append(("before", name, ir))

        def run_after_pass(self, name, ir, seconds):
            seen.append(("after", name, ir))
            assert seconds >= 0

    timing = PassTiming()
    with PassContext(instruments=[Record(), timing, PrintIR(only=["double"])]):
        run_passes([add_one, double], 1)
    assert seen == [
        ("before", "add_one", 1),
        ("after", "add_one", 2),
        ("before", "double", 2),
        ("after", "double", 4),
    ]
    assert set(timing.times) == {"add_one", "double"}
    assert "after double" in capsys.readouterr().out


def test_contexts_nest():
    with PassContext(opt_level=3):
        assert PassContext.current().opt_level == 3
        with PassContext(opt_level=1):
            assert PassContext.current().opt_level == 1
        assert PassContext.current().opt_level == 3
    assert PassContext.current().opt_level == 2


def test_bad_opt_level():
    with pytest.raises(ValueError, match="opt_level"):
        PassContext(opt_level=7)
