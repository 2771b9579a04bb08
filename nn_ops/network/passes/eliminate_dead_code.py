"""eliminate_dead_code: drop nodes whose outputs no graph output depends on, and unused initializers."""
from __future__ import annotations

from ..graph import Graph


def eliminate_dead_code(g: Graph) -> Graph:
    live = set(g.outputs)
    kept = []
    for node in reversed(g.nodes):
        if any(o in live for o in node.outputs):
            kept.append(node)
            live.update(node.inputs)
    g.nodes = list(reversed(kept))
    g.initializers = {k: v for k, v in g.initializers.items() if k in live}
    used = live | set(g.inputs) | {o for n in g.nodes for o in n.outputs}
    g.values = {k: v for k, v in g.values.items() if k in used}
    return g
