"""Scalar interpreter tensors as loop bounds and indices under every NumPy.

Under the interpreter a scalar ``tl.tensor`` holds a one-element array of shape ``(1,)``, and Triton 3.6 gives
the tensor class an ``__index__`` of ``int(handle.data)``. NumPy deprecated converting an array with ndim > 0 to a
Python scalar in 1.25 (a DeprecationWarning on every ``range()`` over a runtime bound) and made it a TypeError in
2.4: from there every kernel with such a loop fails under Triton's interpreter, right or wrong. :func:`install`
wraps the interpreter's patching of the tensor class so that ``__index__`` converts the one element (reshaped to
0-d first), giving the value the old conversion gave; an array of several elements raises as it did.
"""

from __future__ import annotations

from typing import Any

_installed = False
_original: Any = None  # Triton's own tensor patching, kept for the tests


def index(tensor: Any) -> int:
    data = tensor.handle.data
    return int(data.reshape(()) if data.size == 1 else data)


def install() -> None:
    """Patch the interpreter once per process (idempotent). A Triton without the patch point is left alone."""
    global _installed, _original
    if _installed:
        return
    _installed = True
    from triton.runtime import interpreter as interp

    patch_tensor = getattr(interp, "_patch_lang_tensor", None)
    if patch_tensor is None:
        return
    _original = patch_tensor

    def _patch_lang_tensor(tensor: Any, scope: Any) -> None:
        patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", index)

    interp._patch_lang_tensor = _patch_lang_tensor
