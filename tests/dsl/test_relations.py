"""dsl/relations.py: where a ``tail="shift"`` split moves its last tile inwards."""
import loopweave as lw
from loopweave.dsl.expr import Var, binary, const
from loopweave.dsl.relations import Split, needs_guard, root_values, shifts


def _split(parent_extent, factor=7):
    parent, outer, inner = object(), object(), object()
    rel = Split(parent, outer, inner, const(factor), None, "shift")
    extents = {parent: parent_extent, outer: binary("floordiv", binary("add", parent_extent, const(factor - 1)),
                                                    const(factor)), inner: const(factor)}
    return rel, extents


def test_a_run_time_extent_of_at_least_a_tile_shifts_its_last_tile():
    v = lw.var("V")
    tiles = binary("floordiv", binary("add", v, const(14)), const(2))      # (V + 13 + 1) // 2 >= 7
    rel, extents = _split(tiles)
    assert shifts(rel, extents) and not needs_guard(rel, extents)
    xo, xi = Var("xo"), Var("xi")
    start = root_values({rel.outer: xo, rel.inner: xi}, [rel], extents)[rel.parent]
    assert "min(" in str(start)


def test_an_extent_that_may_be_less_than_a_tile_keeps_its_guard():
    v = lw.var("V")
    for extent in (binary("floordiv", binary("add", v, const(12)), const(2)),       # 6 at V = 0
                   binary("sub", const(20), v), const(5)):                        # shrinks as V grows
        rel, extents = _split(extent)
        assert not shifts(rel, extents) and needs_guard(rel, extents)


def test_a_let_bound_extent_is_read_through_its_value():
    v, region = lw.var("V"), Var("region.extent")
    rel, extents = _split(region)
    assert not shifts(rel, extents)
    assert shifts(rel, extents, {region: binary("add", v, const(7))})
