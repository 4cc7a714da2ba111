"""`ptt install`: the skill and the MCP server land where each client reads them, idempotently, and
--uninstall takes back exactly that. A fake HOME keeps the real one untouched; a fake `claude` on PATH
records its argv for the user-scope path through Claude's own CLI."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

import mcp_server
from mcp_server.cli import install as inst
from mcp_server.engine.skill import skill_dir

SERVER = "pytorch-to-triton"


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A fake HOME and a PATH without any `claude`."""
    h = tmp_path / "home"
    h.mkdir()
    bindir = tmp_path / "nobin"
    bindir.mkdir()
    monkeypatch.setenv("HOME", str(h))
    monkeypatch.setenv("PATH", str(bindir))
    return h


@pytest.fixture
def project(tmp_path):
    p = tmp_path / "proj"
    p.mkdir()
    return p


def run(argv, capsys):
    code = inst_main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def inst_main(argv):
    from mcp_server.cli import main

    return main(["install", *argv])


def read(path: Path):
    return json.loads(path.read_text())


def test_project_install_is_idempotent_and_uninstall_takes_back_exactly_that(home, project, capsys):
    mcp = project / ".mcp.json"
    mcp.write_text(json.dumps({"mcpServers": {"other": {"command": "x", "args": []}}, "extra": 1}))

    code, out, _ = run(["claude", "--dir", str(project)], capsys)
    assert code == 0, out
    skill = project / ".claude" / "skills" / "pytorch-to-triton"
    assert (skill / "SKILL.md").read_bytes() == (skill_dir() / "SKILL.md").read_bytes()
    assert not skill.is_symlink()
    data = read(mcp)
    assert data["extra"] == 1 and data["mcpServers"]["other"] == {"command": "x", "args": []}
    entry = data["mcpServers"][SERVER]
    assert Path(entry["command"]).is_absolute() and entry["args"][-1] == "serve"
    assert "installed" in out and "already" not in out

    before = mcp.read_bytes()
    code, out, _ = run(["claude", "--dir", str(project)], capsys)
    assert code == 0
    assert out.count("already installed") == 2, out
    assert mcp.read_bytes() == before

    code, out, _ = run(["claude", "--dir", str(project), "--uninstall"], capsys)
    assert code == 0 and out.count("removed") == 2, out
    assert not skill.exists()
    assert read(mcp) == {"mcpServers": {"other": {"command": "x", "args": []}}, "extra": 1}
    code, out, _ = run(["claude", "--dir", str(project), "--uninstall"], capsys)
    assert code == 0 and out.count("not installed") == 2


def test_uninstall_removes_a_config_file_it_alone_filled(home, project, capsys):
    assert run(["claude", "--dir", str(project)], capsys)[0] == 0
    assert (project / ".mcp.json").exists()
    assert run(["claude", "--dir", str(project), "--uninstall"], capsys)[0] == 0
    assert not (project / ".mcp.json").exists()
    assert not (project / ".claude").exists()  # the folders the install made, left empty, go too


def test_uninstall_leaves_folders_that_hold_something_else(home, project, capsys):
    (project / ".claude" / "skills" / "mine").mkdir(parents=True)
    assert run(["claude", "--dir", str(project)], capsys)[0] == 0
    assert run(["claude", "--dir", str(project), "--uninstall"], capsys)[0] == 0
    assert (project / ".claude" / "skills" / "mine").is_dir()
    assert not (project / ".claude" / "skills" / "pytorch-to-triton").exists()


def test_stale_copy_is_refreshed_and_a_foreign_skill_dir_is_left_alone(home, project, capsys):
    assert run(["claude", "--dir", str(project)], capsys)[0] == 0
    skill = project / ".claude" / "skills" / "pytorch-to-triton"
    (skill / "SKILL.md").write_text("old text")
    code, out, _ = run(["claude", "--dir", str(project)], capsys)
    assert code == 0 and "updated" in out
    assert (skill / "SKILL.md").read_bytes() == (skill_dir() / "SKILL.md").read_bytes()

    other = home / "p2"
    (other / ".claude" / "skills" / "pytorch-to-triton").mkdir(parents=True)
    mine = other / ".claude" / "skills" / "pytorch-to-triton" / "SKILL.md"
    mine.write_text("the user's own")
    code, _, err = run(["claude", "--dir", str(other)], capsys)
    assert code == 2 and "not installed by ptt" in err and "move it away" in err
    assert mine.read_text() == "the user's own"
    code, _, err = run(["claude", "--dir", str(other), "--uninstall"], capsys)
    assert code == 2 and mine.read_text() == "the user's own"


def test_link_mode_links_to_the_skill_source(home, project, capsys):
    code, out, _ = run(["claude", "--dir", str(project), "--link"], capsys)
    assert code == 0
    skill = project / ".claude" / "skills" / "pytorch-to-triton"
    assert skill.is_symlink() and skill.resolve() == skill_dir()
    code, out, _ = run(["claude", "--dir", str(project), "--link"], capsys)
    assert code == 0 and out.count("already installed") == 2
    assert run(["claude", "--dir", str(project), "--uninstall"], capsys)[0] == 0
    assert not skill.is_symlink() and skill_dir().is_dir()


def test_corrupt_config_is_never_overwritten(home, project, capsys):
    mcp = project / ".mcp.json"
    mcp.write_text('{"mcpServers": {"other": ')
    code, _, err = run(["claude", "--dir", str(project)], capsys)
    assert code == 2
    assert str(mcp) in err and "not valid JSON" in err and "Fix or move" in err
    assert mcp.read_text() == '{"mcpServers": {"other": '
    mcp.write_text('{"mcpServers": []}')
    code, _, err = run(["claude", "--dir", str(project)], capsys)
    assert code == 2 and "'mcpServers' is a JSON list" in err


def test_json_failure_is_one_object_on_stdout(home, project, capsys):
    (project / ".mcp.json").write_text("not json")
    code, out, _ = run(["claude", "--dir", str(project), "--json"], capsys)
    assert code == 2
    data = json.loads(out)
    assert data["ok"] is False and data["error"]["kind"] == "usage" and "not valid JSON" in data["error"]["message"]
    (project / ".mcp.json").unlink()
    code, out, _ = run(["claude", "--dir", str(project), "--json"], capsys)
    data = json.loads(out)
    assert code == 0 and data["ok"] is True and {a["done"] for a in data["actions"]} == {"installed"}


@pytest.mark.skipif(sys.platform == "win32" or os.geteuid() == 0, reason="permissions do not bind root")
def test_unwritable_project_is_a_usage_error(home, project, capsys):
    project.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        code, _, err = run(["claude", "--dir", str(project)], capsys)
    finally:
        project.chmod(stat.S_IRWXU)
    assert code == 2 and "cannot write" in err and "writable" in err


def test_unwritable_place_is_a_usage_error_even_for_root(home, project, capsys):
    (project / ".claude").write_text("a file where a folder should be")
    code, _, err = run(["claude", "--dir", str(project)], capsys)
    assert code == 2 and "cannot write" in err and str(project / ".claude") in err
    assert (project / ".claude").read_text() == "a file where a folder should be"
    assert not (project / ".mcp.json").exists()


def test_bad_arguments_are_usage_errors(home, project, capsys):
    assert run(["claude", "--dir", str(project / "missing")], capsys)[0] == 2
    assert run(["claude", "--scope", "user", "--dir", str(project)], capsys)[0] == 2
    code, _, err = run(["vscode", "--scope", "user"], capsys)
    assert code == 2 and "--scope project" in err
    assert run(["emacs"], capsys)[0] == 2


def test_user_scope_without_claude_cli_edits_claude_json_with_a_backup(home, capsys):
    cfg = home / ".claude.json"
    original = {"numStartups": 7, "projects": {"/x": {"mcpServers": {}}}, "mcpServers": {"keep": {"command": "k"}}}
    cfg.write_text(json.dumps(original))
    code, out, _ = run(["claude", "--scope", "user"], capsys)
    assert code == 0, out
    data = read(cfg)
    assert data["numStartups"] == 7 and data["projects"] == original["projects"]
    assert data["mcpServers"]["keep"] == {"command": "k"} and data["mcpServers"][SERVER]["args"][-1] == "serve"
    assert read(home / ".claude.json.ptt-backup") == original
    assert (home / ".claude" / "skills" / "pytorch-to-triton" / "SKILL.md").is_file()
    assert run(["claude", "--scope", "user"], capsys)[1].count("already installed") == 2
    assert run(["claude", "--scope", "user", "--uninstall"], capsys)[0] == 0
    assert read(cfg) == original
    assert not (home / ".claude" / "skills" / "pytorch-to-triton").exists()


def _fake_claude(bindir: Path, log: Path) -> None:
    """A `claude` that records its argv and keeps ~/.claude.json as the real one would."""
    script = bindir / "claude"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        f"open({str(log)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
        "path = os.path.join(os.environ['HOME'], '.claude.json')\n"
        "data = json.load(open(path)) if os.path.exists(path) else {}\n"
        "servers = data.setdefault('mcpServers', {})\n"
        "a = sys.argv[1:]\n"
        "if a[:2] == ['mcp', 'add']:\n"
        "    cmd = a[a.index('--') + 1:]\n"
        "    servers[a[4]] = {'type': 'stdio', 'command': cmd[0], 'args': cmd[1:], 'env': {}}\n"
        "elif a[:2] == ['mcp', 'remove']:\n"
        "    servers.pop(a[-1])\n"
        "json.dump(data, open(path, 'w'))\n"
    )
    script.chmod(0o755)


def test_user_scope_goes_through_the_claude_cli_when_present(home, tmp_path, monkeypatch, capsys):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "argv.log"
    _fake_claude(bindir, log)
    monkeypatch.setenv("PATH", str(bindir))

    code, out, _ = run(["claude", "--scope", "user"], capsys)
    assert code == 0, out
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    ptt = inst.server_command()
    assert calls == [["mcp", "add", "--scope", "user", SERVER, "--", *ptt]]

    code, out, _ = run(["claude", "--scope", "user"], capsys)
    assert code == 0 and out.count("already installed") == 2
    assert len(log.read_text().splitlines()) == 1  # nothing run the second time

    code, out, _ = run(["claude", "--scope", "user", "--uninstall"], capsys)
    assert code == 0
    assert json.loads(log.read_text().splitlines()[-1]) == ["mcp", "remove", "--scope", "user", SERVER]
    assert read(home / ".claude.json")["mcpServers"] == {}


def test_claude_cli_failure_is_reported_with_exit_3(home, tmp_path, monkeypatch, capsys):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "claude"
    script.write_text(f"#!{sys.executable}\nimport sys\nsys.stderr.write('boom: not logged in\\n')\nsys.exit(1)\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", str(bindir))
    code, _, err = run(["claude", "--scope", "user"], capsys)
    assert code == 3 and "boom: not logged in" in err


def test_cursor_and_vscode_formats(home, project, capsys):
    assert run(["cursor", "--dir", str(project)], capsys)[0] == 0
    entry = read(project / ".cursor" / "mcp.json")["mcpServers"][SERVER]
    assert entry["args"][-1] == "serve" and "type" not in entry
    assert not (project / ".claude").exists()

    vs = project / ".vscode" / "mcp.json"
    vs.parent.mkdir()
    vs.write_text(json.dumps({"inputs": [], "servers": {"mine": {"type": "stdio", "command": "m"}}}))
    assert run(["vscode", "--dir", str(project)], capsys)[0] == 0
    data = read(vs)
    assert data["inputs"] == [] and data["servers"]["mine"] == {"type": "stdio", "command": "m"}
    assert data["servers"][SERVER]["type"] == "stdio"
    assert run(["vscode", "--dir", str(project), "--uninstall"], capsys)[0] == 0
    assert read(vs) == {"inputs": [], "servers": {"mine": {"type": "stdio", "command": "m"}}}

    assert run(["cursor", "--scope", "user"], capsys)[0] == 0
    assert SERVER in read(home / ".cursor" / "mcp.json")["mcpServers"]


def test_skill_ships_as_package_data():
    """The package's skill_data (what a wheel carries) is the skill itself."""
    shipped = Path(mcp_server.__file__).resolve().parent / "skill_data"
    repo = Path(mcp_server.__file__).resolve().parent.parent / "skills" / "pytorch-to-triton"
    assert shipped.resolve() == repo.resolve()
    assert skill_dir() == repo.resolve()
