"""Rule knobs: the parameters of the strategies' default rules, as knobs (Note [rule knobs]).

    MARGIN = RuleKnob("winograd.margin", (0.6, 0.7, 0.8, 0.9, 1.0), 0.8, "...")
    MARGIN.value()                                 # 0.8, or what a build says
    with use_rules({"winograd.margin": 0.9}): ...  # or PassContext config "strategy.rules"

In topi's core (no imports from tessera but the target table, when asked) so that the generic
schedules' rules (topi/nn) declare theirs as the strategies (topi/<key>/) do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# Note [rule knobs]
# A default rule's own parameters (Winograd's margin over the direct conv, the dense tile's
# intensity share, how much padded work a blocked conv may do, a tail penalty) are knobs too,
# one level up: each is a `RuleKnob`, declared where its rule is, with candidate values around
# today's and today's value as default. The rule reads `knob.value()`: the default, unless a
# build says otherwise (`PassContext(config={"strategy.rules": {"winograd.margin": 0.9}})`, or
# `with use_rules({...}):` around anything that asks for defaults). A task's knobs choose one
# kernel; a rule knob moves the defaults of every task its rule decides, so it is what a
# search over a machine (rather than over a model's tasks) tunes, and what a new machine
# re-measures. `rule_knobs()` lists them. What a target describes (vector width, registers,
# caches, DRAM bandwidth, stack) is not a rule knob: it is read from the target.


@dataclass(frozen=True)
class RuleKnob:
    """A parameter of a default rule (Note [rule knobs]): `name` ("winograd.margin"), the
    candidate values a search tries, and today's value (`default`, one of them)."""

    name: str
    candidates: tuple
    default: object
    doc: str = ""

    def __post_init__(self):
        if self.default not in self.candidates:
            raise ValueError(f"rule knob {self.name!r}: default {self.default!r} not a candidate")
        _RULE_KNOBS[self.name] = self

    def value(self):
        """The value in effect: the innermost `use_rules` that names it, else the default."""
        for scope in reversed(_RULE_SCOPE):
            if self.name in scope:
                return scope[self.name]
        return self.default


_RULE_KNOBS: dict[str, RuleKnob] = {}
_RULE_SCOPE: list[dict] = []


def rule_knobs() -> dict[str, RuleKnob]:
    """Every rule knob of the loaded strategies (all of them: `target.load_strategies()`)."""
    return dict(_RULE_KNOBS)


def _check_rule_value(knob: RuleKnob, value):
    numbers = (int, float)
    if isinstance(knob.default, bool) or not isinstance(knob.default, numbers):
        ok = type(value) is type(knob.default)
    elif isinstance(knob.default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, numbers) and not isinstance(value, bool)
    if not ok or (isinstance(value, numbers) and value < 0):
        raise ValueError(
            f"rule knob {knob.name!r}: expected a value like {knob.default!r} "
            f"(candidates {knob.candidates}), got {value!r}"
        )


class use_rules:
    """`with use_rules({"winograd.margin": 0.9}):` the values rule knobs take inside (Note
    [rule knobs]); an unknown name or a value of the wrong kind is a ValueError."""

    def __init__(self, values: Mapping | None):
        self.values = dict(values or {})
        if self.values:
            from tessera.target import load_strategies

            load_strategies()  # every strategy module declares its rule knobs
        for name, value in self.values.items():
            if name not in _RULE_KNOBS:
                known = ", ".join(sorted(_RULE_KNOBS))
                raise ValueError(f"unknown rule knob {name!r}; known: {known}")
            _check_rule_value(_RULE_KNOBS[name], value)

    def __enter__(self):
        _RULE_SCOPE.append(self.values)
        return self

    def __exit__(self, *exc):
        _RULE_SCOPE.pop()


def rules_in_effect() -> tuple:
    """The rule knobs whose value is not the default, as sorted (name, value) pairs (part of
    a kernel's cache key: a rule may shape a schedule beyond its config's knobs)."""
    values = {k.name: k.value() for k in _RULE_KNOBS.values()}
    return tuple(sorted((n, v) for n, v in values.items() if v != _RULE_KNOBS[n].default))
