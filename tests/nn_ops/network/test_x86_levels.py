"""Networks built for each x86 level (x86-64-v2: SSE4.2 only, -v3: AVX2 and FMA, -v4: AVX-512) compute what
the host's build computes: layouts, register blocks, Winograd and the int8 products follow the level's
vector width and instructions, and each level this CPU runs is run here."""
import numpy as np
import pytest

import loopweave as lw
from loopweave.nn_ops.testing import model_zoo
from loopweave.target import host_target, resolve_target

pytestmark = [pytest.mark.skipif(host_target().arch != "x86_64", reason="x86 levels need an x86 CPU"),
              pytest.mark.vector_width]

LEVELS = ["llvm -mcpu=x86-64-v2", "llvm -mcpu=x86-64-v3", "llvm -mcpu=x86-64-v4"]
MODELS = {"squeezenet1_1": model_zoo.SMALL["squeezenet1_1"], "transformer_encoder": {"layers": 1, "seq": 16}}


@pytest.fixture(scope="module", params=sorted(MODELS))
def network(request):
    model = getattr(model_zoo, request.param)(**MODELS[request.param])
    graph = lw.from_onnx(model)
    feed = {n: np.random.default_rng(0).standard_normal(s).astype(d) for n, s, d in
            lw.compile(graph, progress=False).inputs}
    return graph, feed, lw.compile(graph, progress=False).run(feed)


@pytest.mark.parametrize("level", LEVELS)
def test_each_level_computes_what_the_host_build_does(network, level):
    graph, feed, want = network
    target = resolve_target(level)
    exe = lw.compile(graph, target=target, progress=False)
    assert exe.target.vector_bits == {"x86-64-v2": 128, "x86-64-v3": 256, "x86-64-v4": 512}[target.cpu]
    if not target.runs_here():
        pytest.skip(f"this CPU cannot run {target.cpu} code (it was compiled)")
    for got, ref in zip(exe.run(feed), want):
        np.testing.assert_allclose(got, ref, rtol=2e-4, atol=2e-4 * float(np.abs(ref).max()))
