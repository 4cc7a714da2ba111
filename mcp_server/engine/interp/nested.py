"""Calls of one ``@triton.jit`` function from another, under the interpreter, without re-patching the language.

A launch (``GridExecutor.__call__``) swaps the builtins of ``triton.language`` for interpreter versions, runs
the grid, and puts them back. Every call of a jit helper inside the kernel (``InterpretedFunction.__call__``)
swaps them again: it walks ``triton.language``, ``tl.tensor`` and ``tl.math`` with ``inspect.getmembers`` and
rebuilds dozens of wrappers, per call, per program of the grid. In a kernel that calls helpers in its inner
loop that is a fifth of the interpreter's time, and it changes nothing: the builtins the helper can see are
already the interpreter's (after the launch's own patch they are no longer marked builtin, so the walk
replaces none of them; the tensor and core attributes it sets again are equivalent to the launch's). Helpers
of Triton's standard library (``tl.zeros``, ``tl.sum``) see ``triton.language.core`` rather than
``triton.language``: the first such call in a launch patches that module, as Triton does, and it stays
patched until the launch ends.

:func:`install` skips that second patch when a launch is running and has already patched every language
module the helper's globals hold (``triton.language`` and/or ``triton.language.core``); any other call goes
through Triton's own path unchanged, and what it patched counts as patched for the rest of the launch.
"""

from __future__ import annotations

from typing import Any

_installed = False
# One entry per launch in progress (a launch inside a launch is possible through a host callback): the ids of
# the language modules patched since it started, by its own patch (the modules its kernel sees) and by helper
# calls that took Triton's path (their patches are not undone before the launch ends).
_launches: list[set[int]] = []


def _languages(fn: Any) -> frozenset[int]:
    import triton.language as tl

    # By identity alone (the two are modules): this runs at every helper call of every program.
    wanted = {id(tl), id(tl.core)}
    return frozenset(i for i in map(id, fn.__globals__.values()) if i in wanted)


def install() -> None:
    """Patch the interpreter once per process (idempotent). A Triton without these classes is left alone."""
    global _installed
    if _installed:
        return
    _installed = True
    from triton.runtime import interpreter as interp

    executor = getattr(interp, "GridExecutor", None)
    function = getattr(interp, "InterpretedFunction", None)
    error = getattr(interp, "InterpreterError", None)
    if executor is None or function is None or error is None or not hasattr(function, "rewrite"):
        return
    launch = executor.__call__
    call = function.__call__

    def launch_grid(self: Any, *args: Any, **kwargs: Any) -> Any:
        _launches.append(set(_languages(self.fn)))
        try:
            return launch(self, *args, **kwargs)
        finally:
            _launches.pop()

    def call_helper(self: Any, *args: Any, **kwargs: Any) -> Any:
        langs = _languages(self.fn) if _launches else frozenset()
        if not langs or not langs <= set().union(*_launches):  # none visible: Triton's own error
            result = call(self, *args, **kwargs)
            if _launches:
                _launches[-1].update(langs)
            return result
        fn = self.rewrite()
        try:
            return fn(*args, **kwargs)
        except Exception as e:  # as Triton's own call does: the kernel's error, named
            raise error(repr(e)) from e

    executor.__call__ = launch_grid
    function.__call__ = call_helper
