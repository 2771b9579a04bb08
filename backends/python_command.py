"""The command line that starts one of loopweave's worker processes (builds, measurements).

``python -m module`` puts the current folder first on ``sys.path``, so a worker started inside an
unpacked model's folder would import a ``numpy.py`` lying there.  Workers start with ``-P`` (Python
3.11 and newer: nothing is prepended to ``sys.path``); on Python 3.10, ``-c`` drops the entry it
prepended before anything is imported from it, then runs the module.
"""
from __future__ import annotations

import sys
from typing import List


def python_module_command(module: str) -> List[str]:
    """``python -m module`` without the current folder on the child's ``sys.path``."""
    if sys.version_info >= (3, 11):
        return [sys.executable, "-P", "-m", module]
    return python_code_command(f"import runpy; runpy.run_module({module!r}, run_name='__main__', alter_sys=True)")


def python_code_command(code: str) -> List[str]:
    """``python -c code`` without the current folder on the child's ``sys.path``."""
    if sys.version_info >= (3, 11):
        return [sys.executable, "-P", "-c", code]
    return [sys.executable, "-c", "import sys; del sys.path[0]\n" + code]
