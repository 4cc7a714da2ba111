"""Every parse of Python source in the package goes through one lock (CPython 3.11's parser is not safe to run
from several threads at once: `ptt eval` on two workers failed a correct solution with "AST constructor
recursion depth mismatch")."""

from __future__ import annotations

import ast
import gc
import threading
from pathlib import Path

import pytest

from mcp_server.engine.pyast import parse_python

PACKAGE = Path(__file__).resolve().parents[2] / "mcp_server"


def _raw_parses(tree: ast.AST) -> list[int]:
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "parse"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "ast"
    ]


@pytest.mark.slow
def test_no_module_calls_ast_parse_outside_the_locked_helper():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "pyast.py":
            continue
        lines = _raw_parses(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        offenders += [f"{path.relative_to(PACKAGE.parent)}:{line}" for line in lines]
    assert offenders == [], "parse through mcp_server.engine.pyast.parse_python: " + ", ".join(offenders)


def test_the_checker_finds_a_raw_parse():
    assert _raw_parses(ast.parse("import ast\nast.parse('x = 1')\n")) == [2]
    assert _raw_parses(ast.parse("from mcp_server.engine.pyast import parse_python\nparse_python('x')\n")) == []


class _Finaliser:
    """Runs Python code when collected, which lets the interpreter switch threads mid-parse."""

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        sum(range(50))


@pytest.mark.slow
def test_parses_from_many_threads_with_collections_running_all_succeed():
    source = (PACKAGE / "engine" / "validate.py").read_text(encoding="utf-8")
    errors: list[BaseException] = []

    def work() -> None:
        for _ in range(20):
            for _ in range(50):
                _Finaliser()
            try:
                parse_python(source, "validate.py")
            except BaseException as exc:
                errors.append(exc)
            gc.collect(0)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_decorators_are_named_as_the_source_spells_them_and_jit_is_found_under_any_module():
    from mcp_server.engine.pyast import dotted_name, jit_decorated

    tree = parse_python(
        "@triton.autotune(configs=[], key=[])\n@triton.jit\ndef a(x): pass\n"
        "@gluon.jit\ndef b(x): pass\n@jit(do_not_specialize=[0])\ndef c(x): pass\n"
        "@functools.cache\ndef d(x): pass\n@registry['k']\ndef e(x): pass\n"
    )
    fns = {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef)}
    assert [dotted_name(d) for d in fns["a"].decorator_list] == ["triton.autotune", "triton.jit"]
    assert dotted_name(fns["e"].decorator_list[0]) == ""
    assert [n for n, f in fns.items() if jit_decorated(f)] == ["a", "b", "c"]
