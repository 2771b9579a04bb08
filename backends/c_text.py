"""Text from a model or a user placed in generated C, only in forms that cannot become code.

Value names, kernel names, CPU names, file names and prefixes come from ONNX files, ``.lwx`` files
and arguments: any of them may hold a comment terminator, a newline followed by ``#define``, a quote
or a backslash.  Generated C takes such text only through these functions:

* ``c_string(text)``: a C string literal (printable ASCII kept; quotes, backslashes, ``?`` and every
  other byte escaped in octal), for tables the library returns at run time.
* ``c_comment(text)``: text safe inside ``/* ... */`` whatever stands around it (printable ASCII kept;
  a backslash doubled, control and non-ASCII characters as ``\\xNN`` / ``\\uNNNN``; the ``/`` of ``*/``
  and the ``*`` of ``/*`` as ``\\x2f`` / ``\\x2a``, and a ``/`` or ``*`` at either end the same way).
* ``c_identifier(text, what)``: ``text`` itself when it is an ASCII C identifier, else an
  ``ArgumentError`` naming ``what``.
* ``c_include_name(name, what)``: a file name that ``#include "..."`` takes literally (no quote,
  backslash, control character), else an ``ArgumentError``.
"""
from __future__ import annotations

import re

from ..errors import ArgumentError

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def c_string(text: str) -> str:
    """A C string literal of ``text`` (UTF-8; anything but printable ASCII as octal escapes)."""
    out = []
    for byte in text.encode("utf-8", "surrogatepass"):
        ch = chr(byte)
        if ch in '"\\?':
            out.append("\\" + ch)
        elif 32 <= byte < 127:
            out.append(ch)
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def c_comment(text: str) -> str:
    """``text`` as it may stand inside a C block comment: it can neither end the comment nor open
    another, and holds nothing but printable ASCII (so no line break either)."""
    out = []
    for ch in str(text):
        code = ord(ch)
        if ch == "\\":
            piece = "\\\\"
        elif code < 32 or code == 127:
            piece = f"\\x{code:02x}"
        elif code >= 128:
            piece = f"\\x{code:02x}" if code < 256 else (f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
        elif ch == "/" and out and out[-1].endswith("*") or ch == "*" and out and out[-1].endswith("/"):
            piece = f"\\x{code:02x}"
        else:
            piece = ch
        out.append(piece)
    for end in (0, -1):   # the text around it may end in '*' or '/', or start with one
        if out and out[end] in ("/", "*"):
            out[end] = f"\\x{ord(out[end]):02x}"
    return "".join(out)


def c_identifier(text, what: str) -> str:
    """``text`` when it is an ASCII C identifier; else an ``ArgumentError`` naming ``what``."""
    if not isinstance(text, str) or not _IDENTIFIER.match(text):
        raise ArgumentError(f"{what} must be a C identifier (ASCII letters, digits and '_', not starting with a "
                            f"digit), got {text!r}")
    return text


def c_include_name(name: str, what: str) -> str:
    """``name`` when ``#include "name"`` names exactly that file; else an ``ArgumentError``."""
    if not name or any(ch in '"\\' or ord(ch) < 32 or ord(ch) == 127 for ch in name):
        raise ArgumentError(f"{what}: the header's file name {name!r} cannot be written in an #include line "
                            f"(it holds a quote, a backslash or a control character); choose another file name")
    return name
