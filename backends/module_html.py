"""What Jupyter shows for a compiled module: its signature, then its sources, collapsed.

``module`` is read through its attributes (``name``, ``params``, ``target``,
``get_source``, optionally ``html_sources``), so the CPU module (``runtime.Module``)
and the CUDA one (``cuda/module.py``) share it.  Sources are fetched when the HTML is
built; the assembly is generated then, once per display.
"""
from __future__ import annotations

import html

from ..dsl.html_markup import MONO, PRE, STYLE, box, highlight_code, span

MAX_HTML_SOURCE = 200_000


def _source_pre(text: str, fmt: str, highlight: bool) -> str:
    note = ""
    if len(text) > MAX_HTML_SOURCE:
        note = (f'<div style="color:#6e7781;font-size:12px">first {MAX_HTML_SOURCE:,} of {len(text):,} characters; '
                f"the rest: <code>f.get_source({fmt!r})</code></div>")
        text = text[:MAX_HTML_SOURCE]
    body = highlight_code(text) if highlight else html.escape(text)
    return f"{note}{PRE}{body}</pre>"


def module_html(module) -> str:
    """A compiled module: its signature, then the lowered IR, LLVM IR and assembly (or the sources
    its ``html_sources`` names), each collapsed; a source that fails to generate shows its error."""
    e = html.escape
    params = ", ".join(f"<b>{e(p.name)}</b>: {e(p.dtype)}[{e(', '.join(str(s) for s in p.shape))}]"
                       + (' <span style="color:#6e7781">(out)</span>' if p.is_output else "")
                       for p in module.params)
    signature = (f'<div style="{MONO};font-size:13px">{span(STYLE["def"], e(module.name))}({params})</div>'
                 f'<div style="color:#6e7781;font-size:12px">compiled for {e(str(module.target))}</div>')
    sections = []
    kinds = getattr(module, "html_sources", (("lowered", "lowered IR", True), ("ll", "LLVM IR", False),
                                             ("asm", "assembly", False)))
    for fmt, title, highlight in kinds:
        try:
            text = module.get_source(fmt)
        except Exception as exc:  # a missing or failing source must not break the display
            body = f'<div style="color:#cf222e">{e(type(exc).__name__)}: {e(str(exc))}</div>'
            lines = ""
        else:
            body = _source_pre(text, fmt, highlight)
            lines = f" ({text.count(chr(10)) + 1:,} lines)"
        sections.append(f"<details><summary>{e(title)}{lines}</summary>{body}</details>")
    return box(signature + "".join(sections), "loopweave module")
