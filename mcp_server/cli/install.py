"""`ptt install CLIENT`: put the skill and the MCP server where a coding agent finds them.

claude  the skill into ``.claude/skills/pytorch-to-triton`` and the server into ``.mcp.json`` (project scope),
        or into ``~/.claude/skills/`` and the user configuration (user scope: through ``claude mcp add`` when
        the ``claude`` CLI is on PATH, else ``~/.claude.json`` merged in place, with a backup).
cursor  the server into ``.cursor/mcp.json`` (project) or ``~/.cursor/mcp.json`` (user).
vscode  the server into ``.vscode/mcp.json`` (project; VS Code keeps its user file in its profile).

The skill is copied, not linked: a copy keeps working when the checkout moves or the virtual environment is
rebuilt, and Claude Code reads it the same way on every platform. A marker file in the copy records where it
came from; running the command again refreshes a stale copy and reports "already installed" for a current
one. ``--link`` links instead (for editing the skill in this checkout). ``--uninstall`` removes what the
command adds: our skill directory (never one we did not install) and our ``pytorch-to-triton`` server entry;
a configuration file left with no server and nothing else is removed as well.

Every configuration file is read as JSON first; a file that does not parse is never written (exit 2, naming
the file). Writes go to a temporary file in the same folder, then replace the original.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mcp_server import __version__
from mcp_server.engine.errors import EnvironmentUnavailable, UsageError
from mcp_server.engine.skill import SKILL_NAME, skill_dir
from mcp_server.engine.specs import looked_up

SERVER_NAME = "pytorch-to-triton"
MARKER = ".installed-by-ptt.json"
CLIENTS = ("claude", "cursor", "vscode")


class InstallError(UsageError):
    """Bad input or a place we cannot write: the message names the fix (exit 2)."""


class ClientCommandError(EnvironmentUnavailable):
    """The client's own CLI failed (exit 3)."""


@dataclass
class Action:
    what: str  # "skill" | "mcp server"
    where: str
    done: str  # installed | updated | already installed | removed | not installed
    detail: str = ""


@dataclass
class InstallReport:
    client: str
    scope: str
    uninstall: bool
    actions: list[Action] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    ok: bool = True

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def render(self) -> str:
        verb = "uninstall" if self.uninstall else "install"
        lines = [f"ptt {verb} {self.client} ({self.scope} scope)"]
        for a in self.actions:
            line = f"  {a.what:<10}  {a.done:<17}  {a.where}"
            if a.detail:
                line += f"  ({a.detail})"
            lines.append(line)
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)


# --- where things are -----------------------------------------------------------------------------------


def server_command() -> list[str]:
    """The command line an MCP client runs: this environment's ``ptt serve``, by absolute path."""
    bindir = Path(os.path.abspath(sys.executable)).parent
    for name in ("ptt", "ptt.exe"):
        candidate = bindir / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return [str(candidate), "serve"]
    found = shutil.which("ptt")
    if found:
        return [os.path.abspath(found), "serve"]
    return [os.path.abspath(sys.executable), "-m", "mcp_server.cli", "serve"]


def _entry(client: str, command: list[str]) -> dict[str, Any]:
    if client == "vscode":
        return {"type": "stdio", "command": command[0], "args": command[1:]}
    return {"command": command[0], "args": command[1:]}


def _config_path(client: str, scope: str, project: Path) -> tuple[Path, str]:
    """The configuration file and the key that holds its servers."""
    home = Path.home()
    if client == "claude":
        return (project / ".mcp.json", "mcpServers") if scope == "project" else (home / ".claude.json", "mcpServers")
    if client == "cursor":
        base = project if scope == "project" else home
        return base / ".cursor" / "mcp.json", "mcpServers"
    if scope == "user":
        raise InstallError(
            "VS Code keeps its user MCP file in its profile (command palette: 'MCP: Open User Configuration'); "
            "use --scope project to write .vscode/mcp.json in a workspace"
        )
    return project / ".vscode" / "mcp.json", "servers"


# --- JSON configuration files ---------------------------------------------------------------------------


def _read_json(path: Path) -> dict[str, Any] | None:
    """The file's object, or None when it does not exist. Never returns for a file it cannot use."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise InstallError(f"cannot read {path}: {exc.strerror}; fix its permissions and run again") from None
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise InstallError(
            f"{path} is not valid JSON ({exc}); it was left as it is. Fix or move the file, then run again"
        ) from None
    if not isinstance(data, dict):
        raise InstallError(f"{path} holds a JSON {type(data).__name__}, not an object; fix or move it, then run again")
    return data


def _write_json(path: Path, data: dict[str, Any], backup: bool) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        mode = path.stat().st_mode & 0o777 if path.exists() else None
        if backup and path.exists():
            shutil.copy2(path, path.with_name(path.name + ".ptt-backup"))
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f, indent=2)
                f.write("\n")
                f.flush()
                os.fsync(f.fileno())
            if mode is not None:
                os.chmod(tmp, mode)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise InstallError(
            f"cannot write {path}: {exc.strerror}; make {path.parent} writable or choose another --dir"
        ) from None


def _servers(data: dict[str, Any], key: str, path: Path) -> dict[str, Any]:
    servers = data.get(key)
    if servers is None:
        return {}
    if not isinstance(servers, dict):
        raise InstallError(f"{path}: '{key}' is a JSON {type(servers).__name__}, not an object; fix it, then run again")
    return servers


def _install_server_file(path: Path, key: str, entry: dict[str, Any], backup: bool) -> Action:
    data = _read_json(path)
    existed = data is not None
    data = data or {}
    servers = _servers(data, key, path)
    old = servers.get(SERVER_NAME)
    if old == entry:
        return Action("mcp server", str(path), "already installed")
    servers[SERVER_NAME] = entry
    data[key] = servers
    _write_json(path, data, backup=backup and existed)
    if old is None:
        return Action("mcp server", str(path), "installed", " ".join([entry["command"], *entry["args"]]))
    return Action("mcp server", str(path), "updated", f"was {json.dumps(old)}")


def _uninstall_server_file(path: Path, key: str, backup: bool) -> Action:
    data = _read_json(path)
    if data is None:
        return Action("mcp server", str(path), "not installed")
    servers = _servers(data, key, path)
    if SERVER_NAME not in servers:
        return Action("mcp server", str(path), "not installed")
    del servers[SERVER_NAME]
    if not servers and set(data) == {key}:
        try:
            if backup:
                shutil.copy2(path, path.with_name(path.name + ".ptt-backup"))
            path.unlink()
        except OSError as exc:
            raise InstallError(f"cannot remove {path}: {exc.strerror}; fix its permissions and run again") from None
        return Action("mcp server", str(path), "removed", "the file held no other server")
    data[key] = servers
    _write_json(path, data, backup=backup)
    return Action("mcp server", str(path), "removed")


# --- claude's user scope through its own CLI ---------------------------------------------------------------


def _run_claude(claude: str, argv: list[str]) -> None:
    try:
        proc = subprocess.run([claude, *argv], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ClientCommandError(f"`claude {' '.join(argv)}` could not run: {exc}") from None
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise ClientCommandError(
            f"`claude {' '.join(argv)}` failed (exit {proc.returncode}): {' / '.join(tail) or 'no output'}. "
            "Run it yourself to see why, or install without the claude CLI on PATH to edit ~/.claude.json directly"
        )


def _claude_user_server(claude: str, entry: dict[str, Any], uninstall: bool) -> Action:
    path = Path.home() / ".claude.json"
    data = _read_json(path) or {}
    current = _servers(data, "mcpServers", path).get(SERVER_NAME)
    where = f"claude mcp (user scope, {path})"
    if uninstall:
        if current is None:
            return Action("mcp server", where, "not installed")
        _run_claude(claude, ["mcp", "remove", "--scope", "user", SERVER_NAME])
        return Action("mcp server", where, "removed", "claude mcp remove")
    if current is not None and {k: current.get(k) for k in ("command", "args")} == entry:
        return Action("mcp server", where, "already installed")
    if current is not None:
        _run_claude(claude, ["mcp", "remove", "--scope", "user", SERVER_NAME])
    _run_claude(claude, ["mcp", "add", "--scope", "user", SERVER_NAME, "--", entry["command"], *entry["args"]])
    return Action("mcp server", where, "updated" if current is not None else "installed", "claude mcp add")


# --- the skill ----------------------------------------------------------------------------------------------


def _same_tree(a: Path, b: Path) -> bool:
    cmp = filecmp.dircmp(a, b, ignore=[MARKER, "__pycache__"])

    def equal(c: filecmp.dircmp) -> bool:
        if c.left_only or c.right_only or c.funny_files:
            return False
        _, mismatch, errors = filecmp.cmpfiles(c.left, c.right, c.common_files, shallow=False)
        if mismatch or errors:
            return False
        return all(equal(sub) for sub in c.subdirs.values())

    return equal(cmp)


def _ours(dest: Path, source: Path) -> bool:
    if dest.is_symlink():
        return dest.resolve() == source
    return (dest / MARKER).is_file() or (dest.is_dir() and _same_tree(source, dest))


def _install_skill(dest: Path, source: Path, link: bool) -> Action:
    where = str(dest)
    present = dest.exists() or dest.is_symlink()
    if present and not _ours(dest, source):
        raise InstallError(f"{dest} exists and was not installed by ptt; move it away (or remove it) and run again")
    if present:
        if dest.is_symlink() and (link or dest.resolve() == source):
            return Action("skill", where, "already installed", f"a link to {source}")
        if not dest.is_symlink() and not link and _same_tree(source, dest):
            return Action("skill", where, "already installed", f"a copy of {source}")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        if link:
            tmp = dest.with_name(f".{dest.name}.ptt-tmp")
            tmp.unlink(missing_ok=True)
            tmp.symlink_to(source, target_is_directory=True)
            _remove(dest)
            os.replace(tmp, dest)
            detail = f"a link to {source}"
        else:
            tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
            shutil.copytree(source, tmp, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", MARKER))
            marker = {"source": str(source), "ptt_version": __version__}
            (tmp / MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
            os.chmod(tmp, 0o755)
            _remove(dest)
            os.replace(tmp, dest)
            detail = f"copied from {source}"
    except OSError as exc:
        raise InstallError(
            f"cannot write {dest}: {exc.strerror}; make {dest.parent} writable or choose another --dir"
        ) from None
    return Action("skill", where, "updated" if present else "installed", detail)


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def _uninstall_skill(dest: Path, source: Path) -> Action:
    if not (dest.exists() or dest.is_symlink()):
        return Action("skill", str(dest), "not installed")
    if not _ours(dest, source):
        raise InstallError(f"{dest} was not installed by ptt and was left as it is; remove it yourself if unwanted")
    try:
        _remove(dest)
    except OSError as exc:
        raise InstallError(f"cannot remove {dest}: {exc.strerror}; fix its permissions and run again") from None
    # The skills folder (and the client's folder above it) the install made, when nothing else is left in them.
    for folder in (dest.parent, dest.parent.parent):
        try:
            folder.rmdir()
        except OSError:
            break
    return Action("skill", str(dest), "removed")


# --- the command ----------------------------------------------------------------------------------------------


def install(
    client: str,
    scope: str = "project",
    directory: str | None = None,
    uninstall: bool = False,
    link: bool = False,
) -> InstallReport:
    if client not in CLIENTS:
        raise InstallError(f"unknown client {client!r}; choose one of {', '.join(CLIENTS)}")
    if scope not in ("project", "user"):
        raise InstallError(f"--scope must be project or user, got {scope!r}")
    if directory is not None and scope == "user":
        raise InstallError("--dir names a project; leave it out with --scope user")
    project, kind = looked_up(Path(directory or ".").expanduser(), "--dir", "Name an existing project folder.")
    if scope == "project" and kind != "dir":
        raise InstallError(f"--dir {project} is not a folder; create it or name an existing project folder")
    report = InstallReport(client=client, scope=scope, uninstall=uninstall)
    config, key = _config_path(client, scope, project)
    # Check the configuration file before changing anything, so a file we cannot use leaves no half install.
    _servers(_read_json(config) or {}, key, config)

    if client == "claude":
        source = skill_dir()
        skills = (project if scope == "project" else Path.home()) / ".claude" / "skills" / SKILL_NAME
        step = _uninstall_skill(skills, source) if uninstall else _install_skill(skills, source, link)
        report.actions.append(step)

    entry = _entry(client, server_command())
    claude_cli = shutil.which("claude") if (client == "claude" and scope == "user") else None
    if claude_cli:
        report.actions.append(_claude_user_server(claude_cli, entry, uninstall))
    elif uninstall:
        report.actions.append(_uninstall_server_file(config, key, backup=scope == "user"))
    else:
        report.actions.append(_install_server_file(config, key, entry, backup=scope == "user"))

    if not uninstall and any(a.done in ("installed", "updated") for a in report.actions):
        if client == "claude":
            if scope == "project":
                report.notes.append("Claude Code asks once to approve a project's .mcp.json servers when it starts")
            report.notes.append("restart Claude Code, then type /pytorch-to-triton model.py:forward")
        else:
            report.notes.append(f"reload the MCP servers in {client} to pick up {SERVER_NAME}")
    return report


# --- CLI ------------------------------------------------------------------------------------------------------


def cmd_install(args: argparse.Namespace) -> int:
    report = install(args.client, args.scope, args.dir, uninstall=args.uninstall, link=args.link)
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.render())
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("install", help="set up Claude Code (skill + MCP server), Cursor or VS Code to use these tools")
    p.add_argument("client", choices=CLIENTS, help="the MCP client to set up")
    p.add_argument(
        "--scope",
        choices=["project", "user"],
        default="project",
        help="project: files in --dir (default); user: your home configuration, for all projects",
    )
    p.add_argument("--dir", metavar="PATH", help="the project folder (default: the current folder)")
    p.add_argument("--uninstall", action="store_true", help="remove what install added")
    p.add_argument("--link", action="store_true", help="link the skill to this installation instead of copying it")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    p.set_defaults(fn=cmd_install)
