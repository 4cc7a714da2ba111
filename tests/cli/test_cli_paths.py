"""A path the system refuses to look up (a name too long, a loop of links) is a usage error naming the argument,
exit 2, for every command that takes a path; never an internal error. Its twins: a path that is merely missing
gets its own message, and each kind of thing at a path is told apart."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mcp_server.engine.errors import UsageError
from mcp_server.engine.specs import looked_up
from mcp_server.http_serve import confine

FX = Path(__file__).resolve().parents[1] / "fixtures" / "validate"
TOO_LONG = "k" * 5000


@pytest.fixture
def loop(tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    return str(tmp_path / "a")


KERNELS = Path(__file__).resolve().parents[1] / "fixtures" / "compile" / "kernels.py"
SCALE = [f"{KERNELS}:scale_kernel", "--signature", "*fp32, *fp32, i32, fp32", "--constexpr", "BLOCK=1024"]


def _commands(bad: str, tmp_path: Path) -> list[list[str]]:
    good = f"{FX}/add_good.py:candidate"
    return [
        # Where results are written: refused before the work (compile, serve) or in place of an internal error.
        ["compile", *SCALE, "--ir", "ttir", "--out-dir", bad],
        ["serve", "--transport", "http", "--root", bad, "--port", "1"],
        ["audit", str(KERNELS), "--sections", "static", "--out", bad],
        ["validate", f"{bad}:reference", good],
        ["validate", f"{FX}/add_problem.py:reference", f"{bad}:candidate"],
        ["compile", f"{bad}:kernel"],
        ["audit", bad],
        ["stages", "status", "--ledger", bad],
        ["eval", bad, str(tmp_path)],
        ["eval", str(FX), bad],
        ["install", "claude", "--dir", bad],
    ]


@pytest.mark.parametrize("which", ["too long", "loop"])
@pytest.mark.parametrize("index", range(11))
def test_a_path_the_system_cannot_look_up_is_a_usage_error_for_every_command(which, index, loop, tmp_path, capsys):
    from mcp_server.cli import main

    bad = str(tmp_path / TOO_LONG) if which == "too long" else loop
    command = _commands(bad, tmp_path)[index]
    assert main(command) == 2, command[:2]
    err = capsys.readouterr().err
    assert "cannot be used" in err and ("too long" in err or "loop" in err.lower()), err[-400:]
    assert "internal error" not in err and "Traceback" not in err
    assert len(err) < 1500  # the 5000-character name is cut when shown


@pytest.mark.parametrize(
    "command",
    [
        ["validate", "{k}:reference", f"{FX}/add_good.py:candidate"],
        ["audit", "{k}:launcher"],
        ["compile", "{k}:kernel"],
    ],
    ids=["validate", "audit", "compile"],
)
def test_a_pipe_named_like_python_source_is_refused_without_waiting_for_a_writer(tmp_path, command):
    os.mkfifo(tmp_path / "k.py")
    argv = [a.format(k=tmp_path / "k.py") for a in command]
    # In a process of its own with a deadline: reading the pipe would wait for a writer that never comes.
    proc = subprocess.run(
        [sys.executable, "-m", "mcp_server.cli", "--no-daemon", *argv], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2, proc.stderr[-500:]
    assert "not a regular file" in proc.stderr


def test_a_path_that_is_only_missing_keeps_its_own_message(tmp_path, capsys):
    from mcp_server.cli import main

    assert main(["validate", f"{tmp_path}/nope.py:reference", f"{FX}/add_good.py:candidate"]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and "cannot be used" not in err


def test_what_is_at_a_path_is_told_apart(tmp_path, loop):
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "f.py").write_text("x = 1\n")
    (tmp_path / "link.py").symlink_to(tmp_path / "f.py")
    assert looked_up(tmp_path / "f.py", "it", "")[1] == "file"
    assert looked_up(tmp_path / "link.py", "it", "") == (tmp_path / "f.py", "file")
    assert looked_up(tmp_path, "it", "")[1] == "dir"
    assert looked_up(tmp_path / "pipe", "it", "")[1] == "other"
    assert looked_up(tmp_path / "nope" / "deeper.py", "it", "")[1] == "missing"
    with pytest.raises(UsageError, match=r"^The thing .* cannot be used: .*Pass another\.$"):
        looked_up(Path(loop), "The thing", "Pass another.")


def test_the_http_server_refuses_a_file_argument_it_cannot_look_up_and_keeps_one_inside(tmp_path, loop):
    (tmp_path / "k.py").write_text("x = 1\n")
    refused = confine(f"{loop}:f", "spec", [tmp_path], cwd=tmp_path)
    assert refused is not None and "cannot be looked up" in refused
    assert confine(f"{tmp_path / 'k.py'}:f", "spec", [tmp_path], cwd=tmp_path) is None


def test_an_unexpected_error_is_an_internal_error_naming_ptt_debug_its_message_cut(monkeypatch, capsys):
    from mcp_server.cli import main
    from mcp_server.engine import device

    def broken():
        raise ValueError("z" * 10000)

    monkeypatch.delenv("PTT_DEBUG", raising=False)
    monkeypatch.setattr(device, "probe", broken)
    assert main(["device"]) == 3
    err = capsys.readouterr().err
    assert "internal error (ValueError: zzz" in err and "(10000 characters)" in err and "PTT_DEBUG=1" in err
    assert len(err) < 1000
    monkeypatch.setenv("PTT_DEBUG", "1")
    with pytest.raises(ValueError):
        main(["device"])


def test_an_output_path_that_is_a_folder_is_refused_and_a_new_one_is_made(tmp_path, capsys):
    from mcp_server.cli import main

    assert main(["audit", str(KERNELS), "--sections", "static", "--out", str(tmp_path)]) == 2
    assert "is a folder; pass the path of a file" in capsys.readouterr().err
    report = tmp_path / "new" / "deeper" / "report.md"
    assert main(["audit", str(KERNELS), "--sections", "static", "--out", str(report)]) == 0
    assert report.read_text().startswith("# Triton kernel audit")
    folder = tmp_path / "ir" / "out"
    assert main(["compile", *SCALE, "--ir", "ttir", "--out-dir", str(folder)]) == 0
    assert any(folder.iterdir())
