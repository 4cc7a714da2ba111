"""The judge's own code in a child where user code runs: what the candidate replaced there, and putting it back.

Bench times the candidate in the process the candidate runs in, with the judge's timer, checks and result writer
beside it. The static scan refuses the plain ways to reach them (importing ``mcp_server``, ``sys.modules``, frames,
object walks, assigning into ``torch``, ``time`` or ``builtins``); code run through ``exec`` of a computed string is
not plain. So before any user code is imported the child takes the identity of every attribute of the judge's
modules and classes, and of the library modules and classes its timing and results go through; it looks again
after the candidate's code has run. Whatever was replaced or removed is put back, and the candidate's timings are
refused. (Code in the same process can always undo a check in that process; this one makes the route long.)
"""

from __future__ import annotations

import contextlib
import sys
from types import MappingProxyType
from typing import Any

from mcp_server.engine.jobs import recorder

_MISSING = object()
# Library modules the timer, the statistics and the result writer use, and the thread starters the op recorder
# wraps (a thread started by an unwrapped one would run torch ops the recorder does not see).
LIBRARY_MODULES = (
    "builtins",
    "time",
    "math",
    "statistics",
    "secrets",
    "json",
    "json.encoder",
    "_json",
    "os",
    "pathlib",
    "torch.cuda",
    "threading",
    "_thread",
)


def _spaces() -> list[tuple[str, Any]]:
    spaces: list[tuple[str, Any]] = []
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "mcp_server" or name.startswith("mcp_server.") or name in LIBRARY_MODULES):
            continue
        spaces.append((name, module))
        for attr, obj in list(vars(module).items()):
            # The module's own classes (and torch.cuda's Event, Stream, CUDAGraph…), not those it imported.
            owner = getattr(obj, "__module__", None) if isinstance(obj, type) else None
            if owner in (name, f"{name}.streams", f"{name}.graphs"):
                spaces.append((f"{name}.{attr}", obj))
    import pathlib

    spaces.append(("pathlib.Path", pathlib.Path))
    return spaces + _launch_classes()


# The Triton classes whose ``run`` the op recorder wraps (jobs.recorder.install_launch_hooks): launches are counted
# and their streams noted there, so that bench's end event waits for a side stream the candidate launched on.
LAUNCH_CLASSES = (
    ("triton.runtime.jit", ("KernelInterface", "JITFunction")),
    ("triton.runtime.autotuner", ("Autotuner", "Heuristics")),
    ("triton.runtime.interpreter", ("InterpretedFunction",)),
)


def _launch_classes() -> list[tuple[str, Any]]:
    return loaded_spaces(LAUNCH_CLASSES, modules=False)


def loaded_spaces(specs: Any, modules: bool = True) -> list[tuple[str, Any]]:
    """(label, namespace) for each (module name, class names) of ``specs`` whose module is already imported: the
    module itself (``modules``) and each of the classes named."""
    spaces: list[tuple[str, Any]] = []
    for module_name, names in specs:
        module = sys.modules.get(module_name)
        if module is None:
            continue
        if modules:
            spaces.append((module_name, module))
        for name in names:
            cls = getattr(module, name, None)
            if isinstance(cls, type):
                spaces.append((f"{module_name}.{name}", cls))
    return spaces


Identities = dict[tuple[str, str], tuple[Any, Any]]


def is_code(obj: Any) -> bool:
    """A function, class, callable or descriptor: what replacing changes behaviour, not state."""
    return callable(obj) or isinstance(obj, (staticmethod, classmethod, property))


def identities(spaces: list[tuple[str, Any]], keep: Any) -> Identities:
    """(label, attribute) → (namespace, the attribute's object), for each attribute of ``spaces`` that ``keep(label,
    attr, obj)`` accepts."""
    out: Identities = {}
    for label, space in spaces:
        for attr, obj in list(vars(space).items()):
            if keep(label, attr, obj):
                out[(label, attr)] = (space, obj)
    return out


def put_back(ids: Identities) -> list[str]:
    """Set every attribute of ``ids`` that is another object now (or gone) back to its object there; the names of
    those put back (a read-only slot is named and left as it is)."""
    found = []
    for (label, attr), (space, obj) in ids.items():
        if vars(space).get(attr, _MISSING) is obj:
            continue
        found.append(f"{label}.{attr}")
        with contextlib.suppress(AttributeError, TypeError):
            setattr(space, attr, obj)
    return found


def _watched(label: str, attr: str, obj: Any) -> bool:
    """Code and the judge's constants: functions, classes, descriptors, and UPPER_CASE values of the judge's modules
    that cannot change in place (a limit like ``CHECK_FACTOR``, the recorder's op sets, the default tolerances). Other
    values are state the judge itself changes as it runs."""
    if is_code(obj):
        return True
    judge = label == "mcp_server" or label.startswith("mcp_server.")
    return judge and attr.isupper() and isinstance(obj, (int, float, str, tuple, frozenset, MappingProxyType))


class Guard:
    """Identities taken now (and again by ``retake``); ``check`` names what differs later and puts it back."""

    def __init__(self) -> None:
        self.snapshot: Identities = {}
        self.replaced: list[str] = []
        self.retake()

    def retake(self) -> None:
        """Take the identities again: done each time the candidate gets the process, so that what torch itself
        changes meanwhile (compiling the baseline, say) is not taken for the candidate's doing."""
        self.snapshot = identities(_spaces(), _watched)

    def check(self) -> list[str]:
        """What was replaced or removed since the snapshot (also kept in ``replaced``), each put back; and the op
        recorder's state that is not what the judge leaves at a handback (``recorder.handback_problems``)."""
        found = put_back(self.snapshot) + recorder.handback_problems()
        self.replaced += [name for name in found if name not in self.replaced]
        return found
