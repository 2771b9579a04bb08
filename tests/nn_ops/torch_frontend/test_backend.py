"""``torch.compile(module, backend="loopweave")``: results, recompiles, fallbacks and errors."""
import importlib.util
import warnings

import pytest

torch = pytest.importorskip("torch")
if importlib.util.find_spec("onnxscript") is None:
    pytest.skip("needs the torch extra (onnxscript, torch's ONNX exporter, is not installed)", allow_module_level=True)

import loopweave as lw  # noqa: E402
from loopweave.nn_ops.torch_frontend import backend  # noqa: E402


@pytest.fixture
def compiles(monkeypatch):
    """The list of networks loopweave compiled during the test (one entry per ``lw.compile``)."""
    torch._dynamo.reset()
    monkeypatch.setattr(backend, "_cache", type(backend._cache)())
    made = []
    real = backend._compile_model

    def counted(model, options, outputs):
        made.append(model)
        return real(model, options, outputs)

    monkeypatch.setattr(backend, "_compile_model", counted)
    yield made
    torch._dynamo.reset()


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.LayerNorm(64), torch.nn.GELU(),
                               torch.nn.Linear(64, 32), torch.nn.Softmax(-1)).eval()


def test_torch_finds_the_backend_by_its_entry_point():
    assert "loopweave" in torch._dynamo.list_backends(exclude_tags=())


def test_it_matches_eager_and_a_second_call_compiles_nothing(compiles):
    model, x = mlp(), torch.randn(4, 32)
    fast = torch.compile(model, backend="loopweave")
    with torch.no_grad():
        torch.testing.assert_close(fast(x), model(x), atol=1e-4, rtol=1e-4)
        y = torch.randn(4, 32)
        torch.testing.assert_close(fast(y), model(y), atol=1e-4, rtol=1e-4)
    assert len(compiles) == 1


def test_compiling_the_same_module_again_reuses_the_executable(compiles):
    model, x = mlp(), torch.randn(4, 32)
    with torch.no_grad():
        first = torch.compile(model, backend="loopweave")(x)
        torch._dynamo.reset()                    # dynamo traces again and calls the backend again
        second = torch.compile(model, backend="loopweave")(x)
    torch.testing.assert_close(first, second)
    assert len(compiles) == 1


def test_a_changed_weight_is_a_new_graph(compiles):
    model, x = mlp(), torch.randn(4, 32)
    with torch.no_grad():
        torch.compile(model, backend="loopweave")(x)
        model[0].weight.mul_(2)
        torch._dynamo.reset()
        torch.testing.assert_close(torch.compile(model, backend="loopweave")(x), model(x), atol=1e-4, rtol=1e-4)
    assert len(compiles) == 2


class WithDeterminant(torch.nn.Module):
    def forward(self, x):
        return torch.linalg.det(x) + 1


def test_an_unsupported_op_runs_eagerly_with_one_warning_naming_it(compiles):
    x = torch.randn(3, 3)
    fast = torch.compile(WithDeterminant(), backend="loopweave")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            torch.testing.assert_close(fast(x), torch.linalg.det(x) + 1)
    ours = [w for w in caught if issubclass(w.category, lw.EagerFallbackWarning)]
    assert len(ours) == 1 and "does not import Det" in str(ours[0].message)


def test_a_call_that_needs_gradients_runs_eagerly_with_one_warning(compiles):
    model, x = mlp(), torch.randn(4, 32)
    fast = torch.compile(model, backend="loopweave")
    with pytest.warns(lw.EagerFallbackWarning, match="while gradients are needed"):
        out = fast(x)
    out.sum().backward()
    assert model[0].weight.grad is not None and not compiles


def test_a_marked_dynamic_length_runs_every_length_from_one_compile(compiles):
    model = mlp()
    fast = torch.compile(model, backend="loopweave")
    with torch.no_grad():
        for t in (5, 9, 13):
            x = torch.randn(2, t, 32)
            torch._dynamo.mark_dynamic(x, 1)
            torch.testing.assert_close(fast(x), model(x), atol=1e-4, rtol=1e-4)
    assert len(compiles) == 1
    (graph,) = backend._cache.values()
    assert graph.compiles == 1 and graph.plan.dynamic


class Attention(torch.nn.Module):
    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads, self.norm, self.qkv = heads, torch.nn.LayerNorm(d), torch.nn.Linear(d, 3 * d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for z in self.qkv(self.norm(x)).split(d, -1))
        return (torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, -1) @ v).transpose(1, 2)


def test_dynamic_true_runs_batches_and_lengths_from_one_compile(compiles):
    torch.manual_seed(0)
    model = Attention().eval()
    fast = torch.compile(model, backend="loopweave", dynamic=True)
    with torch.no_grad():
        for b, t in ((2, 5), (3, 9)):
            x = torch.randn(b, t, 32)
            torch.testing.assert_close(fast(x), model(x), atol=1e-4, rtol=1e-4)
    assert len(compiles) == 1
    (graph,) = backend._cache.values()
    assert graph.compiles == 1 and [sorted(dims) for dims in graph.plan.symbolic] == [[0, 1]]


def test_tensors_on_another_device_run_eagerly_with_a_warning_naming_it(compiles):
    model = torch.nn.Linear(4, 4).to("meta")
    with pytest.warns(lw.EagerFallbackWarning, match="device 'meta'"):
        out = torch.compile(model, backend="loopweave")(torch.empty(2, 4, device="meta"))
    assert out.device.type == "meta" and not compiles


def test_options_reach_the_compiler_and_unknown_ones_are_refused(compiles):
    model, x = mlp(), torch.randn(4, 32)
    with torch.no_grad():
        torch.compile(model, backend="loopweave", options={"target": "llvm"})(x)
    assert len(compiles) == 1
    torch._dynamo.reset()
    with pytest.raises(Exception, match="unknown option.*'threads'"):
        torch.compile(model, backend="loopweave", options={"threads": 2})(x)
