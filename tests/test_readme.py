"""The README's code, run as written: every Python block (in one session, in order, as a reader
follows it) and every shell command, in a scratch folder that holds what the README assumes (a
``model.onnx`` of one float32 input named ``input``, ``x.npy``, ``.venv`` and ``notebooks/`` of this
clone).

Sizes are made small by the substitutions in ``SMALLER``: each must match the README exactly as
often as listed, so an edited README cannot silently escape them.  A statement whose line says
``# SomeError`` must raise ``lw.SomeError``.  Not run, each for a stated reason (``SKIPPED``): the
fresh install and the full test suite (``.ci/run`` does both), JupyterLab, commands that need a
cross compiler or C compiler that is not installed; the benchmarks take minutes each, so their commands are
checked, not run: the module exists and takes every option the README gives it.
"""
from __future__ import annotations

import ast
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import loopweave as lw

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("lightgbm")

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

#: (README text, its small stand-in, how many times the text occurs in the README)
SMALLER = [
    ("np.random.rand(2, 1024, 1024)", "np.random.rand(2, 128, 128)", 1),
    ("np.empty((1024, 1024), \"float32\")", "np.empty((128, 128), \"float32\")", 1),
    ("lw.placeholder((512, 512), name=", "lw.placeholder((64, 64), name=", 2),
    ("np.random.rand(1, 3, 224, 224)", "np.random.rand(1, 3, 16, 16)", 2),
    ("np.random.rand(8, 3, 256, 320)", "np.random.rand(2, 3, 24, 32)", 1),
    ("model_zoo.symbolic_sizes(model_zoo.resnet18())", "model_zoo.symbolic_sizes(model_zoo.small_cnn())", 1),
    ("N = 512 ", "N = 64 ", 1),
    ("trials=256,", "trials=4,", 1),
    (".venv/bin/loopweave demo\n", ".venv/bin/loopweave demo --quick\n", 1),
    ("loopweave bench zoo:resnet18 ", "loopweave bench zoo:small_cnn --pairs 2 --threads 1 ", 1),
    ("loopweave tune zoo:resnet18 --time-budget 20m ", "loopweave tune zoo:small_cnn --trials 2 ", 1),
    ("loopweave compile zoo:resnet18 -o", "loopweave compile zoo:small_cnn -o", 1),
]

#: (pattern of a shell command, why it is never run here: not a skip, these are excluded by design and
#: ``test_skips_name_only_what_the_readme_has`` keeps each rule matched); a command that needs a tool
#: this machine lacks (a cross compiler, a C compiler, the notebook extra) is a skip naming the tool
SKIPPED = [
    (r"^python3 -m venv ", "creates a fresh virtual environment: .ci/run does the fresh install, then runs this test"),
    (r"/pip install -e ", "installs from the package index: .ci/run does the fresh install, then runs this test"),
    (r"/pip install jupyterlab", "installs JupyterLab from the package index"),
    (r"/jupyter lab ", "starts JupyterLab's server, which does not return"),
    (r"-m pytest", "runs the whole test suite, which holds this test"),
]
CROSS_CC = "aarch64-linux-gnu-gcc"
#: what links with the system C compiler: a library export, the README's app and its run
NEEDS_CC = re.compile(r'--export \S+\.so|export_library\("[^"]+\.so"|^cc |^\./app')


def readme_text() -> str:
    text = README.read_text()
    for old, new, count in SMALLER:
        assert text.count(old) == count, f"README: expected {old!r} {count} time(s), found {text.count(old)}"
        text = text.replace(old, new)
    return text


def code_blocks():
    """(language, code, line of the opening fence) of every fenced block, in order."""
    blocks, lang, start, lines = [], None, 0, []
    for number, line in enumerate(readme_text().splitlines(), 1):
        if line.startswith("```"):
            if lang is None:
                lang, start, lines = line[3:].strip() or "text", number, []
            else:
                blocks.append((lang, "\n".join(lines) + "\n", start))
                lang = None
        elif lang is not None:
            lines.append(line)
    assert lang is None, "README: a code fence is not closed"
    return blocks


BLOCKS = code_blocks()


def shell_commands(code: str):
    """The commands of a shell block: continued lines joined, comment lines dropped, `a && b` split."""
    joined = re.sub(r"\\\n\s*", " ", code)
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            yield from (part.strip() for part in line.split(" && "))


def excluded(command: str) -> bool:
    """Whether ``command`` is one the README shows but this test never runs (``SKIPPED``)."""
    return any(re.search(pattern, command) for pattern, _ in SKIPPED)


def skip_reason(command: str):
    """Why ``command`` cannot run on this machine (a missing tool), or None."""
    if CROSS_CC in command and shutil.which(CROSS_CC) is None:
        return f"needs the cross compiler {CROSS_CC}, not installed here"
    if NEEDS_CC.search(command) and not any(shutil.which(cc) for cc in ("cc", "gcc", "clang")):
        return "links a shared library or a program: needs a C compiler (cc), not installed here"
    if "jupyter execute" in command:
        for module in ("nbclient", "ipykernel"):
            try:
                __import__(module)
            except ImportError:
                return f"needs the notebook extra ({module} is not installed)"
    return None


def check_benchmark_command(command: str) -> None:
    """A benchmark's command as the README gives it: the module exists and takes every option."""
    module = re.search(r"-m (benchmarks\.\w+)", command).group(1)
    path = ROOT / (module.replace(".", "/") + ".py")
    assert path.is_file(), f"README: {command!r} names {module}, which does not exist"
    source = path.read_text()
    for option in re.findall(r"(?<!\S)(--[\w-]+)", command.split("#")[0]):
        assert f'"{option}"' in source, f"README: {module} takes no option {option} ({command!r})"


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    """The scratch folder (what the README assumes is there) and the Python session's namespace."""
    from loopweave.nn_ops.testing.model_zoo import small_cnn
    import onnx
    work = tmp_path_factory.mktemp("readme")
    (work / ".venv").symlink_to(Path(sys.prefix))
    (work / "notebooks").symlink_to(ROOT / "notebooks")
    onnx.save(small_cnn(), work / "model.onnx")
    np.save(work / "x.npy", np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32))
    c_blocks = [code for lang, code, _ in BLOCKS if lang == "c"]
    assert len(c_blocks) == 1, "README: expected one C block (app.c)"
    (work / "app.c").write_text(c_blocks[0])
    return work, {"__name__": "readme"}


def expected_error(lines, stmt):
    """The error class a statement's comment says it raises (``# BuildError: ...``), or None."""
    text = "\n".join(lines[stmt.lineno - 1:stmt.end_lineno])
    found = re.search(r"#\s*([A-Z]\w*Error)\b", text)
    return getattr(lw, found.group(1)) if found else None


def run_python(code: str, start: int, namespace: dict) -> list:
    skipped = []
    lines = code.splitlines()
    for stmt in ast.parse(code).body:
        source = "\n".join(lines[stmt.lineno - 1:stmt.end_lineno])
        if excluded(source):
            continue
        reason = skip_reason(source)
        if reason:
            skipped.append(f"line {start + stmt.lineno}: {reason}")
            continue
        compiled = compile(ast.Module([stmt], type_ignores=[]), f"README.md:{start + stmt.lineno}", "exec")
        error = expected_error(lines, stmt)
        if error is None:
            exec(compiled, namespace)
        else:
            with pytest.raises(error):
                exec(compiled, namespace)
    return skipped


def run_shell(code: str, work: Path) -> list:
    skipped = []
    for command in shell_commands(code):
        if excluded(command):
            continue
        reason = skip_reason(command)
        if reason:
            skipped.append(f"{command!r}: {reason}")
        elif re.search(r"-m benchmarks\.", command):
            check_benchmark_command(command)
        else:
            proc = subprocess.run(["bash", "-c", command], cwd=work, capture_output=True, text=True, timeout=300)
            assert proc.returncode == 0, f"README command failed: {command}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return skipped


@pytest.mark.parametrize("lang, code, line", BLOCKS, ids=[f"line{line}-{lang}" for lang, _, line in BLOCKS])
def test_readme_block(session, monkeypatch, lang, code, line):
    work, namespace = session
    monkeypatch.chdir(work)
    if lang == "python" and "import torch" in code and importlib.util.find_spec("torch") is None:
        pytest.skip("needs the torch extra (torch is not installed)")
    if lang == "python":
        skipped = run_python(code, line, namespace)
    elif lang == "bash":
        skipped = run_shell(code, work)
    elif lang == "c":
        return          # app.c: compiled and run by the deploy block's commands
    else:
        pytest.fail(f"README line {line}: a code block in {lang!r}, which this test does not know how to run")
    if skipped:
        pytest.skip("ran the rest; not run: " + "; ".join(skipped))


def test_skips_name_only_what_the_readme_has():
    """Every skip rule still matches a README command (a stale rule would hide nothing but confuse)."""
    commands = [c for lang, code, _ in BLOCKS if lang == "bash" for c in shell_commands(code)]
    for pattern, _ in SKIPPED:
        assert any(re.search(pattern, c) for c in commands), f"no README command matches the skip rule {pattern!r}"


def test_readme_names_every_extra_and_missing_packages_name_real_ones():
    import tomllib
    from loopweave.extras import EXTRA_OF
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    text = README.read_text()
    assert [name for name in extras if f"| `{name}` |" not in text] == []
    assert set(EXTRA_OF.values()) <= set(extras)
    for module, extra in EXTRA_OF.items():
        assert any(req.startswith(module) for req in extras[extra]), f"the {extra} extra does not install {module}"
