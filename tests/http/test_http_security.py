"""The HTTP gate: config checks (no bind), then token, Origin, Host and body-size refusals on a live server."""

from __future__ import annotations

import httpx
import pytest

from mcp_server.engine.errors import UsageError
from mcp_server.http_serve import TOKEN_ENV, is_loopback, resolve_config

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


# --- configuration (nothing is bound) --------------------------------------------------------------------


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "127.0.0.2"])
def test_loopback_addresses_are_recognised(host):
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "gpu-box", "192.168.0.7"])
def test_other_addresses_are_not_loopback(host):
    assert not is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "10.1.2.3", "gpu-box"])
def test_a_non_loopback_bind_without_a_token_is_refused(host):
    with pytest.raises(UsageError, match="without a token"):
        resolve_config(host=host, token="none", env={})


def test_a_non_loopback_bind_generates_a_token_when_none_is_set():
    config = resolve_config(host="0.0.0.0", env={})
    assert config.token_source == "generated" and config.token and len(config.token) >= 32
    assert resolve_config(host="0.0.0.0", env={}).token != config.token


def test_the_token_comes_from_the_environment_when_set():
    config = resolve_config(host="0.0.0.0", env={TOKEN_ENV: "s3cret-from-the-environment"})
    assert config.token == "s3cret-from-the-environment" and config.token_source == "environment"


def test_a_short_token_in_the_environment_is_refused():
    with pytest.raises(UsageError, match="too short"):
        resolve_config(host="0.0.0.0", env={TOKEN_ENV: "abc"})


def test_loopback_needs_no_token_unless_asked():
    assert resolve_config(host="127.0.0.1", env={}).token is None
    assert resolve_config(host="127.0.0.1", token="none", env={}).token is None
    assert resolve_config(host="127.0.0.1", token="require", env={}).token_source == "generated"


@pytest.mark.parametrize("origin", ["gpu-box:8765", "ftp://x", "not a url"])
def test_a_malformed_allowed_origin_is_refused(origin):
    with pytest.raises(UsageError, match="not an origin"):
        resolve_config(allow_origins=[origin], env={})


def test_allowed_origins_are_normalised():
    config = resolve_config(allow_origins=["HTTPS://Agents.Example:8443/"], env={})
    assert config.allow_origins == ["https://agents.example:8443"]


def test_cli_serve_refuses_no_token_on_a_public_address_before_binding(capsys):
    from mcp_server.cli import main

    assert main(["serve", "--transport", "http", "--host", "0.0.0.0", "--token", "none"]) == 2
    assert "without a token" in capsys.readouterr().err


# --- the live server --------------------------------------------------------------------------------------


def post(server, *, token="good", headers=None, **kwargs):
    h = dict(MCP_HEADERS)
    if token == "good":
        h["Authorization"] = f"Bearer {server.token}"
    elif token is not None:
        h["Authorization"] = token
    h.update(headers or {})
    kwargs.setdefault("json", INIT)
    return httpx.post(server.url, headers=h, timeout=30, **kwargs)


def test_a_request_with_the_token_is_served(live_server):
    assert post(live_server).status_code == 200


@pytest.mark.parametrize("auth", [None, "Bearer wrong-token", "Basic dXNlcjpwYXNz", "Bearer", "Token abc"])
def test_a_missing_or_wrong_token_is_refused_with_401(live_server, auth):
    response = post(live_server, token=auth)
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")


def test_the_bearer_scheme_is_case_insensitive(live_server):
    assert post(live_server, token=f"bearer {live_server.token}").status_code == 200


@pytest.mark.parametrize("origin", ["http://evil.example", "http://127.0.0.1.evil.example:1", "null"])
def test_a_foreign_origin_is_refused_with_403_even_with_the_token(live_server, origin):
    assert post(live_server, headers={"Origin": origin}).status_code == 403


def test_a_loopback_origin_on_the_bound_port_and_an_allowed_origin_pass(live_server):
    for origin in (f"http://localhost:{live_server.port}", "https://agents.example:8443"):
        assert post(live_server, headers={"Origin": origin}).status_code == 200, origin


def test_a_loopback_origin_on_another_port_is_refused(live_server):
    assert post(live_server, headers={"Origin": f"http://localhost:{live_server.port + 1}"}).status_code == 403


def test_a_foreign_host_header_is_refused(live_server):
    # A DNS-rebinding page reaches 127.0.0.1 under its own name.
    assert post(live_server, headers={"Host": f"attacker.example:{live_server.port}"}).status_code == 421


def test_an_oversize_body_is_refused_with_413(live_server):
    big = b'{"pad": "' + b"x" * (128 * 1024) + b'"}'
    assert post(live_server, json=None, content=big).status_code == 413


def test_an_oversize_streamed_body_without_content_length_is_refused_with_413(live_server):
    def chunks():
        for _ in range(40):
            yield b"x" * 4096

    assert post(live_server, json=None, content=chunks()).status_code == 413


def test_refusals_come_before_the_body_is_judged(live_server):
    big = b"x" * (128 * 1024)
    assert post(live_server, token=None, json=None, content=big).status_code == 401


def test_a_server_on_every_interface_answers_to_this_machines_name_and_needs_the_token():
    import socket

    import anyio
    from starlette.responses import PlainTextResponse

    from mcp_server.http_serve import SecurityMiddleware

    config = resolve_config(host="0.0.0.0", port=8765, env={TOKEN_ENV: "a-token-of-enough-length"})
    app = SecurityMiddleware(PlainTextResponse("inner"), config)
    name = socket.gethostname().lower()

    async def go(host: str, token: str | None) -> int:
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with httpx.AsyncClient(transport=transport) as c:
            return (await c.post(f"http://{host}:8765/mcp", headers=headers, content=b"{}")).status_code

    assert anyio.run(go, name, "a-token-of-enough-length") == 200
    assert anyio.run(go, "127.0.0.1", "a-token-of-enough-length") == 200
    assert anyio.run(go, name, None) == 401
    assert anyio.run(go, "rebound.attacker.example", "a-token-of-enough-length") == 421
