"""Job names live in the registry alone: every ``runner.run`` call in the package names its job through
``jobs.registry`` (``registry.BENCH.name``), never as a string written at the call site."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _receiver(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Call):
        return _receiver(node.func)
    return ""


def literal_job_names(source: str) -> list[tuple[int, str]]:
    """(line, text) of each ``<runner>.run(...)`` call whose job is a string literal or an f-string."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "run"):
            continue
        if "runner" not in _receiver(node.func.value).lower():
            continue
        job = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "entry"), None)
        if isinstance(job, ast.Constant) and isinstance(job.value, str):
            found.append((node.lineno, job.value))
        elif isinstance(job, ast.JoinedStr):
            found.append((node.lineno, ast.unparse(job)))
    return found


def test_the_scan_finds_a_literal_job_name_and_passes_a_registry_entry():
    bad = (
        "def f(runner, pool):\n"
        "    runner.run('mcp_server.engine.jobs.probe:run', {})\n"
        "    shared_runner().run(entry='bench', params={})\n"
        "    pool.runner.run(f'mcp_server.engine.jobs.{name}:run', {})\n"
    )
    assert [line for line, _ in literal_job_names(bad)] == [2, 3, 4]
    good = (
        "def f(runner, server):\n"
        "    runner.run(registry.PROBE.name, {})\n"
        "    shared_runner().run(entry=registry.BENCH.name, params={})\n"
        "    server.run('stdio')\n"
    )
    assert literal_job_names(good) == []


@pytest.mark.slow
def test_no_runner_call_in_the_package_names_its_job_by_a_string():
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {text!r}"
        for path in sorted((ROOT / "mcp_server").rglob("*.py"))
        for line, text in literal_job_names(path.read_text(encoding="utf-8"))
    ]
    assert not offenders, "name the job through mcp_server.engine.jobs.registry:\n" + "\n".join(offenders)
