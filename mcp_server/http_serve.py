"""`ptt serve --transport http`: the MCP server over streamable HTTP, for many agents and many GPUs.

The SDK's streamable HTTP app (stateless: every request stands alone), wrapped in one ASGI middleware that
refuses, before the SDK sees anything:

- a Host that is not this server (421) and an Origin that is not allowed (403) — DNS rebinding: a web page
  must not be able to drive a server on localhost;
- a request without ``Authorization: Bearer <token>`` when a token is set (401; compared in constant time);
- a body over ``max_request_bytes`` (413).

Below the app, every connection is watched (:class:`ConnectionGuard`): its request headers must arrive within
``header_timeout_s`` of the connection opening (or of the previous response), its body within ``body_timeout_s``
of the headers, an idle keep-alive connection is closed after ``keep_alive_s``, and at most ``max_connections``
are open at once — past that, a new connection pushes out the oldest one that has not shown the token (then the
oldest idle one); a connection whose tool call is running is never pushed out. File arguments of every tool are
confined to the folders given at start (:class:`PathConfinement`, ``--root``; default the working folder).

Binding anything but a loopback address needs a token: generated (printed to stderr once) or read from
``PTT_SERVE_TOKEN``. Tool calls run at most ``max_concurrency`` at once; callers beyond wait in FIFO order
and are told their position through progress notifications. The server is ``build_server(pool=...)``: its
``validate_against_reference`` and ``bench`` take a place on the GPU worker pool (:mod:`mcp_server.engine.pool`),
so validations spread over the GPUs and a bench has its GPU to itself. Every job still runs in its own isolated
child. Started by ``ptt serve --transport http`` (:mod:`mcp_server.cli.serve`).
"""

from __future__ import annotations

import contextlib
import errno
import hmac
import ipaddress
import logging
import os
import secrets
import socket
import sys
import typing
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import anyio
import h11
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from mcp_server.engine.errors import EnvironmentUnavailable, UsageError
from mcp_server.engine.inputs import looks_like_type_list
from mcp_server.engine.params import TOOLS, Param
from mcp_server.engine.specs import looked_up

logger = logging.getLogger("pytorch_to_triton.serve")

TOKEN_ENV = "PTT_SERVE_TOKEN"
DEFAULT_MAX_REQUEST_BYTES = 1 << 20  # 1 MiB: a kernel's source is a few KiB; 1 MiB leaves room for long ones
DEFAULT_HEADER_TIMEOUT_S = 10.0  # a client sends its headers at once; 10 s is generous on any network
DEFAULT_BODY_TIMEOUT_S = 30.0  # 1 MiB in 30 s is ~35 KB/s: only a deliberately slow client is cut off
DEFAULT_KEEP_ALIVE_S = 5  # an idle connection between requests
MCP_PATH = "/mcp"
TokenMode = Literal["auto", "require", "none"]
_LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")


# --- configuration --------------------------------------------------------------------------------------


def is_loopback(host: str) -> bool:
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost: it may resolve anywhere


@dataclass
class ServeConfig:
    host: str = "127.0.0.1"
    port: int = 8765
    token: str | None = None
    token_source: str | None = None  # "environment" | "generated" | None (no token)
    allow_origins: list[str] = field(default_factory=list)
    max_concurrency: int = 4
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S
    keep_alive_s: int = DEFAULT_KEEP_ALIVE_S
    max_connections: int = 256
    roots: list[Path] = field(default_factory=lambda: [Path.cwd().resolve()])

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host and not self.host.startswith("[") else self.host
        return f"http://{host}:{self.port}{MCP_PATH}"


def default_concurrency(workers: int, interpreter: bool) -> int:
    """Two tool calls per GPU keep each busy while the other's child starts; 4 without GPUs."""
    return 4 if interpreter else max(2, 2 * workers)


def default_max_connections() -> int:
    """256, or half the open-file limit where that is lower: the rest stays for the children's pipes and files."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return 256
    if soft == resource.RLIM_INFINITY:
        return 256
    return max(16, min(256, soft // 2))


def _roots(given: list[str] | None) -> list[Path]:
    out: list[Path] = []
    for text in given or [os.getcwd()]:
        path, kind = looked_up(Path(os.path.expanduser(text)), "--root", "Give a folder that exists.")
        if kind != "dir":
            raise UsageError(f"--root {text!r} is not a folder; give a folder whose files the tools may read and write")
        out.append(path)
    return out


def _normalize_origin(value: str) -> str:
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--allow-origin {value!r} is not an origin; write it as http://host:port or https://host")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host.lower()}{port}"


def resolve_config(
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    token: TokenMode = "auto",
    allow_origins: list[str] | None = None,
    max_concurrency: int | None = None,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    env: typing.Mapping[str, str] | None = None,
    default_concurrency_value: int = 4,
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S,
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
    keep_alive_s: int = DEFAULT_KEEP_ALIVE_S,
    max_connections: int | None = None,
    roots: list[str] | None = None,
) -> ServeConfig:
    """Check the options and settle the token. Raises UsageError (naming the fix) for an unsafe setup."""
    env = os.environ if env is None else env
    if token not in ("auto", "require", "none"):
        raise UsageError(f"--token must be auto, require or none, not {token!r}")
    if not 0 <= port <= 65535:
        raise UsageError(f"--port {port} is not a TCP port")
    if max_concurrency is not None and max_concurrency < 1:
        raise UsageError("--max-concurrency must be at least 1")
    if max_request_bytes < 1024:
        raise UsageError("--max-request-bytes must be at least 1024")
    for flag, value in (("--header-timeout", header_timeout_s), ("--body-timeout", body_timeout_s)):
        if not 0 < value <= 600:
            raise UsageError(f"{flag} must be more than 0 and at most 600 seconds, not {value}")
    if not 1 <= keep_alive_s <= 30:
        raise UsageError(
            f"--keep-alive must be 1 to 30 seconds (idle connections close within 30 s), not {keep_alive_s}"
        )
    if max_connections is not None and max_connections < 8:
        raise UsageError("--max-connections must be at least 8")
    loopback = is_loopback(host)
    from_env = (env.get(TOKEN_ENV) or "").strip() or None
    if token == "none":
        if not loopback:
            raise UsageError(
                f"Refusing to serve on {host} without a token: anyone who can reach this port could run code on "
                f"this machine. Drop --token none (a token is then generated, or read from {TOKEN_ENV}), or bind "
                "127.0.0.1 and reach it through an SSH tunnel."
            )
        value, source = None, None
    elif from_env:
        if len(from_env) < 16:
            raise UsageError(f"{TOKEN_ENV} is too short to be a secret (16 characters at least; 32+ is better)")
        value, source = from_env, "environment"
    elif token == "require" or not loopback:
        value, source = secrets.token_urlsafe(32), "generated"
    else:
        value, source = None, None
    return ServeConfig(
        host=host,
        port=port,
        token=value,
        token_source=source,
        allow_origins=[_normalize_origin(o) for o in allow_origins or []],
        max_concurrency=max_concurrency or default_concurrency_value,
        max_request_bytes=max_request_bytes,
        header_timeout_s=header_timeout_s,
        body_timeout_s=body_timeout_s,
        keep_alive_s=keep_alive_s,
        max_connections=max_connections or default_max_connections(),
        roots=_roots(roots),
    )


# --- the ASGI gate ----------------------------------------------------------------------------------------


class SecurityMiddleware:
    """Host/Origin allow-list, bearer token and body size, checked before the MCP app runs."""

    def __init__(self, app: ASGIApp, config: ServeConfig):
        self.app = app
        self.config = config
        self._token = config.token.encode() if config.token else None
        self._origin_hosts = {urlsplit(o).netloc for o in config.allow_origins}
        self._names = host_names(config)

    # Hosts and origins depend on the port actually bound (port 0 picks one), read from the request scope.
    def _hosts(self, port: int) -> set[str]:
        hosts = {f"{name}:{port}" for name in self._names}
        if port == 80:  # the default port is left out of the Host header
            hosts |= set(self._names)
        return hosts | self._origin_hosts

    def _origins(self, port: int) -> set[str]:
        return {f"{scheme}://{name}:{port}" for scheme in ("http", "https") for name in _LOOPBACK_NAMES} | set(
            self.config.allow_origins
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        port = (scope.get("server") or (None, self.config.port))[1] or self.config.port
        host = (headers.get("host") or "").lower()
        if host not in self._hosts(port):
            return await self._refuse(scope, receive, send, 421, "Misdirected request: this Host is not served here")
        origin = headers.get("origin")
        if origin is not None and origin.lower() not in self._origins(port):
            return await self._refuse(
                scope, receive, send, 403, "Forbidden: this Origin is not allowed (see ptt serve --allow-origin)"
            )
        if self._token is not None:
            scheme, _, given = (headers.get("authorization") or "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self._token):
                return await self._refuse(
                    scope,
                    receive,
                    send,
                    401,
                    "Unauthorized: send Authorization: Bearer <token>",
                    {"WWW-Authenticate": 'Bearer realm="ptt"'},
                )
        limit = self.config.max_request_bytes
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            return await self._refuse(scope, receive, send, 413, f"Request body over {limit} bytes")
        # Read the body here (bounded), so a streamed body without Content-Length is refused the same way.
        body = bytearray()
        trailing: list[Message] = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client left (or was cut off by the body timeout) before its body was complete
            if message["type"] != "http.request":
                trailing.append(message)
                break
            body.extend(message.get("body", b""))
            if len(body) > limit:
                return await self._refuse(scope, receive, send, 413, f"Request body over {limit} bytes")
            if not message.get("more_body", False):
                break
        queue: deque[Message] = deque([{"type": "http.request", "body": bytes(body), "more_body": False}, *trailing])

        async def replay() -> Message:
            return queue.popleft() if queue else await receive()

        await self.app(scope, replay, send)

    async def _refuse(
        self, scope: Scope, receive: Receive, send: Send, status: int, text: str, headers: dict | None = None
    ) -> None:
        logger.warning("refused %s %s: %d %s", scope.get("method"), scope.get("path"), status, text)
        await PlainTextResponse(text, status_code=status, headers=headers)(scope, receive, send)


# --- tool-call concurrency ----------------------------------------------------------------------------


class ToolCallLimiter:
    """At most ``limit`` tool calls at once (an MCP server middleware); the rest wait in FIFO order and are
    told their place through progress notifications ("queued: position 2 of 3 …")."""

    def __init__(self, limit: int):
        self.limit = limit
        self.active = 0
        self._waiters: deque[anyio.Event] = deque()
        self._changed = anyio.Event()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def __call__(self, ctx: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
        if getattr(ctx, "method", None) != "tools/call":
            return await call_next(ctx)
        await self._enter(ctx)
        try:
            return await call_next(ctx)
        finally:
            self._leave()

    async def _enter(self, ctx: Any) -> None:
        if self.active < self.limit and not self._waiters:
            self.active += 1
            return
        granted = anyio.Event()
        self._waiters.append(granted)
        self._notify()
        told = 0
        try:
            while not granted.is_set():
                changed = self._changed
                position = self._waiters.index(granted) + 1
                if position != told:
                    told = position
                    message = (
                        f"queued: position {position} of {len(self._waiters)} "
                        f"(the server runs {self.limit} tool calls at once)"
                    )
                    logger.info(message)
                    with contextlib.suppress(Exception):
                        await ctx.session.report_progress(0, None, message)
                    continue
                await changed.wait()
        except BaseException:
            if granted.is_set():
                self._leave()  # a place was handed over that this caller will not use
            else:
                self._waiters.remove(granted)
                self._notify()
            raise

    def _leave(self) -> None:
        if self._waiters:
            self._waiters.popleft().set()  # the place passes to the next caller; active is unchanged
        else:
            self.active -= 1
        self._notify()


# --- connections: read timeouts and a cap -----------------------------------------------------------------


class ConnectionGuard:
    """Deadlines and a cap for the server's connections (uvicorn's h11 protocol has neither a header nor a body
    timeout: a client that never finishes its headers would hold its connection, and a file descriptor, forever).

    Each connection is in one phase: ``request`` (waiting for the request headers: since the connection opened
    or the previous response ended; ``header_timeout_s``), ``body`` (headers in, body still coming;
    ``body_timeout_s`` from the headers) or ``app`` (the request is complete and being answered: no deadline, a
    tool call may run for minutes). A deadline that passes closes the connection. At ``max_connections`` a new
    connection pushes out the oldest connection that has not shown the token and is not being answered, else the
    oldest idle one; when every open connection is running a call, the new one gets a 503 and is closed."""

    def __init__(self, config: ServeConfig):
        self.config = config
        self._token = config.token.encode() if config.token else None
        self.open: dict[GuardedH11Protocol, None] = {}  # insertion order: oldest first
        self.stats = {"header_timeouts": 0, "body_timeouts": 0, "pushed_out": 0, "refused": 0}

    def trusted(self, headers: list[tuple[bytes, bytes]]) -> bool:
        """Whether these request headers carry the token (every request does when no token is set)."""
        if self._token is None:
            return True
        for name, value in headers:
            if name == b"authorization":
                scheme, _, given = value.partition(b" ")
                return scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self._token)
        return False

    def admit(self, conn: GuardedH11Protocol) -> bool:
        if len(self.open) >= self.config.max_connections:
            victim = self._victim()
            if victim is None:
                self.stats["refused"] += 1
                return False
            self.stats["pushed_out"] += 1
            victim.cut(
                "pushed out: at the connection cap and not yet authenticated"
                if not victim.trusted
                else "pushed out: at the connection cap and idle"
            )
        self.open[conn] = None
        return True

    def _victim(self) -> GuardedH11Protocol | None:
        waiting = [c for c in self.open if c.phase != "app"]
        untrusted = [c for c in waiting if not c.trusted]
        return (untrusted or waiting or [None])[0]

    def forget(self, conn: GuardedH11Protocol) -> None:
        self.open.pop(conn, None)

    def protocol_class(self) -> type[GuardedH11Protocol]:
        """The protocol uvicorn builds for each connection, bound to this guard."""
        return type("GuardedH11Protocol", (GuardedH11Protocol,), {"guard": self})


_REFUSED = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\nconnection: close\r\n"
    b"content-length: 48\r\n\r\nToo many connections: every one is running a call"
)


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the :class:`ConnectionGuard`'s deadlines and cap."""

    guard: ConnectionGuard

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        self.phase = "request"
        self.trusted = False
        self._timer: Any = None
        super().connection_made(transport)
        if not self.guard.admit(self):
            logger.warning("refused a connection: %d open, each running a call", len(self.guard.open))
            transport.write(_REFUSED)
            transport.close()
            return
        self._arm(self.guard.config.header_timeout_s, "header_timeouts")

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.guard.forget(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._track()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._track()

    def _track(self) -> None:
        """Move to the phase h11 says the client is in, and set that phase's deadline."""
        if self.transport.is_closing():
            self._disarm()
            return
        state = self.conn.their_state
        phase = "request" if state is h11.IDLE else "body" if state is h11.SEND_BODY else "app"
        if phase == self.phase:
            return
        if self.phase == "request" and self.headers is not None:
            self.trusted = self.guard.trusted(self.headers)  # the headers of the request just read
        self.phase = phase
        if phase == "request":
            self._arm(self.guard.config.header_timeout_s, "header_timeouts")
        elif phase == "body":
            self._arm(self.guard.config.body_timeout_s, "body_timeouts")
        else:
            self._disarm()

    def _arm(self, seconds: float, reason: str) -> None:
        self._disarm()
        self._timer = self.loop.call_later(seconds, self._expire, reason)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self, reason: str) -> None:
        self._timer = None
        self.guard.stats[reason] += 1
        self.cut(
            f"{reason.replace('_', ' ')[:-1]}: the {'headers' if reason == 'header_timeouts' else 'body'} "
            "did not arrive in time"
        )

    def cut(self, why: str) -> None:
        """Close now, without waiting to flush anything to a client that may not be reading."""
        self._disarm()
        self.guard.forget(self)
        client = f"{self.client[0]}:{self.client[1]}" if self.client else "a client"
        logger.info("closed the connection of %s (%s)", client, why)
        if not self.transport.is_closing():
            self.transport.abort()


# --- file arguments: confined to the served folders --------------------------------------------------------


def path_params(tool: str) -> dict[str, Param]:
    """The parameters of an MCP tool that name files, by name (from the shared parameter table)."""
    for params in TOOLS:
        if params.tool == tool:
            return {p.name: p for p in params.on("mcp") if p.path}
    return {}


def named_paths(text: str, kind: str) -> list[str]:
    """Every file a value could name. A spec ``a.py:fn`` names ``a.py``; where the split is ambiguous every
    reading is returned (each prefix ending before a colon, and the whole text), so no reading escapes the
    check. A type list names none."""
    text = text.strip()
    if not text:
        return []
    if kind == "inputs" and looks_like_type_list(text):
        return []
    parts = [text] if kind == "file" else [text[:i] for i, ch in enumerate(text) if ch == ":" and i > 0] + [text]
    # Checked as written and with ~ expanded, whichever of the two the engine reads.
    return parts + [e for e in (os.path.expanduser(p) for p in parts) if e not in parts]


def confine(text: str, kind: str, roots: list[Path], *, cwd: Path | None = None) -> str | None:
    """None when every file ``text`` could name lies inside one of ``roots`` (symlinks resolved, ``..``
    applied); else the error to return."""
    base = cwd or Path.cwd()
    for part in named_paths(text, kind):
        path = Path(part)
        try:
            resolved = (path if path.is_absolute() else base / path).resolve()
        except (OSError, RuntimeError) as exc:  # a loop of links: where it leads cannot be shown to be inside
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            shown = part if len(part) <= 200 else f"{part[:200]}… ({len(part)} characters)"
            return f"{shown!r} cannot be looked up ({why}), so it cannot be shown to lie inside the served folders."
        if not any(resolved.is_relative_to(root) for root in roots):
            served = ", ".join(str(r) for r in roots)
            return (
                f"{part!r} is outside the folders this server serves ({served}); symlinks are followed before the "
                "check. Put the file under a served folder (relative paths start at the server's working folder), "
                "pass the code as source text, or restart the server with --root for that folder."
            )
    return None


class PathConfinement:
    """An MCP server middleware: a tool call whose file arguments (those marked ``path`` in
    :mod:`mcp_server.engine.params`) name anything outside the served roots is answered with a tool error and
    never reaches the engine."""

    def __init__(self, roots: list[Path]):
        self.roots = roots

    def check(self, tool: str, arguments: typing.Mapping[str, Any]) -> str | None:
        for name, param in path_params(tool).items():
            value = arguments.get(name)
            for item in value if isinstance(value, list) else [value]:
                problem = confine(item, str(param.path), self.roots) if isinstance(item, str) else None
                if problem:
                    return f"{name}: {problem}"
        return None

    async def __call__(self, ctx: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
        if getattr(ctx, "method", None) == "tools/call":
            params = ctx.params or {}
            arguments = params.get("arguments") or {}
            problem = self.check(str(params.get("name")), arguments) if isinstance(arguments, dict) else None
            if problem:
                logger.warning("refused a tool call: %s", problem)
                return {"content": [{"type": "text", "text": problem}], "isError": True}
        return await call_next(ctx)


# --- the app and the process ----------------------------------------------------------------------------


def build_http_app(server: MCPServer, config: ServeConfig) -> ASGIApp:
    """The ASGI app: the gate around the SDK's stateless streamable HTTP app serving ``server`` (built with
    ``build_server(pool=...)`` so its validations and benches take places on the GPU worker pool)."""
    server.middleware.append(PathConfinement(config.roots))
    server.middleware.append(ToolCallLimiter(config.max_concurrency))
    # The SDK checks Host/Origin and the body size too; give it the same lists (defence in depth).
    hosts = [f"{name}:*" for name in host_names(config)] + [urlsplit(o).netloc for o in config.allow_origins]
    origins = [f"{s}://{n}:*" for s in ("http", "https") for n in _LOOPBACK_NAMES] + list(config.allow_origins)
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
    )
    app = server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        stateless_http=True,
        max_request_body_size=config.max_request_bytes,
        transport_security=security,
        host=config.host,
    )
    return SecurityMiddleware(app, config)


def host_names(config: ServeConfig) -> list[str]:
    """Names this server answers to in the Host header: loopback, the bound address, and when bound to every
    interface this machine's name and addresses (others: add them with --allow-origin)."""
    names = list(_LOOPBACK_NAMES)
    bound = config.host.strip("[]")
    if bound in ("0.0.0.0", "::", ""):
        with contextlib.suppress(OSError):
            hostname = socket.gethostname()
            names += [hostname.lower(), socket.getfqdn().lower()]
            names += socket.gethostbyname_ex(hostname)[2]
    elif not is_loopback(bound):
        names.append(f"[{bound}]" if ":" in bound else bound.lower())
    return sorted(set(names))


def uvicorn_server(app: ASGIApp, config: ServeConfig) -> tuple[Any, ConnectionGuard]:
    """The uvicorn server for ``app`` with every connection under a :class:`ConnectionGuard` (h11 with the
    guard's deadlines and cap; the keep-alive timeout from the config), and that guard."""
    import uvicorn

    guard = ConnectionGuard(config)
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=config.host,
            port=config.port,
            log_level="warning",
            server_header=False,
            http=guard.protocol_class(),
            timeout_keep_alive=config.keep_alive_s,
            # A connection is refused or pushed out by the guard, never answered 503 by uvicorn for its count.
            limit_concurrency=None,
        )
    )
    return server, guard


def listen_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host``:``port`` and listening, taken before the pool starts or anything is printed: an
    address that is not this machine's, or a port something else holds, is then said plainly with its fix (UsageError,
    EnvironmentUnavailable), instead of by uvicorn's log after the server has announced itself."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise UsageError(
            f"--host {host} is not an address this machine can resolve ({exc.strerror}). Pass 127.0.0.1, 0.0.0.0 "
            "or an address of this machine."
        ) from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)  # uvicorn's default backlog
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise EnvironmentUnavailable(
                f"port {port} on {host} is in use by another process; pass another --port, or stop what holds it."
            ) from None
        if exc.errno == errno.EADDRNOTAVAIL:
            raise UsageError(
                f"--host {host} is not an address of this machine; pass 127.0.0.1, 0.0.0.0 or one of its addresses."
            ) from None
        if exc.errno == errno.EACCES:
            raise EnvironmentUnavailable(
                f"this process may not listen on port {port} of {host}; pass a --port of 1024 or above."
            ) from None
        raise EnvironmentUnavailable(f"cannot listen on {host} port {port}: {exc.strerror}.") from None
    return sock


def keep_token_from_children(env: typing.MutableMapping[str, str] | None = None) -> None:
    """Take the token out of this process's environment before any child process starts (the fork servers copy
    it, and every job's child with them), and, on Linux, make this process's /proc files (its initial
    environment, its memory) unreadable to other processes of the same user that lack CAP_SYS_PTRACE."""
    (os.environ if env is None else env).pop(TOKEN_ENV, None)
    if sys.platform == "linux":
        with contextlib.suppress(Exception):
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0


def run_http(
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    token: TokenMode = "auto",
    allow_origins: list[str] | None = None,
    max_concurrency: int | None = None,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S,
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
    keep_alive_s: int = DEFAULT_KEEP_ALIVE_S,
    max_connections: int | None = None,
    roots: list[str] | None = None,
) -> None:
    """Check the options, start the GPU pool, print where to connect, and serve until interrupted."""
    from mcp_server.engine.pool import set_shared_pool, shared_pool
    from mcp_server.server import build_server

    # Refuse an unsafe setup before starting anything.
    config = resolve_config(
        host=host,
        port=port,
        token=token,
        allow_origins=allow_origins,
        max_concurrency=max_concurrency,
        max_request_bytes=max_request_bytes,
        header_timeout_s=header_timeout_s,
        body_timeout_s=body_timeout_s,
        keep_alive_s=keep_alive_s,
        max_connections=max_connections,
        roots=roots,
    )
    sock = listen_socket(config.host, config.port)
    try:
        keep_token_from_children()  # before the pool starts its fork servers
        sys.stderr.write("ptt serve: starting the worker pool (probing the devices)…\n")
        pool = shared_pool()
        if max_concurrency is None:
            config.max_concurrency = default_concurrency(len(pool.workers), pool.interpreter)
        app = build_http_app(build_server(pool=pool), config)
        where = ", ".join(f"{w.name} ({w.device.device})" for w in pool.workers)
        sys.stderr.write(
            f"ptt serve: MCP over streamable HTTP at {config.url}\n"
            f"  workers: {where}; at most {config.max_concurrency} tool calls at once (more wait in line)\n"
            f"  requests: Host/Origin checked (extra origins: {', '.join(config.allow_origins) or 'none'}), "
            f"bodies up to {config.max_request_bytes} bytes\n"
            f"  connections: at most {config.max_connections}; headers within {config.header_timeout_s:g} s, "
            f"bodies within {config.body_timeout_s:g} s, idle ones closed after {config.keep_alive_s} s\n"
            f"  file arguments confined to: {', '.join(str(r) for r in config.roots)}\n"
        )
        if config.token_source == "generated":
            sys.stderr.write(
                "  bearer token (shown once; clients send 'Authorization: Bearer <token>'; set "
                f"{TOKEN_ENV} to choose your own):\n  {config.token}\n"
            )
        elif config.token_source == "environment":
            sys.stderr.write(f"  bearer token: the value of {TOKEN_ENV}\n")
        else:
            sys.stderr.write("  no token: loopback only (use --token require on a shared machine)\n")
        sys.stderr.flush()
        try:
            uvicorn_server(app, config)[0].run(sockets=[sock])
        finally:
            set_shared_pool(None)
            pool.close()
    finally:
        sock.close()
