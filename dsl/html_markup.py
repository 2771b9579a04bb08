"""The pieces every HTML form is built from: code highlighting, badges, boxes, inline styles.

Jupyter shows tensors, stages, schedules, lowered functions and compiled modules as
HTML (``_repr_html_``); their printers (``dsl/printer_html.py``,
``lowering/printer.py``, ``backends/module_html.py``) share these so they look alike.
Inline styles only (no ``<style>`` blocks): notebook front ends and GitHub's renderer
keep them.  Colours are mid-tones that stay readable on light and dark themes.
"""
from __future__ import annotations

import html
import re
from typing import List

MONO = "font-family:SFMono-Regular,Menlo,Consolas,'Liberation Mono',monospace"
PRE = f'<pre style="{MONO};font-size:12px;line-height:1.4;margin:4px 0;white-space:pre;overflow-x:auto">'
KIND_COLOR = {"parallel": "#2da44e", "vectorized": "#1f6feb", "unrolled": "#bf8700", "thread": "#8250df",
              "bound": "#8250df", "pragma": "#6e7781"}
STYLE = {
    "comment": "color:#6e7781;font-style:italic",
    "keyword": "color:#cf222e;font-weight:bold",
    "number": "color:#0969da",
    "string": "color:#0a7d4f",
    "call": "color:#8250df",
    "def": "color:#953800;font-weight:bold",
}
_KEYWORD_SET = {"def", "for", "in", "if", "else", "pass", "and", "or", "not", "let", "return"}
_TOKEN = re.compile(r"""(?P<comment>\#[^\n]*)
                      |(?P<string>'[^'\n]*'|"[^"\n]*")
                      |(?P<number>(?<![\w.])\d+(?:\.\d+)?(?:e[+-]?\d+)?(?![\w]))
                      |(?P<word>[A-Za-z_][\w.]*)(?P<paren>\s*\()?
                      """, re.VERBOSE)


def span(style: str, text: str) -> str:
    return f'<span style="{style}">{text}</span>'


def badge(text: str, kind: str) -> str:
    """A rounded label coloured by loop kind (``parallel``, ``vectorized``, ...)."""
    color = KIND_COLOR.get(kind, "#6e7781")
    return (f'<span style="border:1px solid {color};color:{color};border-radius:8px;padding:0 6px;'
            f'font-size:11px;white-space:nowrap">{html.escape(text)}</span>')


def _comment_html(text: str) -> str:
    """A ``# parallel``-style comment: loop kinds become coloured, the rest stays grey."""
    body = text[1:].strip()
    first = re.split(r"[\s,=]", body, maxsplit=1)[0]
    if first in KIND_COLOR:
        color = KIND_COLOR[first]
        return span(f"color:{color};font-weight:bold", html.escape(text))
    return span(STYLE["comment"], html.escape(text))


def highlight_code(text: str) -> str:
    """Loop code (the text form of the IR, a schedule, a trace) as highlighted HTML spans.

    One pass over the raw text: every token is escaped once, so ``<`` in a condition
    stays ``&lt;`` and nothing inside a comment or string gets highlighted twice.
    """
    out: List[str] = []
    pos = 0
    previous_word = ""
    for m in _TOKEN.finditer(text):
        out.append(html.escape(text[pos:m.start()]))
        pos = m.end()
        if m.group("comment"):
            out.append(_comment_html(m.group("comment")))
        elif m.group("string"):
            out.append(span(STYLE["string"], html.escape(m.group("string"))))
        elif m.group("number"):
            out.append(span(STYLE["number"], m.group("number")))
        else:
            word, paren = m.group("word"), m.group("paren") or ""
            if word in _KEYWORD_SET:
                out.append(span(STYLE["keyword"], word) + html.escape(paren))
            elif previous_word == "def":
                out.append(span(STYLE["def"], html.escape(word)) + html.escape(paren))
            elif paren:
                out.append(span(STYLE["call"], html.escape(word)) + html.escape(paren))
            else:
                out.append(html.escape(word))
            previous_word = word
            continue
        previous_word = ""
    out.append(html.escape(text[pos:]))
    return "".join(out)


def highlight_python(text: str) -> str:
    """``text`` highlighted, in a ``<pre>`` block."""
    return f"{PRE}{highlight_code(text)}</pre>"


def box(inner: str, title: str = "") -> str:
    """``inner`` framed by a grey left rule, under an optional bold ``title``."""
    head = (f'<div style="font-weight:bold;margin-bottom:4px">{title}</div>' if title else "")
    return (f'<div style="border-left:3px solid #8c959f;padding:2px 0 2px 10px;margin:4px 0">'
            f"{head}{inner}</div>")
