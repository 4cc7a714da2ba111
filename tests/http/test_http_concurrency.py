"""Many clients over real HTTP on 127.0.0.1: each gets its own, correct result, a crashing job leaves the
others alone, and callers beyond the concurrency limit are told their place in the queue."""

from __future__ import annotations

import contextlib
from pathlib import Path

import anyio
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

VALIDATE_FX = Path(__file__).resolve().parents[1] / "fixtures" / "validate"

# candidate file → (ok, the error kinds its verdict must name); cycled so every client gets a mix. The
# segfault goes through ctypes, which the candidate scan also names (evasion).
CANDIDATES = [
    ("add_good.py", True, frozenset()),
    ("add_unwritten.py", False, frozenset({"uninitialized_output"})),
    ("add_segfault.py", False, frozenset({"crash", "evasion"})),
    ("add_good.py", True, frozenset()),
    ("add_wrong_shape.py", False, frozenset({"shape_mismatch"})),
]


@contextlib.asynccontextmanager
async def client(server, token=None):
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token or server.token}"})
    async with http, Client(streamable_http_client(server.url, http_client=http)) as c:
        yield c


def validate_args(candidate: str) -> dict:
    return {
        "reference": f"{VALIDATE_FX}/add_problem.py:reference",
        "candidate": f"{VALIDATE_FX}/{candidate}:candidate",
        "seeds": 1,
        "derive_shapes": False,
    }


@pytest.mark.slow
def test_four_clients_with_ten_concurrent_validations_each_get_their_own_verdicts(live_server):
    results: dict[tuple[int, int], object] = {}
    progress: list[str] = []

    async def one_client(c_index: int) -> None:
        async with client(live_server) as c:

            async def call(j: int) -> None:
                name = CANDIDATES[(c_index + j) % len(CANDIDATES)][0]

                async def told(done, total, message):
                    progress.append(message)

                results[(c_index, j)] = (
                    name,
                    await c.call_tool("validate_against_reference", validate_args(name), progress_callback=told),
                )

            async with anyio.create_task_group() as tg:
                for j in range(10):
                    tg.start_soon(call, j)

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for i in range(4):
                tg.start_soon(one_client, i)

    anyio.run(main)
    assert len(results) == 40
    expected = {name: (ok, kind) for name, ok, kind in CANDIDATES}
    crashes = 0
    for (i, j), (name, result) in sorted(results.items()):
        assert not result.is_error, (i, j, result.content)
        data = result.structured_content
        ok, kind = expected[name]
        assert data["candidate"].endswith(f"{name}:candidate"), (i, j, name, data["candidate"])
        assert data["ok"] is ok, (i, j, name, data["summary"])
        kinds = {f["kind"] for f in data["findings"] if f["severity"] == "error"}
        assert kinds == kind, (i, j, name, kinds)
        crashes += "crash" in kind
    assert crashes >= 4  # crashing jobs ran among the others and touched none of their verdicts
    # 40 calls against a limit of 4: most waited, and were told where they stood.
    assert any(m.startswith("queued: position") for m in progress)


@pytest.mark.slow
def test_a_caller_beyond_the_limit_is_told_its_position(live_server):
    # The server runs 4 tool calls at once; 7 calls from one client make at least 3 wait.
    messages: list[list[str]] = [[] for _ in range(7)]

    async def main() -> None:
        async with client(live_server) as c:

            async def call(k: int) -> None:
                async def told(done, total, message):
                    messages[k].append(message)

                result = await c.call_tool(
                    "validate_against_reference", validate_args("add_good.py"), progress_callback=told
                )
                assert result.structured_content["ok"] is True

            async with anyio.create_task_group() as tg:
                for k in range(7):
                    tg.start_soon(call, k)

    anyio.run(main)
    queued = [m for ms in messages for m in ms if m.startswith("queued: position")]
    assert len({i for i, ms in enumerate(messages) if any(m.startswith("queued") for m in ms)}) >= 3
    assert any("position 1 of" in m for m in queued)
    assert all("tool calls at once" in m for m in queued)


def test_a_client_with_a_wrong_token_gets_no_session(live_server):
    async def main() -> None:
        async with client(live_server, token="not-the-token") as c:
            await c.list_tools()

    with pytest.raises(Exception):  # noqa: B017 - the SDK wraps the 401 in its own error types
        anyio.run(main)


def test_the_http_server_offers_the_same_tools_as_stdio_with_the_same_schemas(live_server):
    from mcp_server.server import build_server

    async def over_http():
        async with client(live_server) as c:
            return {t.name: t for t in (await c.list_tools()).tools}

    async def in_memory():
        async with Client(build_server()) as c:
            return {t.name: t for t in (await c.list_tools()).tools}

    http, local = anyio.run(over_http), anyio.run(in_memory)
    assert set(http) == set(local)
    for name in ("validate_against_reference", "bench"):
        assert http[name].input_schema == local[name].input_schema
        assert http[name].output_schema == local[name].output_schema
        assert http[name].description == local[name].description
        assert http[name].annotations == local[name].annotations
