"""fuse_operators: a batched matmul takes in the transposes (and reshapes) that make its operands; over
symbolic sizes, up to a reshape whose index would divide by a run-time size (the kernel reads that
reshape's source in memory)."""
from loopweave.nn_ops.network import symbolic as S
from loopweave.nn_ops.network.graph import Graph
from loopweave.nn_ops.network.passes import fuse_operators


def _attention_scores(rows, batch, seq, flat_first=False):
    """q, k [rows, 32] -> [batch, seq, 2, 16] -> heads first -> [2 batch, seq, 16] and [2 batch, 16, seq]; q k^T.
    ``flat_first``: q and k are seen as [rows, 2, 16] first."""
    g = Graph("scores")
    g.inputs, g.outputs = ["q", "k"], ["s"]
    for x, perm, last in (("q", (0, 2, 1, 3), (seq, 16)), ("k", (0, 2, 3, 1), (16, seq))):
        g.add_value(x, (rows, 32))
        g.add_value(x + ".r", (batch, seq, 2, 16))
        g.add_value(x + ".t", (batch, 2) + last)
        g.add_value(x + ".h", (2 * batch,) + last)
        if flat_first:
            g.add_value(x + ".f", (rows, 2, 16))
            g.add_node("reshape", [x], [x + ".f"], {"shape": (rows, 2, 16)})
        g.add_node("reshape", [x + ".f" if flat_first else x], [x + ".r"], {"shape": (batch, seq, 2, 16)})
        g.add_node("transpose", [x + ".r"], [x + ".t"], {"perm": perm})
        g.add_node("reshape", [x + ".t"], [x + ".h"], {"shape": (2 * batch,) + last})
    g.add_value("s", (2 * batch, seq, seq))
    g.add_node("matmul", ["q.h", "k.h"], ["s"])
    return g


def _matmul_group(groups):
    (grp,) = [grp for grp in groups if grp.nodes[-1].op_type == "matmul"]
    return [n.op_type for n in grp.nodes]


def test_static_head_splits_join_the_matmul():
    ops = _matmul_group(fuse_operators(_attention_scores(6, 2, 3)))
    assert ops.count("transpose") == 2 and ops.count("reshape") == 4


def test_symbolic_head_splits_join_the_matmul():
    """The head merge [batch, 2, seq, 16] -> [2 batch, seq, 16] takes its index apart by 2; the split of
    batch*seq rows would divide by seq, so it is the chain's first node (the kernel's view of q, k)."""
    b, s = S.symbol("batch"), S.symbol("seq")
    groups = fuse_operators(_attention_scores(b * s, b, s))
    assert _matmul_group(groups).count("transpose") == 2 and _matmul_group(groups).count("reshape") == 4
    assert not any([n.op_type for n in grp.nodes] == ["transpose"] for grp in groups)


def test_a_symbolic_reshape_dividing_by_a_run_time_size_ends_the_chain():
    b, s = S.symbol("batch"), S.symbol("seq")
    groups = fuse_operators(_attention_scores(b * s, b, s, flat_first=True))
    (grp,) = [grp for grp in groups if grp.nodes[-1].op_type == "matmul"]
    assert [n.op_type for n in grp.nodes].count("reshape") == 4 and set(grp.inputs) == {"q.f", "k.f"}
    # static sizes: the whole chain joins
    assert _matmul_group(fuse_operators(_attention_scores(6, 2, 3, flat_first=True))).count("reshape") == 6
