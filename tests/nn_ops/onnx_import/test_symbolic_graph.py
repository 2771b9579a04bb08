"""symbolic_graph: a DynamicGraph as one Graph whose sizes and size attributes are sympy sizes,
solved from static imports at probe sizes."""
from types import SimpleNamespace

import pytest

import loopweave as lw
from loopweave.errors import OnnxImportError
from loopweave.nn_ops.network import symbolic as S
from loopweave.nn_ops.onnx_import.symbolic_graph import LARGE_PROBES, PROBES, _Solver, symbolic_graph
from loopweave.nn_ops.testing import model_zoo

B, T = S.symbol("batch"), S.symbol("seq")


@pytest.fixture(scope="module")
def encoder_graph():
    dynamic = lw.from_onnx(model_zoo.transformer_encoder(batch=None, seq=None, hidden=32, heads=2, layers=1, ffn=64))
    return dynamic, symbolic_graph(dynamic)


def test_shapes_and_reshape_targets_are_symbolic(encoder_graph):
    dynamic, g = encoder_graph
    assert g.values["input"].shape == (B, T, 32)
    assert g.values[g.outputs[0]].shape == (B, T, 32)
    targets = {tuple(n.attrs["shape"]) for n in g.nodes if n.op_type == "reshape"}
    assert (B * T, 32) in targets and (B, T, 2, 16) in targets and (2 * B, T, 16) in targets
    for name, value in g.values.items():     # the ONNX values keep symbolic inference's sizes
        if name in dynamic.shapes.shapes and name not in g.initializers:
            assert value.shape == tuple(dynamic.shapes.shapes[name])
    assert all(type(d) is int for v in g.values.values() for d in v.shape if S.is_static(d))   # static: ints
    g.check()


def test_only_constants_the_nodes_read_are_kept(encoder_graph):
    _, g = encoder_graph
    read = {i for n in g.nodes for i in n.inputs}
    assert g.initializers and set(g.initializers) <= read      # the Shape chain's values are gone


def _solver(known=None):
    symbols = ["batch", "seq"]
    bindings = [dict(zip(symbols, primes)) for primes in PROBES]
    dynamic = SimpleNamespace(name="m", shapes=SimpleNamespace(shapes=known or {}))
    return _Solver(dynamic, symbols, bindings, []), bindings


@pytest.mark.parametrize("size", [B * T, 2 * B, 6 * T ** 2, B * T * 32, T, S.dim(7)])
def test_products_of_the_symbols_are_solved(size):
    solver, bindings = _solver()
    assert solver.size([int(S.evaluate(size, b)) for b in bindings], "x") == size


def test_a_size_that_is_no_product_is_refused():
    solver, bindings = _solver()
    with pytest.raises(OnnxImportError, match="no product of the symbols"):
        solver.size([b["seq"] + 1 for b in bindings], "dimension 0 of 'x'")


def test_a_size_that_follows_parity_is_refused():
    """Odd at both prime probes, so equal there: the even probe shows it is no constant."""
    solver, bindings = _solver()
    with pytest.raises(OnnxImportError, match="no product of the symbols"):
        solver.size([b["seq"] % 2 + 5 for b in bindings], "attribute 'pads'")


def test_a_constant_computed_from_the_sizes_is_refused():
    """Cast(Shape(x)) folds at import to a constant holding the batch: no one graph has it."""
    from loopweave.nn_ops.testing.onnx_builder import OnnxBuilder
    b = OnnxBuilder(opset=17)
    sizes = b.node("Cast", [b.node("Shape", ["input"])], to=1)
    dynamic = lw.from_onnx(b.model(("batch", 2), b.node("Add", ["input", sizes]), ("batch", 2)))
    with pytest.raises(OnnxImportError, match="is computed from the sizes"):
        symbolic_graph(dynamic)


def test_a_constant_broadcast_along_the_sizes_is_an_expand_of_one_copy():
    """ConstantOfShape(Shape(x)) folds at import to zeros as large as x: an ``expand`` of one row."""
    from loopweave.nn_ops.testing.onnx_builder import OnnxBuilder
    b = OnnxBuilder(opset=17)
    zeros = b.node("ConstantOfShape", [b.node("Shape", ["input"])])
    g = symbolic_graph(lw.from_onnx(b.model(("batch", 8), b.node("Add", ["input", zeros]), ("batch", 8))))
    expand = g.nodes[0]
    assert expand.op_type == "expand" and expand.attrs["shape"] == (B, 8)
    assert g.initializers[expand.inputs[0]].shape == (1, 8)


def test_a_size_the_shape_inference_names_is_taken_where_the_probes_agree():
    """A strided conv's ``floor((seq - 1)/2) + 1`` is no product of the symbols; the importer's own
    values (a decomposed batch norm's) of that size take the shape inference's expression."""
    convolved = S.floordiv(T - 1, 2) + 1
    solver, bindings = _solver({"conv": (B, 16, convolved)})
    assert solver.size([int(S.evaluate(convolved, b)) for b in bindings], "x") == convolved
    with pytest.raises(OnnxImportError, match="nor a size the shape inference names"):
        solver.size([b["seq"] // 2 for b in bindings], "x")


def test_an_importers_value_of_a_named_shape_takes_it_whole():
    """A size deep in a network can be one number at every probe (here 3): where a value the shape
    inference names has the same shape at every probe, the importer's own value takes that shape."""
    deep = S.floordiv(T, 64) + 3
    solver, bindings = _solver({"bn": (B, 16, deep)})
    shapes = [(b["batch"], 16, 3) for b in bindings]
    assert solver.shape("bn.mul", shapes) == (B, 16, deep)
    assert solver.shape("other", [(b["batch"], 8, 3) for b in bindings]) == (B, 8, 3)


def test_an_image_cnn_has_sizes_of_its_height_and_width():
    """SqueezeNet's last pool refuses maps of the first probes' sizes: the larger probes solve it."""
    dynamic = lw.from_onnx(model_zoo.symbolic_sizes(model_zoo.squeezenet1_1(size=64, classes=10)))
    assert any(not check.holds(dict(zip(["H", "N", "W"], PROBES[0]))) for check in dynamic.signature.checks)
    assert all(check.holds(dict(zip(["H", "N", "W"], p))) for check in dynamic.signature.checks
               for p in LARGE_PROBES[0])
    g = symbolic_graph(dynamic)
    H, W = S.symbol("H"), S.symbol("W")
    for name, value in g.values.items():
        if name in dynamic.shapes.shapes and name not in g.initializers:
            assert value.shape == tuple(dynamic.shapes.shapes[name])
    assert g.values[g.outputs[0]].shape == (S.symbol("N"), 10)
    assert g.values[g.nodes[0].outputs[0]].shape[2:] == (S.floordiv(H - 3, 2) + 1, S.floordiv(W - 3, 2) + 1)
    assert all(d.free_symbols <= {S.symbol("N"), H, W} for v in g.values.values() for d in v.shape
               if not S.is_static(d))


def test_a_unet_is_probed_at_multiples_its_checks_accept_and_its_skip_sizes_are_one():
    """A U-Net's skip concats check ``H`` equal to ``2*(H//2)`` and ``H//2`` to ``2*((H//2)//2)``: the
    prime probes are refused, so they are scaled by 4 (each other remainder refused too), and each
    checked size is written as the multiple of the deepest, so a concat's operands have one size."""
    dynamic = lw.from_onnx(model_zoo.symbolic_sizes(model_zoo.unet(size=16, base=8, depth=2)))
    assert any(not check.holds(dict(zip(["H", "N", "W"], PROBES[0]))) for check in dynamic.signature.checks)
    g = symbolic_graph(dynamic)
    H, W = S.symbol("H"), S.symbol("W")
    deepest = S.floordiv(S.floordiv(H, 2), 2), S.floordiv(S.floordiv(W, 2), 2)
    assert g.values["input"].shape == (S.symbol("N"), 3, 4 * deepest[0], 4 * deepest[1])
    for concat in (n for n in g.nodes if n.op_type == "concat"):
        shapes = {g.values[i].shape[2:] for i in concat.inputs}
        assert len(shapes) == 1 and next(iter(shapes)) in {(2 * deepest[0], 2 * deepest[1]),
                                                           (4 * deepest[0], 4 * deepest[1])}


def test_a_product_of_named_sizes_is_solved():
    """A layer norm's rows over an NHWC map, ``batch * (seq - 1)//2 + 1``: no product of the symbols,
    a product of a symbol and a size the shape inference names."""
    convolved = S.floordiv(T - 1, 2) + 1
    solver, bindings = _solver({"conv": (B, 16, convolved)})
    assert solver.size([int(S.evaluate(3 * B * convolved, b)) for b in bindings], "x") == 3 * B * convolved
    with pytest.raises(OnnxImportError, match="no product of the symbols"):
        solver.size([int(S.evaluate(B * convolved + 1, b)) for b in bindings], "x")


def test_a_nearest_upsamplings_index_tables_are_computed_per_binding():
    """The style-transfer net's 2x up-samplings read index tables ``o // 2`` as long as the map: inputs
    computed from each binding, not constants (which would be refused as computed from the sizes)."""
    dynamic = lw.from_onnx(model_zoo.symbolic_sizes(model_zoo.style_transfer(size=16, base=8, residuals=1)))
    g = symbolic_graph(dynamic)
    assert len(g.binding_tables) == 4 and set(g.binding_tables) <= set(g.inputs)
    for name, table in g.binding_tables.items():
        binding = {"N": 2, "H": 20, "W": 12}
        rows = int(S.evaluate(g.values[name].shape[0], binding))
        assert rows in (10, 6, 20, 12)
        assert table.at(binding).tolist() == [[o // 2] for o in range(rows)]


def test_a_min_a_broadcast_check_takes_only_where_it_is_the_size_is_that_size():
    """GPT-2's mask ``[:min(1024, seq)]`` beside scores of ``seq``: equal where the check holds; not so
    where the check lets them differ."""
    import sympy
    from loopweave.nn_ops.onnx_import.symbolic_graph import _bounded_where_checked
    bounded = sympy.Min(1024, T)
    check = sympy.Eq(T, 1) | sympy.Eq(bounded, 1) | sympy.Eq(bounded, T)
    assert _bounded_where_checked(check) == (bounded, (1, T))
    assert _bounded_where_checked(sympy.Eq(bounded, T) | (T > 3)) is None
    assert _bounded_where_checked(sympy.Eq(sympy.Min(1, T), T) | sympy.Eq(T, 1)) is None
