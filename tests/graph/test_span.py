"""Source node names on graph calls (`Call.span`): text round trip, equality ignores them,
the builder sets them, `merge_spans` and `source_nodes`."""

from dataclasses import replace

import numpy as np
import pytest

from tessera.graph import Call, GraphBuilder, get_op, parse
from tessera.graph.builder import rename_values
from tessera.graph.ir import merge_spans, source_nodes
from tessera.graph.parser import ParseError
from tessera.ir import assert_structural_equal, structural_equal

TEXT = """def main(%x: f32[1, 8]) {
  %1 = exp(%x) : f32[1, 8]  @"conv1/relu";
  %2 = nn.relu(%1) : f32[1, 8]  @"a", "b \\"quoted\\"", "ünï";
  %3 = negative(%2) : f32[1, 8];
  return %3
}"""


def test_spans_print_and_parse_back():
    f = parse(TEXT)
    assert [c.span for c in f.body] == [("conv1/relu",), ("a", 'b "quoted"', "ünï"), ()]
    assert str(f) == TEXT.replace("ünï", "\\u00fcn\\u00ef")  # json escapes, read back alike
    g = parse(str(f))
    assert [c.span for c in g.body] == [c.span for c in f.body]
    assert_structural_equal(g, f)


def test_span_may_follow_a_call_without_a_type():
    f = parse('def main(%x: f32[4]) { %1 = exp(%x) @"n1"; return %1 }')
    assert f.body[0].span == ("n1",)


def test_spans_round_trip_inside_fused_functions():
    inner = parse('def g(%p0: f32[4]) { %1 = exp(%p0) @"e"; %2 = tanh(%1) @"t"; return %2 }')
    x = parse("def main(%x: f32[4]) { return %x }").params[0]
    out = replace(inner.outputs[0])
    call = Call(get_op("fused"), (x,), {"func": inner}, (out,), ("e", "t"))
    text = f"def main(%x: f32[4]) {{\n  {call};\n  return %{out.name}\n}}"
    f = parse(text)
    assert f.body[0].span == ("e", "t")
    assert [c.span for c in f.body[0].attrs["func"].body] == [("e",), ("t",)]


def test_structural_equality_and_hash_ignore_spans():
    f = parse(TEXT)
    bare = parse(
        "def main(%x: f32[1, 8]) { %1 = exp(%x); %2 = nn.relu(%1); %3 = negative(%2); return %3 }"
    )
    assert structural_equal(f, bare)
    call = f.body[0]
    other = replace(call, span=("something", "else"))
    assert other == call and hash(other) == hash(call)
    assert other.span != call.span


def test_structural_equality_still_sees_real_differences():
    f = parse(TEXT)
    g = parse(TEXT.replace("negative", "exp"))
    assert not structural_equal(f, g)


@pytest.mark.parametrize(
    "text,message",
    [
        ("def main(%x: f32[4]) { %1 = exp(%x) @; return %1 }", "expected a source node name"),
        ("def main(%x: f32[4]) { %1 = exp(%x) @n1; return %1 }", "expected a source node name"),
        ('def main(%x: f32[4]) { %1 = exp(%x) @"a",; return %1 }', "expected a source node"),
        ('def main(%x: f32[4]) { %1 = exp(%x) @"a" "b"; return %1 }', "expected ';'"),
    ],
)
def test_bad_spans_are_parse_errors(text, message):
    with pytest.raises(ParseError, match=message):
        parse(text)


def test_call_span_is_a_tuple_of_names():
    f = parse("def main(%x: f32[4]) { %1 = exp(%x); return %1 }")
    call = f.body[0]
    assert replace(call, span="n1").span == ("n1",)
    assert replace(call, span=["a", "b"]).span == ("a", "b")
    with pytest.raises(TypeError, match="source node names"):
        replace(call, span=(1,))


def test_builder_sets_the_current_span_and_renaming_keeps_it():
    b = GraphBuilder()
    x = b.param("x", (2,), "float32")
    b.span = ("node_a",)
    y = b.call("exp", x)
    b.call("exp", b.const(np.ones(2, "float32")))  # folded: no call, nothing to name
    b.span = ("node_b",)
    z = b.call("add", y, y)
    f = b.finish([z], names={id(y): "renamed"})
    assert [(c.op.name, c.span) for c in f.body] == [("exp", ("node_a",)), ("add", ("node_b",))]
    assert f.body[0].outputs[0].name == "renamed"
    g = rename_values(f, {id(f.body[1].outputs[0]): "out"})
    assert [c.span for c in g.body] == [("node_a",), ("node_b",)]


def test_merge_spans_keeps_first_appearance_order():
    assert merge_spans(("a", "b"), (), ("c", "a"), ("b", "d")) == ("a", "b", "c", "d")
    assert merge_spans() == ()


def test_source_nodes_of_plain_and_fused_calls():
    f = parse(TEXT)
    assert source_nodes(f.body[1]) == ["a", 'b "quoted"', "ünï"]
    assert source_nodes(f.body[2]) == []
    inner = parse('def g(%p0: f32[4]) { %1 = exp(%p0) @"e"; %2 = tanh(%1) @"t", "e"; return %2 }')
    x = parse("def main(%x: f32[4]) { return %x }").params[0]
    fused = Call(get_op("fused"), (x,), {"func": inner}, (replace(inner.outputs[0]),))
    assert source_nodes(fused) == ["e", "t"]  # no span of its own: its members'
    assert source_nodes(replace(fused, span=("own",))) == ["own"]
