"""Both backends implement the Backend protocol as declared: every method the runner calls exists
on NumpyBackend and CudaBackend and takes the protocol's arguments, and no class of the backends
defines a method twice (a later definition silently replaces the earlier one). Importing the cuda
backend needs no CuPy, so this runs on any machine."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import pa_bench.backends as backends_pkg
from pa_bench.backends.base import Backend
from pa_bench.backends.cuda import CudaBackend
from pa_bench.backends.numpy import NumpyBackend

METHODS = sorted(name for name, member in vars(Backend).items()
                 if callable(member) and not name.startswith("_"))


def test_the_protocol_names_the_runners_calls():
    assert {"compute", "launch", "model", "reference", "time", "compile_builds", "close"} <= set(METHODS)


@pytest.mark.parametrize("backend", [NumpyBackend, CudaBackend], ids=["numpy", "cuda"])
@pytest.mark.parametrize("method", METHODS)
def test_each_backend_takes_the_protocols_arguments(backend, method):
    declared = inspect.signature(getattr(Backend, method)).parameters.values()
    positional = [object() for p in declared if p.default is p.empty][1:]          # after self
    keywords = {p.name: p.default for p in declared if p.default is not p.empty}
    inspect.signature(getattr(backend, method)).bind(None, *positional, **keywords)


@pytest.mark.parametrize("path", sorted(Path(backends_pkg.__file__).parent.glob("*.py")), ids=lambda p: p.name)
def test_no_class_defines_a_method_twice(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ClassDef):
            names = [f.name for f in node.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]
            twice = sorted({n for n in names if names.count(n) > 1})
            assert not twice, f"{path.name}: class {node.name} defines {twice} more than once"
