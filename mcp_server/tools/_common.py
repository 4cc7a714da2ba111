"""Shared by every MCP tool: signatures from the shared parameter sets, annotations, error mapping, the
progress bridge, source text in place of a file, and where a tool's jobs run (the shared runner, or a place on
the GPU worker pool when the server was built with one)."""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import anyio
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import Field

from mcp_server.engine.errors import EnvironmentUnavailable, UsageError
from mcp_server.engine.params import Param, ToolParams
from mcp_server.engine.runner import RunnerError

if TYPE_CHECKING:
    from mcp_server.engine.pool import JobKind, WorkerPool
    from mcp_server.engine.runner import Runner

Progress = Callable[[float, float | None, str], None]

READ_ONLY = ToolAnnotations(readOnlyHint=True, idempotentHint=True, openWorldHint=False, destructiveHint=False)
WRITES = ToolAnnotations(readOnlyHint=False, idempotentHint=False, openWorldHint=False, destructiveHint=False)
WRITES_IDEMPOTENT = ToolAnnotations(readOnlyHint=False, idempotentHint=True, openWorldHint=False, destructiveHint=False)


# --- signatures -----------------------------------------------------------------------------------------------


def annotated(p: Param) -> Any:
    """The MCP type of a shared parameter: its type with its description and bounds."""
    return Annotated[p.type, Field(description=p.help, **p.limits)]


def tool_function(
    params: ToolParams,
    body: Callable[[Context, dict[str, Any]], Awaitable[Any]],
    *,
    returns: Any,
    doc: str,
) -> Callable[..., Any]:
    """An MCP tool named ``params.tool`` whose arguments are exactly the set's MCP parameters (plus the
    Context), whose description is ``doc`` and whose body is ``body(ctx, arguments)``."""
    keyword = inspect.Parameter.KEYWORD_ONLY
    sig_params = [inspect.Parameter("ctx", keyword, annotation=Context)]
    for p in params.on("mcp"):
        default = inspect.Parameter.empty if p.required else p.default
        sig_params.append(inspect.Parameter(p.name, keyword, default=default, annotation=annotated(p)))

    async def tool(**kwargs: Any) -> Any:
        ctx = kwargs.pop("ctx")
        return await body(ctx, kwargs)

    signature = inspect.Signature(sig_params, return_annotation=returns)
    tool.__signature__ = signature  # type: ignore[attr-defined]
    tool.__annotations__ = {p.name: p.annotation for p in sig_params} | {"return": returns}
    tool.__name__ = tool.__qualname__ = str(params.tool)
    tool.__doc__ = doc
    return tool


# --- errors and threads ---------------------------------------------------------------------------------------


async def call_engine(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """Run blocking engine work in a worker thread; misuse becomes a tool error with the engine's text."""
    try:
        return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))
    except UsageError as exc:
        raise ToolError(str(exc)) from None
    except (EnvironmentUnavailable, RunnerError) as exc:
        raise ToolError(f"This machine cannot do that: {exc}") from None


def progress_to(ctx: Context | None) -> Progress:
    """Engine progress (called from a worker thread) as MCP progress notifications to the caller."""

    def progress(done: float, total: float | None, message: str) -> None:
        if ctx is not None:
            with contextlib.suppress(Exception):
                anyio.from_thread.run(ctx.report_progress, done, total, message)

    return progress


# --- source text in place of a file ---------------------------------------------------------------------------


def callable_spec(
    args: dict[str, Any],
    role: str,
    *,
    save: Callable[[str, str], Path] | None = None,
) -> str:
    """``path.py:name`` from ``args[role]`` or from ``args[role + '_source']`` + ``args[role + '_name']``
    (the source written to a file by ``save(source, role)``; default a private temporary file). The three keys
    are taken out of ``args``."""
    path_spec = args.pop(role, None)
    source = args.pop(f"{role}_source", None)
    name = args.pop(f"{role}_name", None)
    if path_spec and source:
        raise ToolError(f"Give the {role} either as a file spec or as source text, not both.")
    if source:
        if not name:
            raise ToolError(f"{role}_name is required with {role}_source: name the callable defined in the source.")
        if save is None:
            from mcp_server.engine.specs import source_to_file

            path = source_to_file(source, stem=role)
        else:
            path = save(source, role)
        return f"{path}:{name}"
    if not path_spec:
        raise ToolError(f"The {role} is missing: pass {role}='path/to/file.py:name' or {role}_source + {role}_name.")
    return path_spec


# --- where jobs run -------------------------------------------------------------------------------------------


class Placement:
    """Where a tool's engine jobs run: the process's shared runner (``pool`` None: stdio, tests), or a place on
    the GPU worker pool (HTTP: validations spread over the GPUs, a bench has its GPU to itself)."""

    def __init__(self, pool: WorkerPool | None = None):
        self.pool = pool

    @contextlib.asynccontextmanager
    async def runner(self, kind: JobKind, ctx: Context | None) -> AsyncIterator[Runner | None]:
        """The runner to pass to the engine (None: the shared one). Queue positions go to the caller as
        progress while waiting for a place."""
        if self.pool is None:
            yield None
            return
        pool = self.pool

        def told(position: int, message: str) -> None:
            progress_to(ctx)(0, None, message)

        holder: list[Any] = []

        def take() -> None:
            holder.append(pool.acquire(kind, on_queue=told))

        try:
            await anyio.to_thread.run_sync(take)
            yield holder[0].runner
        finally:
            # Also when the call was cancelled while waiting: the thread still ends with a lease to give back.
            for lease in holder:
                lease.release()
