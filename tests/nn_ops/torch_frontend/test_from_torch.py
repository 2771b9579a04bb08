"""``lw.from_torch``: torch modules as loopweave graphs, checked against eager torch."""
import importlib.util
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if importlib.util.find_spec("onnxscript") is None:
    pytest.skip("needs the torch extra (onnxscript, torch's ONNX exporter, is not installed)", allow_module_level=True)

import loopweave as lw  # noqa: E402


class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        x = torch.nn.functional.max_pool2d(torch.relu(self.bn(self.conv1(x))), 2)
        return self.fc(torch.relu(self.conv2(x)).mean((2, 3)))


class AttentionBlock(torch.nn.Module):
    """A pre-norm transformer block: LayerNorm, softmax attention over heads, a GELU MLP."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.out = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.up, self.down = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for z in self.qkv(self.norm1(x)).split(d, -1))
        att = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, -1) @ v
        x = x + self.out(att.transpose(1, 2).reshape(b, t, d))
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm2(x))))


def _randomised(module):
    """``module`` in eval mode with non-trivial batch-norm statistics."""
    torch.manual_seed(0)
    for m in module.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
    return module.eval()


def _run(module, x, **kwargs):
    graph = lw.from_torch(module, (x,), **kwargs)
    return graph, lw.compile(graph)


def test_a_small_cnn_matches_eager(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model, x = _randomised(SmallCNN()), torch.randn(2, 3, 16, 16)
    graph, exe = _run(model, x)
    assert isinstance(graph, lw.nn_ops.Graph)
    got = exe.run({"x": x.numpy()})[0]
    np.testing.assert_allclose(got, model(x).detach().numpy(), atol=1e-4, rtol=1e-4)
    assert os.listdir(tmp_path) == []                   # exported in memory, no file left behind
    assert list(graph.inputs) == ["x"]                  # parameters and buffers are constants


def test_a_transformer_block_matches_eager():
    model, x = _randomised(AttentionBlock()), torch.randn(2, 8, 32)
    _, exe = _run(model, x)
    np.testing.assert_allclose(exe.run({"x": x.numpy()})[0], model(x).detach().numpy(), atol=1e-4, rtol=1e-4)


def test_a_dynamic_sequence_length_compiles_once_for_every_length():
    model = _randomised(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32),
                                            torch.nn.Softmax(-1)))
    graph, exe = _run(model, torch.randn(2, 5, 32), dynamic_shapes=({1: torch.export.Dim("seq")},))
    assert type(graph).__name__ == "DynamicGraph"
    assert type(exe).__name__ == "PolymorphicExecutable"
    for t in (5, 11):
        x = torch.randn(2, t, 32)
        np.testing.assert_allclose(exe.run({"input": x.numpy()})[0], model(x).detach().numpy(), atol=1e-4)


class DataDependent(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x - 1


def test_data_dependent_control_flow_is_an_error_naming_the_cause():
    with pytest.raises(lw.TorchExportError, match=r"cannot export DataDependent to a graph: "
                                                 r"GuardOnDataDependentSymNode: Could not guard on data-dependent"):
        lw.from_torch(DataDependent(), (torch.randn(4),))


def test_a_tensor_on_another_device_is_refused_naming_it():
    with pytest.raises(lw.ArgumentError, match="device 'meta'"):
        lw.from_torch(torch.nn.Linear(4, 4), (torch.empty(2, 4, device="meta"),))


def test_only_modules_are_taken():
    with pytest.raises(lw.ArgumentError, match="takes a torch.nn.Module, got function"):
        lw.from_torch(lambda x: x, (torch.randn(2),))
