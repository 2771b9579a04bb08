"""A lowered function as JSON text and back: data, never code (the GPU kernel cache stores it so).

``primfunc_to_json(func)`` writes the function's parameters, size variables and body; variables and
buffers are identity objects, so each is written once in a table and referred to by its index.
``primfunc_from_json(text)`` rebuilds the function from a fixed set of node classes (the loop IR's
statements and expressions): anything else in the text, a malformed field or a dangling index raises
``ValueError`` and builds nothing.  Function-level extras (``param_tensors``, dumps) are not kept.
"""
from __future__ import annotations

import json
from dataclasses import fields, is_dataclass
from typing import Dict, List

import numpy as np

from ..dsl.expr import Binary, Call, Cast, CheckedIndex, Compare, Const, Let, Logical, Select, Var
from .ir import (Allocate, Broadcast, Buffer, BufferLoad, BufferStore, Evaluate, For, IfThenElse, KernelLaunch,
                 LetStmt, PrimFunc, Ramp, Seq)

FORMAT = "loopweave.primfunc/1"
_NODES = {cls.__name__: cls for cls in (
    Const, Binary, Compare, Logical, Select, Cast, Call, Let, CheckedIndex, BufferLoad, Ramp, Broadcast,
    For, Seq, IfThenElse, Allocate, BufferStore, LetStmt, Evaluate, KernelLaunch)}


class _Writer:
    def __init__(self):
        self.vars: Dict[int, int] = {}
        self.var_table: List[list] = []
        self.buffers: Dict[int, int] = {}
        self.buffer_table: List[dict] = []

    def var(self, v: Var) -> int:
        if id(v) not in self.vars:
            self.vars[id(v)] = len(self.var_table)
            self.var_table.append([v.name, v.dtype])
        return self.vars[id(v)]

    def buffer(self, b: Buffer) -> int:
        if id(b) not in self.buffers:
            entry = {"name": b.name, "dtype": b.dtype, "scope": b.scope, "data": self.var(b.data),
                     "shape": self.value(b.shape), "strides": self.value(b.strides)}
            if hasattr(b, "elem_offset"):
                entry["elem_offset"] = self.value(b.elem_offset)
            self.buffers[id(b)] = len(self.buffer_table)
            self.buffer_table.append(entry)
        return self.buffers[id(b)]

    def value(self, x):
        if x is None or isinstance(x, (bool, str)):
            return x
        if isinstance(x, np.generic):
            x = x.item()
        if isinstance(x, bool):
            return x
        if isinstance(x, int):
            return {"int": str(x)}
        if isinstance(x, float):
            return {"float": x.hex()}
        if isinstance(x, Var):
            return {"var": self.var(x)}
        if isinstance(x, Buffer):
            return {"buffer": self.buffer(x)}
        if isinstance(x, (tuple, list)):
            return {"tuple": [self.value(v) for v in x]}
        name = type(x).__name__
        if is_dataclass(x) and _NODES.get(name) is type(x):
            return {"node": name, "fields": [self.value(getattr(x, f.name)) for f in fields(x)]}
        raise ValueError(f"a lowered function holds a {name}, which primfunc_to_json cannot write")


def primfunc_to_json(func: PrimFunc) -> str:
    """``func`` as JSON text (see the module docstring); ``ValueError`` for a node it cannot write."""
    w = _Writer()
    params = [w.buffer(b) for b in func.params]
    size_vars = [w.var(v) for v in func.size_vars]
    body = w.value(func.body)
    return json.dumps({"format": FORMAT, "name": func.name, "vars": w.var_table, "buffers": w.buffer_table,
                       "params": params, "size_vars": size_vars, "body": body}, separators=(",", ":"))


class _Reader:
    def __init__(self, doc: dict):
        self.vars = [Var(_str(name), _str(dtype)) for name, dtype in _list(doc["vars"])]
        self.buffers: List[Buffer] = []
        for entry in _list(doc["buffers"]):
            b = Buffer(_str(entry["name"]), self.value(entry["shape"]), _str(entry["dtype"]), _str(entry["scope"]),
                       self.value(entry["strides"]))
            b.data = self.vars[_index(entry["data"], self.vars)]
            if "elem_offset" in entry:
                b.elem_offset = self.value(entry["elem_offset"])
            self.buffers.append(b)

    def value(self, x):
        if x is None or isinstance(x, (bool, str)):
            return x
        if not isinstance(x, dict) or len(x) not in (1, 2):
            raise ValueError(f"unexpected {type(x).__name__} in a lowered function's JSON")
        if "int" in x:
            return int(_str(x["int"]))
        if "float" in x:
            return float.fromhex(_str(x["float"]))
        if "var" in x:
            return self.vars[_index(x["var"], self.vars)]
        if "buffer" in x:
            return self.buffers[_index(x["buffer"], self.buffers)]
        if "tuple" in x:
            return tuple(self.value(v) for v in _list(x["tuple"]))
        cls = _NODES.get(x.get("node"))
        if cls is None:
            raise ValueError(f"unknown node {x.get('node')!r} in a lowered function's JSON")
        values = [self.value(v) for v in _list(x.get("fields"))]
        if len(values) != len(fields(cls)):
            raise ValueError(f"node {cls.__name__} has {len(values)} fields in the JSON, not {len(fields(cls))}")
        return cls(*values)


def _str(x) -> str:
    if not isinstance(x, str):
        raise ValueError(f"expected a string in a lowered function's JSON, got {type(x).__name__}")
    return x


def _list(x) -> list:
    if not isinstance(x, list):
        raise ValueError(f"expected a list in a lowered function's JSON, got {type(x).__name__}")
    return x


def _index(x, table) -> int:
    if not isinstance(x, int) or isinstance(x, bool) or not 0 <= x < len(table):
        raise ValueError(f"index {x!r} out of range in a lowered function's JSON")
    return x


def primfunc_from_json(text) -> PrimFunc:
    """The function ``primfunc_to_json`` wrote; ``ValueError`` for any other text."""
    try:
        doc = json.loads(text)
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ValueError("not a lowered function written by primfunc_to_json")
        r = _Reader(doc)
        params = [r.buffers[_index(k, r.buffers)] for k in _list(doc["params"])]
        size_vars = [r.vars[_index(k, r.vars)] for k in _list(doc["size_vars"])]
        return PrimFunc(_str(doc["name"]), params, size_vars, r.value(doc["body"]))
    except (KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise ValueError(f"malformed lowered function JSON ({type(exc).__name__}: {exc})") from None
