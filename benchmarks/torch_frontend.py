"""``torch.compile(model, backend="loopweave")`` against eager torch, on the CPU.

``python -m benchmarks.torch_frontend [--threads 2] [--pairs 15] [--models resnet18 mobilenet_v2 bert]``

Three models written in plain torch (no torchvision needed), in eval mode with seeded weights:
a ResNet-18 (torchvision's layout, batch 1 x 3 x 224 x 224), a MobileNetV2 (inverted residuals,
ReLU6, 1 x 3 x 224 x 224) and a BERT-style encoder (hidden 256, 4 heads, 4 layers, FFN 1024, GELU,
batch 1 x seq 128).  For each: the first call of the compiled module (export, import, compile; the
kernel cache may hold kernels from an earlier run, printed as "compile"), its largest difference
from eager torch, then single calls of each alternately under ``torch.no_grad`` with both on
``--threads`` threads (``torch.set_num_threads`` and loopweave's pool): the median times and the
median of per-pair ratios (``backends/timing.py::interleaved``; > 1 means loopweave is faster).
"""
from __future__ import annotations

import argparse
import platform
import time

import torch
from torch import nn

from loopweave.backends.timing import interleaved, set_threads


def conv_bn(cin, cout, k, stride=1, groups=1, act=nn.ReLU):
    layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, act()) if act else nn.Sequential(*layers)


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.body = nn.Sequential(conv_bn(cin, cout, 3, stride), conv_bn(cout, cout, 3, act=None))
        self.skip = conv_bn(cin, cout, 1, stride, act=None) if stride != 1 or cin != cout else nn.Identity()

    def forward(self, x):
        return torch.relu(self.body(x) + self.skip(x))


def resnet18(classes=1000):
    layers, cin = [conv_bn(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1)], 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
        cin = cout
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, classes))


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hidden = cin * expand
        layers = [conv_bn(cin, hidden, 1, act=nn.ReLU6)] if expand != 1 else []
        layers += [conv_bn(hidden, hidden, 3, stride, groups=hidden, act=nn.ReLU6), conv_bn(hidden, cout, 1, act=None)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.body(x) if self.residual else self.body(x)


def mobilenet_v2(classes=1000):
    layers, cin = [conv_bn(3, 32, 3, 2, act=nn.ReLU6)], 32
    for expand, cout, repeats, stride in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                                          (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)):
        for i in range(repeats):
            layers.append(InvertedResidual(cin, cout, stride if i == 0 else 1, expand))
            cin = cout
    layers += [conv_bn(cin, 1280, 1, act=nn.ReLU6), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(1280, classes)]
    return nn.Sequential(*layers)


class EncoderLayer(nn.Module):
    def __init__(self, d, heads, ffn):
        super().__init__()
        self.heads = heads
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.up, self.down = nn.Linear(d, ffn), nn.Linear(ffn, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for z in self.qkv(x).split(d, -1))
        att = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, -1) @ v
        x = self.norm1(x + self.out(att.transpose(1, 2).reshape(b, t, d)))
        return self.norm2(x + self.down(nn.functional.gelu(self.up(x))))


def bert(d=256, heads=4, layers=4, ffn=1024):
    return nn.Sequential(*[EncoderLayer(d, heads, ffn) for _ in range(layers)])


MODELS = {"resnet18": (resnet18, (1, 3, 224, 224)), "mobilenet_v2": (mobilenet_v2, (1, 3, 224, 224)),
          "bert": (bert, (1, 128, 256))}


def seeded(make):
    """``make()`` in eval mode, weights and batch-norm statistics from seed 0."""
    torch.manual_seed(0)
    model = make()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.2, 0.2)
            m.running_var.uniform_(0.5, 1.5)
    return model.eval()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--pairs", type=int, default=15)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    set_threads(args.threads)
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, {args.threads} threads, "
          f"{args.pairs} interleaved pairs")
    print(f"{'model':<14} {'compile s':>9} {'max |diff|':>10} {'ours ms':>9} {'eager ms':>9} {'eager/ours':>10}")
    for name in args.models:
        make, shape = MODELS[name]
        model = seeded(make)
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            compiled = torch.compile(model, backend="loopweave")
            start = time.perf_counter()
            got = compiled(x)
            compile_s = time.perf_counter() - start
            diff = (got - model(x)).abs().max().item()
            result = interleaved(lambda: compiled(x), lambda: model(x), pairs=args.pairs)
        print(f"{name:<14} {compile_s:9.1f} {diff:10.2e} {result.ours_s * 1e3:9.3f} {result.theirs_s * 1e3:9.3f} "
              f"{result.ratio:10.2f}")


if __name__ == "__main__":
    main()
