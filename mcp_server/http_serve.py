"""`ptt serve --transport http`: the MCP server over streamable HTTP, for many agents and many GPUs.

The SDK's streamable HTTP app (stateless: every request stands alone), wrapped in one ASGI middleware that
refuses, before the SDK sees anything:

- a Host that is not this server (421) and an Origin that is not allowed (403) — DNS rebinding: a web page
  must not be able to drive a server on localhost;
- a request without ``Authorization: Bearer <token>`` when a token is set (401; compared in constant time);
- a body over ``max_request_bytes`` (413).

Binding anything but a loopback address needs a token: generated (printed to stderr once) or read from
``PTT_SERVE_TOKEN``. Tool calls run at most ``max_concurrency`` at once; callers beyond wait in FIFO order
and are told their position through progress notifications. The server is ``build_server(pool=...)``: its
``validate_against_reference`` and ``bench`` take a place on the GPU worker pool (:mod:`mcp_server.engine.pool`),
so validations spread over the GPUs and a bench has its GPU to itself. Every job still runs in its own isolated
child. Started by ``ptt serve --transport http`` (:mod:`mcp_server.cli.serve`).
"""

from __future__ import annotations

import contextlib
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
from typing import Any, Literal
from urllib.parse import urlsplit

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_server.engine.errors import UsageError

logger = logging.getLogger("pytorch_to_triton.serve")

TOKEN_ENV = "PTT_SERVE_TOKEN"
DEFAULT_MAX_REQUEST_BYTES = 1 << 20  # 1 MiB: a kernel's source is a few KiB; 1 MiB leaves room for long ones
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

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host and not self.host.startswith("[") else self.host
        return f"http://{host}:{self.port}{MCP_PATH}"


def default_concurrency(workers: int, interpreter: bool) -> int:
    """Two tool calls per GPU keep each busy while the other's child starts; 4 without GPUs."""
    return 4 if interpreter else max(2, 2 * workers)


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


# --- the app and the process ----------------------------------------------------------------------------


def build_http_app(server: MCPServer, config: ServeConfig) -> ASGIApp:
    """The ASGI app: the gate around the SDK's stateless streamable HTTP app serving ``server`` (built with
    ``build_server(pool=...)`` so its validations and benches take places on the GPU worker pool)."""
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


def run_http(
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    token: TokenMode = "auto",
    allow_origins: list[str] | None = None,
    max_concurrency: int | None = None,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
) -> None:
    """Check the options, start the GPU pool, print where to connect, and serve until interrupted."""
    import uvicorn

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
    )
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
        uvicorn.Server(
            uvicorn.Config(app, host=config.host, port=config.port, log_level="warning", server_header=False)
        ).run()
    finally:
        set_shared_pool(None)
        pool.close()
