"""Integer analysis: simplification (rule tables, canonical form), bounds, sets, divisibility.

from tessera.arith import Analyzer, IntSet, simplify
an = Analyzer(); an.bind(i, Range(0, 16))
an.simplify((i*16 + j) - i*16)        # j
an.const_int_bound(i*4 + 3)           # (3, 63)
an.int_set(i*16 + j, {i: Range(0, 4), j: Range(0, 16)})   # [0, 63]
"""

from tessera.arith.analyzer import Analyzer, simplify
from tessera.arith.int_set import IntSet
from tessera.arith.pattern import Rule, Wild, WildConst

__all__ = ["Analyzer", "IntSet", "Rule", "Wild", "WildConst", "simplify"]
