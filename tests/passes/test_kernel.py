"""The pass kernel (mxnet_amp.passes.kernel): the node loop, entry remapping, node-context
errors, and verify_graph as every pass's postcondition."""
from types import MappingProxyType

import pytest

from mxnet_amp.errors import GraphCheckError, PassNodeError, TypeInferenceError
from mxnet_amp.ir.graph import Entry, Graph, Node, cast_node
from mxnet_amp.passes.kernel import GraphPass, PassResult, Rewriter, run_passes
from mxnet_amp.passes.strip_casts import StripCasts


def fc(name, *inputs):
    return Node("FullyConnected", name, tuple(inputs), MappingProxyType({"num_hidden": "4"}))


def small():
    # x, w -> fc -> relu ; w read with version 1 (as MXNet writes a mutable input)
    return Graph((Node("null", "x"), Node("null", "w"), fc("fc", Entry(0), Entry(1, 0, 1)),
                  Node("Activation", "relu", (Entry(2),), MappingProxyType({"act_type": "relu"}))),
                 (Entry(3),))


class CastBeforeFC(Rewriter):
    """Puts a float16 cast on an FC's first input: a node-to-many rewrite."""
    name = "cast_before_fc"

    def rewrite_node(self, i, node):
        if node.op != "FullyConnected":
            return super().rewrite_node(i, node)
        inputs = self.inputs(node)
        cast = self.emit(cast_node(self.builder.fresh_name(node.name + "_in16"), inputs[0], "float16"))
        return self.emit(node._replace(inputs=(Entry(cast),) + inputs[1:]))


def test_the_rewriter_remaps_entries_and_keeps_versions():
    g = CastBeforeFC(small()).run()
    assert [n.name for n in g.nodes] == ["x", "w", "fc_in16", "fc", "relu"]
    assert g.nodes[3].inputs == (Entry(2), Entry(1, 0, 1))   # the weight's version kept
    assert g.nodes[4].inputs == (Entry(3),) and g.heads == (Entry(4),)


def test_run_from_a_start_keeps_the_prefix_without_calling_the_hook():
    seen = []

    class Watch(Rewriter):
        def rewrite_node(self, i, node):
            seen.append(i)
            return super().rewrite_node(i, node)

    g = small()
    assert Watch(g).run(start=2) == g and seen == [2, 3]


class BreaksNames(GraphPass):
    """A broken pass: renames the FC to the name of its input variable."""
    name = "breaks_names"

    def call(self, graph):
        nodes = list(graph.nodes)
        nodes[2] = nodes[2]._replace(name="x")
        return PassResult(Graph(tuple(nodes), graph.heads, graph.attrs), None, True)


def test_a_pass_that_breaks_an_invariant_is_caught_with_the_node_named():
    with pytest.raises(GraphCheckError) as info:
        BreaksNames()(small())
    text = str(info.value)
    assert "after pass breaks_names" in text and "duplicate node name" in text and "'x'" in text
    # the check can be switched off (measured: benchmarks/pass_verify_cost.py)
    assert BreaksNames(verify=False)(small()).changed


def test_a_cast_chain_is_caught_unless_the_pass_declares_it():
    class Chain(GraphPass):
        name = "chain"

        def call(self, graph):
            return PassResult(CastBeforeFC(CastBeforeFC(graph).run()).run(), None, True)

    with pytest.raises(GraphCheckError, match="after pass chain: node 3 'fc_in16_1'"):
        Chain()(small())
    Chain.cast_chains = True
    assert Chain()(small()).changed


def test_an_error_inside_a_node_names_the_pass_the_node_and_its_op():
    class Fails(Rewriter):
        name = "fails"

        def rewrite_node(self, i, node):
            if node.op == "Activation":
                return {}["missing"]
            return super().rewrite_node(i, node)

    with pytest.raises(PassNodeError) as info:
        Fails(small()).run()
    assert "pass fails" in str(info.value) and "'relu'" in str(info.value)
    assert "Activation" in str(info.value) and "KeyError" in str(info.value)
    assert isinstance(info.value.__cause__, KeyError)


def test_a_typed_error_inside_a_node_keeps_its_type_and_message():
    class Refuses(Rewriter):
        name = "refuses"

        def rewrite_node(self, i, node):
            if node.op == "FullyConnected":
                raise TypeInferenceError("fc does not type-check")
            return super().rewrite_node(i, node)

    with pytest.raises(TypeInferenceError) as info:
        Refuses(small()).run()
    assert str(info.value) == "fc does not type-check"
    assert any("'fc'" in note and "refuses" in note for note in info.value.__notes__)


def test_a_pass_result_says_whether_it_changed_the_graph():
    g = small()
    assert StripCasts()(g) == PassResult(g, None, False)
    converted = CastBeforeFC(g).run()
    result = StripCasts()(converted)
    assert result.changed and [n.name for n in result.graph.nodes] == ["x", "w", "fc", "relu"]
    assert result.graph == g      # versions kept: the original comes back


def test_a_pass_is_not_blamed_for_what_its_input_broke_already():
    # MXNet accepts duplicate node names (a Gluon block can produce them): a pass keeps them
    g = small()
    nodes = list(g.nodes)
    nodes[3] = nodes[3]._replace(name="fc")
    given = Graph(tuple(nodes), g.heads)

    class Copies(GraphPass):
        name = "copies"

        def call(self, graph):
            return PassResult(CastBeforeFC(graph).run(), None, True)

    assert [n.name for n in Copies()(given).graph.nodes] == ["x", "w", "fc_in16", "fc", "fc"]


class _Wraps(GraphPass):
    """A pipeline step running a Rewriter (so a node's error comes from inside a pass)."""

    def __init__(self, rewriter, name):
        super().__init__()
        self.rewriter, self.name = rewriter, name

    def call(self, graph):
        new = self.rewriter(graph).run()
        return PassResult(new, None, new != graph)


def test_a_pipeline_runs_its_passes_in_order_each_on_the_last_ones_graph():
    g = small()
    run = run_passes(g, [_Wraps(CastBeforeFC, "cast_before_fc"), StripCasts()])
    results = run.results
    assert [r.changed for r in results] == [True, True] and run.changed
    assert [n.name for n in results[0].graph.nodes] == ["x", "w", "fc_in16", "fc", "relu"]
    assert results[1].graph == g and run.graph is results[1].graph
    assert run.names == ("cast_before_fc", "strip_casts") and run.result("strip_casts") is results[1]


def test_a_pipeline_error_names_the_pass_and_the_passes_before_it():
    from mxnet_amp.errors import ParamError
    import mxnet as mx
    import numpy as np
    from mxnet_amp.mx.io import graph_from_symbol
    from mxnet_amp.passes.fold_batchnorm import FoldBatchnorm
    conv = mx.sym.Convolution(mx.sym.var("x"), kernel=(1, 1), num_filter=4, no_bias=True, name="conv")
    g = graph_from_symbol(mx.sym.relu(mx.sym.BatchNorm(conv, fix_gamma=False, name="bn")))
    one = np.ones(4, dtype=np.float32)
    params = {"conv_weight": np.ones((4, 4, 1, 1), np.float32), "bn_gamma": one, "bn_beta": one,
              "bn_moving_mean": one, "bn_moving_var": -one}   # a negative variance: refused
    with pytest.raises(ParamError) as info:
        run_passes(g, [StripCasts(), FoldBatchnorm(params)])
    assert "moving_var" in str(info.value)      # the error's own words, its type kept
    assert "in pass fold_batchnorm, after [strip_casts]" in info.value.__notes__

    # any other exception: a PassNodeError naming the place, the original as its cause
    class Fails(GraphPass):
        name = "fails"

        def call(self, graph):
            raise KeyError("boom")
    with pytest.raises(PassNodeError) as err:
        run_passes(g, [StripCasts(), _Wraps(Rewriter, "copy"), Fails()])
    assert str(err.value).startswith("in pass fails, after [strip_casts, copy]: KeyError")
    assert isinstance(err.value.__cause__, KeyError)


def test_unchanged_means_the_input_graph_itself():
    """GraphPass enforces it for every pass: an equal copy said unchanged comes back as the
    input object, a graph returned as is says unchanged, and a different graph said
    unchanged is a PassNodeError naming the pass."""
    g = small()

    class Copies(GraphPass):
        name = "copies"

        def call(self, graph):
            return PassResult(Rewriter(graph).run(), None, False)

    class SaysChanged(GraphPass):
        name = "says_changed"

        def call(self, graph):
            return PassResult(graph, None, True)

    class Lies(GraphPass):
        name = "lies"

        def call(self, graph):
            return PassResult(StripCasts()(graph).graph, None, False)

    copied = Copies()(g)
    assert copied.graph is g and not copied.changed
    said = SaysChanged()(g)
    assert said.graph is g and not said.changed
    with pytest.raises(PassNodeError, match="pass lies says it changed nothing"):
        Lies()(CastBeforeFC(g).run())


def test_a_pass_in_a_list_reads_the_record_of_the_pass_before():
    """run_passes hands each pass the result before it (call_after): the only channel."""
    from mxnet_amp.passes.kernel import this_before_that
    g = small()

    class Counts(GraphPass):
        name = "counts"

        def call_after(self, previous):
            return PassResult(previous.graph, (previous.decided or 0) + 1, False)

    class Counts2(Counts):
        name = "counts2"
    run = run_passes(PassResult(g, 10, False), [Counts(), Counts2()],
                     [this_before_that("counts", "counts2")])
    assert [r.decided for r in run.results] == [11, 12] and run.graph is g and not run.changed
    from mxnet_amp.errors import PassOrderError
    with pytest.raises(PassOrderError, match="pass counts must run before pass counts2"):
        run_passes(g, [Counts2(), Counts()], [this_before_that("counts", "counts2")])


class CountFCs(GraphPass[int]):
    """A pass owning its loop: a cast before each FC, the count kept on the loop's state."""
    name = "count_fcs"
    names_new_nodes = True

    def call(self, graph):
        counts = [0]
        new = self.node_loop(graph, counts).run()
        return PassResult(new, counts[0], bool(counts[0]))

    def rewrite_node(self, loop, i, node):
        if node.op != "FullyConnected":
            return loop.copy(node)
        loop.state[0] += 1
        inputs = loop.inputs(node)
        cast = loop.emit(cast_node(loop.builder.fresh_name(node.name + "_in16"), inputs[0], "float16"))
        return loop.emit(node._replace(inputs=(Entry(cast),) + inputs[1:]))

    def loop_heads(self, loop):
        # the FC's output too: the heads hook sees the finished loop
        return [loop.entry(h) for h in loop.graph.heads] + [loop.entry(Entry(2))]


def test_a_pass_owns_its_loop_and_keeps_no_run_state():
    count = CountFCs()
    before = dict(vars(count))
    first, second = count(small()), count(small())
    assert first.decided == second.decided == 1 and first.graph == second.graph
    assert [n.name for n in first.graph.nodes] == ["x", "w", "fc_in16", "fc", "relu"]
    assert first.graph.heads == (Entry(4), Entry(3))
    assert vars(count) == before   # a run writes nothing on the pass
    # a node's error names the pass and the node, as a Rewriter subclass's does
    bad = Graph(small().nodes[:2] + (fc("fc", Entry(5)),), (Entry(2),))
    with pytest.raises(PassNodeError, match="in pass count_fcs, at node 2 'fc'"):
        count(bad)
