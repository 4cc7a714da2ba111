"""Static scan of the candidate's own modules for known ways out of the judge (runs here, in the parent).

The recorder that sees torch ops and Triton launches lives in the child beside the candidate, which could
switch it off; the sandbox limits what a child can do to processes and files. This scan reads the
candidate's source (never runs it) for the means: dispatch-mode and recorder toggles, tracing and
profiling hooks, ``/proc/self``, ``ctypes``, subprocesses and signals, the reference's own module or the
runner's files, and numpy arithmetic on tensor data. Scanned: the candidate's file and every module it
imports from its own folder (or package), recursively; never site-packages.

Each hit is a finding: ``evasion`` (tampers with what the judge sees), ``process_escape`` (processes and
signals), ``reads_reference`` (the reference's code or data, or the runner's job files),
``host_compute`` (the arithmetic ran in numpy on the host). Errors where the construct has no place in a
kernel's launcher and serves to cheat; warnings where it is merely unusual. references/audit.md lists them.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from mcp_server.engine.models import Finding, FindingKind, Location, Severity
from mcp_server.engine.pyast import parse_python

MAX_FILES = 64
MAX_BYTES = 2_000_000


@dataclass(frozen=True)
class Rule:
    pattern: re.Pattern[str]
    kind: FindingKind
    severity: Severity
    why: str


def _rule(pattern: str, kind: FindingKind, severity: Severity, why: str) -> Rule:
    return Rule(re.compile(pattern), kind, severity, why)


E, W = Severity.error, Severity.warning
EV, PROC, REF, HOST = (
    FindingKind.evasion,
    FindingKind.process_escape,
    FindingKind.reads_reference,
    FindingKind.host_compute,
)

# Matched against the fully qualified dotted name of every import and attribute chain (aliases resolved).
NAME_RULES: tuple[Rule, ...] = (
    _rule(r"^torch\.utils\._python_dispatch\b", EV, E, "switches PyTorch dispatch modes (the op recorder is one)"),
    _rule(
        r"(TorchDispatchMode|_DisableTorchDispatch|DispatchKeyGuard|_EnablePythonDispatcher|no_dispatch"
        r"|_disable_current_modes|_pop_mode|_push_mode|_torch_dispatch_stack|_dispatch_mode|DisableTorchFunction"
        r"|_DisableFuncTorch|_AutoDispatchBelow\w*|_unsafe_set_level)$",
        EV,
        E,
        "switches PyTorch dispatch off or around the op recorder",
    ),
    _rule(r"^torch\._C\._dispatch_", EV, E, "calls the dispatcher directly, under the op recorder"),
    _rule(
        r"^torch\.library\.(fallthrough_kernel|get_kernel)$",
        EV,
        E,
        "skips the Python dispatch key, where the op recorder is, or runs an op's kernel below it",
    ),
    _rule(
        r"^torch\._C\.(DispatchKeySet|DispatchKey|_DispatchOperatorHandle)\b",
        EV,
        E,
        "names a dispatch key: an op run for a key below the Python one (``redispatch``, ``_op_dk``) skips the op "
        "recorder",
    ),
    _rule(
        r"^torch\._inductor\.(aoti_\w+|aot_compile|package)\b|^torch\._export\.aot_\w+|^torch\._C\._aoti\b",
        EV,
        E,
        "runs code compiled ahead of time (AOTInductor), whose kernels the op recorder cannot see",
    ),
    _rule(
        r"^torch\._C\.(_?TensorBase|StorageBase)\b",
        EV,
        E,
        "calls the C tensor or storage type's own methods, around the judge's count of tensor data read by Python",
    ),
    # Starting or stopping a profiler (record_function annotations are harmless and not matched).
    _rule(
        r"^torch\.(profiler\.(profile|_KinetoProfile)|autograd\.profiler\.(profile|emit_nvtx|emit_itt)|_C\._profiler)"
        r"|_kineto|_(disable|enable|prepare)_profiler",
        EV,
        E,
        "starts or stops a profiler: the CUDA trace that is the judge's evidence",
    ),
    _rule(r"^(sys|threading)\.(settrace|setprofile)$|^sys\.monitoring", EV, E, "installs a trace/profile hook"),
    _rule(
        r"^inspect\.getmro$|^torch\._C\.__dict__$",
        EV,
        E,
        "reaches torch's C types, whose own methods read tensor data around the judge's count of what Python reads",
    ),
    _rule(
        r"(^|\.)(ctypes|_ctypes|cffi|ctypeslib)(\.|$)",
        EV,
        E,
        "calls native code directly or reads raw memory (ctypes/cffi, also as numpy.ctypeslib re-exports it)",
    ),
    _rule(r"^torch\.(ops|classes)\.load_library$", EV, E, "loads a native library"),
    _rule(
        r"^torch\._C\._CUDAGraph\b|^torch\.cuda\.graphs\._CUDAGraph\b",
        EV,
        E,
        "uses the raw CUDA graph class, whose captures and replays the op recorder does not see (torch.cuda.CUDAGraph "
        "and torch.cuda.graph are followed)",
    ),
    # GPU code that is neither a Triton kernel nor a torch op: validate's CUDA trace sees its kernels, but bench's
    # timed calls run without the trace, and the op recorder does not see them.
    _rule(
        r"^(cupy|cupyx|pycuda|jax|jaxlib|tensorflow|warp|tilelang|tvm|cutlass|cutlass_cppgen|cuda_bindings)\b"
        r"|^numba\.cuda\b|^cuda\.(bindings|core|cuda|cudart|nvrtc)\b|^torch\.utils\.cpp_extension\b"
        r"|^torch\.cuda\.jiterator\b|^triton\._C\.libtriton\.(nvidia\.cublas|amd\.hipblas)\b",
        EV,
        E,
        "runs GPU code that is neither Triton nor a torch op, where the op recorder cannot see it (bench's timed "
        "calls would time that library)",
    ),
    _rule(r"^mcp_server\b", EV, E, "imports the judge's own package"),
    _rule(r"^mmap\b", EV, E, "maps memory (shared memory a tensor lives in, by its descriptor) into Python"),
    _rule(
        r"^sys\.path\.(insert|append|extend)$|^site\.addsitedir$",
        EV,
        E,
        "imports code from outside the candidate's folder, which the scan and the copy-only check do not read; put "
        "the modules it imports beside it (or in its package)",
    ),
    _rule(
        r"^torch\._C\._te\b|^torch\._inductor\.(codecache|cpp_builder|async_compile|compile_worker|runtime)\b"
        r"|^_imp\b|^importlib\.machinery\.ExtensionFileLoader\b",
        EV,
        E,
        "compiles or loads native code (torch's tensor-expression evaluator, the inductor's code cache, an extension "
        "module by path), whose work the op recorder cannot see",
    ),
    _rule(r"^(builtins|importlib)\.__import__$", EV, E, "reaches the interpreter's import function itself"),
    _rule(
        r"^triton\._C\.libtriton\.interpreter\b",
        EV,
        E,
        "reaches the Triton interpreter's C loads and stores, which read and write any address",
    ),
    # Ways to reach the judge's own objects in the process (bench times the candidate in the process it runs in).
    _rule(r"^gc\.get_(objects|referrers|referents)$", EV, E, "walks the interpreter's objects"),
    _rule(
        r"^contextlib\.redirect_(stdout|stderr)$|^os\.(dup|dup2|dup3)$|^sys\.(stdout|stderr|__stdout__|__stderr__)\.fileno$",
        EV,
        E,
        "captures the process's own output, where a kernel's tl.device_print writes the values it loaded",
    ),
    _rule(r"^(sys\._getframe|inspect\.(currentframe|stack|getouterframes))$", EV, E, "reads its caller's frames"),
    _rule(r"^sys\.modules\b", EV, E, "reaches loaded modules by name (the judge's own among them)"),
    _rule(r"^(runpy|importlib\.util\.spec_from_file_location|importlib\.machinery)\b", EV, W, "imports a file by path"),
    _rule(
        r"^(pickle|_pickle|dill|cloudpickle|marshal)\.(dumps?|Pickler)$|^torch\.(save|jit\.save|export\.save)$"
        r"|^torch\.(onnx|package)\b",
        HOST,
        W,
        "serializes objects: a tensor's bytes reach Python this way (during a call, counted as data read by Python)",
    ),
    _rule(
        r"^torch\._C\._(pickle_save|save_\w+|gds_save_storage)$",
        HOST,
        E,
        "calls one of torch's C serializers, which hands tensor data to Python as bytes or a file",
    ),
    _rule(r"^(subprocess|multiprocessing|torch\.multiprocessing|pty)\b", PROC, E, "starts processes"),
    _rule(r"^concurrent\.futures\.ProcessPoolExecutor$|^asyncio\.create_subprocess", PROC, E, "starts processes"),
    _rule(
        r"^os\.(system|popen|fork|forkpty|spawn\w*|exec\w*|posix_spawn\w*|kill|killpg|setsid|setpgid|setpgrp"
        r"|setuid|setgid|setreuid|seteuid|pidfd_open|ptrace)$",
        PROC,
        E,
        "starts or signals processes",
    ),
    _rule(r"^signal\.(pthread_kill|raise_signal|alarm|setitimer|pidfd_send_signal)$", PROC, E, "sends signals"),
    _rule(r"^os\.getppid$|^signal\.signal$|^psutil\b", PROC, W, "looks at or handles other processes' signals"),
    _rule(
        r"^torch\.utils\.data\.(DataLoader|dataloader)\b",
        PROC,
        W,
        "starts worker processes when num_workers > 0 (a call's processes are refused when they run)",
    ),
)
# Attribute names that reach into a frame's variables (our code's, once a frame of ours is found).
FRAME_ATTRS = {"f_back", "f_locals", "f_globals", "tb_frame", "gi_frame", "cr_frame"}
# The array protocols that give numpy (or any library) a raw address to read and write as an array: a tensor's
# memory reached through ``data_ptr()`` this way is outside every count of what Python reads.
RAW_MEMORY = (
    HOST,
    E,
    "hands a raw address to numpy or another library as an array, around the judge's count of tensor data read by "
    "Python",
)
RAW_MEMORY_NAMES = frozenset({"__array_interface__", "__array_struct__", "__cuda_array_interface__"})
# An op's own ways to run below the dispatch mode (for a given dispatch key or key set).
BELOW_DISPATCH = (
    EV,
    E,
    "runs an op for a dispatch key below the Python one, where the op recorder does not see it; call the op itself",
)
# Functions that import a module by the name they are given (``builtins.__import__``, ``importlib``'s and
# ``pkgutil``'s), and the modules that hold such functions.
IMPORTERS = frozenset({"__import__", "import_module", "_gcd_import", "_find_and_load", "resolve_name", "find_spec"})
IMPORT_MODULES = frozenset({"builtins", "importlib", "pkgutil", "_imp", "zipimport"})
# torch.library's registrations, and the namespaces of PyTorch's own ops ("_": every namespace's fallbacks).
TORCH_REGISTRARS = frozenset(
    f"torch.library.{n}"
    for n in (
        "Library",
        "_scoped_library",
        "impl",
        "register_kernel",
        "register_fake",
        "impl_abstract",
        "register_autograd",
        "register_torch_dispatch",
        "register_vmap",
        "define",
        "custom_op",
        "triton_op",
    )
)
TORCH_OP_NAMESPACES = frozenset({"aten", "prims", "_"})
# Attribute names flagged on whatever object they are read from (``type(x).__mro__`` has no dotted name).
ATTR_RULES: dict[str, tuple[FindingKind, Severity, str]] = {
    **dict.fromkeys(RAW_MEMORY_NAMES, RAW_MEMORY),
    **dict.fromkeys(("redispatch", "_op_dk", "redispatch_boxed", "call_boxed", "_call_boxed"), BELOW_DISPATCH),
    **dict.fromkeys(
        ("__mro__", "__bases__", "__base__", "mro"),
        (
            EV,
            E,
            "reaches a class's base types, where the C tensor and storage types' own methods read tensor data "
            "around the judge's count of what Python reads",
        ),
    ),
    **dict.fromkeys(
        (
            "__reduce__",
            "__reduce_ex__",
            "__getstate__",
            "_write_file",
            "write_record",
            "_share_fd_cpu_",
            "_share_filename_cpu_",
            "_get_shared_fd",
            "_new_shared",
            "_new_shared_fd_cpu",
            "_new_shared_filename_cpu",
            "_new_using_fd_cpu",
            "_new_using_filename_cpu",
        ),
        (HOST, E, "hands a tensor's or storage's bytes to Python (serialized, or as a shared-memory file)"),
    ),
    "share_memory_": (HOST, W, "puts tensor data in shared memory, where it can be read as a file"),
    **dict.fromkeys(
        ("__kwdefaults__", "__defaults__", "__closure__", "cell_contents", "__wrapped__"),
        (
            EV,
            E,
            "reads a function's hidden state (its defaults, closure or wrapped function), where the judge's "
            "counting wrappers keep what they wrap",
        ),
    ),
    **dict.fromkeys(
        ("apply_", "map_", "map2_"),
        (HOST, E, "calls a Python function on every element of a tensor: the arithmetic runs in Python on the host"),
    ),
}
# String constants that point at the runner's files or other processes.
STRING_RULES: tuple[Rule, ...] = (
    _rule(r"/proc/(self|\d+|thread-self)|/proc/\{|^/proc/?$", EV, E, "reads /proc (its own fds, other processes)"),
    _rule(
        r"(^|/)(job\.json|cases\.pt|reference\.pt|candidate\.pt|result\.json|sandbox\.json|progress\.jsonl?)$",
        REF,
        E,
        "names a file of the runner's job folder",
    ),
)
# Monkeypatching these is tampering; setting flags elsewhere in torch (torch.backends.…) is fine.
# Anything in torch (the baselines run it, and bench times with torch.cuda's events) and the modules bench's own
# timing and statistics use.
PATCH_ERROR = re.compile(
    r"^(triton\.(runtime|compiler|language|testing)|torch|time|statistics|math|secrets|builtins|threading|_thread)\b"
    r"|^sys\.(stdout|stderr)$"
)
PATCH_WARN = re.compile(r"^(torch|triton|builtins|numpy|sys)\b")
PATCH_OK = re.compile(r"^torch\.(backends|_dynamo\.config|_inductor\.config)\b")
# numpy calls that are not arithmetic (conversions and constructors).
NUMPY_PLAIN = {"asarray", "array", "ascontiguousarray", "empty", "zeros", "ones", "frombuffer", "dtype", "float32"}
NUMPY_METHODS_PLAIN = {"numpy", "tobytes", "copy", "astype", "reshape", "view", "item"}
OPEN_CALLS = {"open", "io.open", "builtins.open", "numpy.load", "torch.load", "pickle.load", "json.load"}
READ_METHODS = {"read_text", "read_bytes", "open"}


def local_modules(candidate: Path, limit: int = MAX_FILES) -> list[Path]:
    """The candidate's file and the modules it imports from its own folder (or package), recursively."""
    candidate = candidate.resolve()
    root = candidate.parent
    while (root / "__init__.py").exists() and root.parent != root:
        root = root.parent
    seen: list[Path] = []
    queue = [candidate]
    while queue and len(seen) < limit:
        path = queue.pop(0)
        if path in seen:
            continue
        seen.append(path)
        tree = _parse(path)
        if tree is None:
            continue
        for name, level in _imported_modules(tree):
            # Absolute imports: the candidate's folder, or its own top-level package (not its siblings).
            top = root if name.split(".")[0] == _top_package(candidate, root) else candidate.parent
            found = _resolve_local(name, level, path, candidate.parent, top)
            queue.extend(p for p in found if p not in seen)
    return seen


def _top_package(candidate: Path, root: Path) -> str | None:
    try:
        rel = candidate.relative_to(root)
    except ValueError:
        return None
    return rel.parts[0] if len(rel.parts) > 1 else None


def _parse(path: Path) -> ast.Module | None:
    try:
        if path.stat().st_size > MAX_BYTES:
            return None
        return parse_python(path.read_text(encoding="utf-8", errors="replace"), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return None


def _imported_modules(tree: ast.Module) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((alias.name, 0) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            out.append((base, node.level))
            out.extend(((f"{base}.{alias.name}" if base else alias.name), node.level) for alias in node.names)
    return out


def _resolve_local(name: str, level: int, importer: Path, cand_dir: Path, root: Path) -> list[Path]:
    bases = [importer.parent] if level else [cand_dir, root]
    if level > 1:
        bases = [importer.parents[level - 1]] if len(importer.parents) >= level else []
    found = []
    parts = [p for p in name.split(".") if p]
    for base in bases:
        target = base.joinpath(*parts) if parts else base
        for candidate in (target.with_suffix(".py"), target / "__init__.py"):
            if parts and candidate.is_file():
                found.append(candidate.resolve())
    return found


def _int_literal(node: ast.AST | None) -> int | type[Ellipsis] | None:
    """A slice bound written as a literal (``-1`` too), None where there is none; ``...`` where it is not one."""
    if node is None:
        return None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _int_literal(node.operand)
        return -inner if isinstance(inner, int) else ...
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, int) else ...


class _Scanner(ast.NodeVisitor):
    def __init__(self, path: Path, lines: list[str], reference: Path | None, ref_modules: set[str]):
        self.path = path
        self.lines = lines
        self.reference = reference
        self.ref_modules = ref_modules
        self.aliases: dict[str, str] = {}
        # Names bound to strings built from literals (``_K = "__array_" + "interface__"``), file-wide.
        self.constants: dict[str, str] = {}
        self.findings: list[Finding] = []

    # -- reporting ---------------------------------------------------------------------------------
    def hit(self, node: ast.AST, kind: FindingKind, severity: Severity, message: str) -> None:
        line = getattr(node, "lineno", None)
        text = self.lines[line - 1].rstrip() if line and line <= len(self.lines) else None
        where = Location(file=str(self.path), line=line, column=getattr(node, "col_offset", -1) + 1, source_line=text)
        self.findings.append(Finding(kind=kind, severity=severity, message=message, where=where))

    def check_name(self, node: ast.AST, dotted: str) -> None:
        for rule in NAME_RULES:
            if rule.pattern.search(dotted):
                self.hit(node, rule.kind, rule.severity, f"`{dotted}` {rule.why}")
                return

    def check_reach(self, node: ast.AST, attr: str) -> None:
        """Attributes that reach what the candidate was not given, written as an attribute or a getattr name."""
        if attr in FRAME_ATTRS:
            self.hit(node, EV, E, f"`.{attr}` reads another frame's variables")
        if attr in ("__subclasses__", "__globals__"):
            self.hit(node, EV, E, f"`.{attr}` reaches classes or module globals the candidate was not given")

    def check_attr(self, node: ast.AST, attr: str) -> None:
        rule = ATTR_RULES.get(attr)
        if rule is not None:
            kind, severity, why = rule
            self.hit(node, kind, severity, f"`.{attr}` {why}")

    # -- names -------------------------------------------------------------------------------------
    def dotted(self, node: ast.AST) -> str | None:
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name):
            parts.append(self.aliases.get(node.id, node.id))
            return ".".join(reversed(parts))
        if isinstance(node, ast.Call):  # getattr(...) chains end here
            return None
        return None

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            top = alias.name.split(".")[0]
            self.aliases[alias.asname or top] = alias.name if alias.asname else top
            self.check_name(node, alias.name)
            self.check_reference_import(node, alias.name, 0)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = node.module or ""
        self.check_reference_import(node, base, node.level)
        for alias in node.names:
            full = f"{base}.{alias.name}" if base else alias.name
            self.aliases[alias.asname or alias.name] = full
            self.check_name(node, full)
            self.check_reference_import(node, full, node.level)

    def check_reference_import(self, node: ast.AST, name: str, level: int) -> None:
        if self.reference is None or not name:
            return
        for path in _resolve_local(name, level, self.path, self.path.parent, self.path.parent):
            if path == self.reference:
                self.hit(node, REF, E, f"imports the reference's module ({self.reference.name})")
                return

    def visit_Attribute(self, node: ast.Attribute) -> None:
        dotted = self.dotted(node)
        if dotted is not None:
            self.check_name(node, dotted)
        self.check_reach(node, node.attr)
        self.check_attr(node, node.attr)
        # Report the outermost chain only.
        inner = node.value
        while isinstance(inner, ast.Attribute):
            inner = inner.value
        self.visit(inner)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in RAW_MEMORY_NAMES:  # defined in a class body
            self.check_attr(node, node.id)
        full = self.aliases.get(node.id)
        if full is not None and full != node.id:
            self.check_name(node, full)
        if node.id == "__builtins__":
            self.hit(node, EV, E, "`__builtins__` reaches the interpreter's built-ins by name (its import among them)")

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            self._check_string(node, node.value)

    def _check_string(self, node: ast.AST, value: str) -> None:
        """A string the code holds, written or built from literals: a protocol name (a dict key, setattr, a
        ``type(...)`` namespace), a path of the runner's, the reference's name."""
        if value in RAW_MEMORY_NAMES or (value in ATTR_RULES and not isinstance(node, ast.Constant)):
            self.check_attr(node, value)
        if len(value) < 4096:
            for rule in STRING_RULES:
                if rule.pattern.search(value):
                    self.hit(node, rule.kind, rule.severity, f"{value!r} {rule.why}")
                    break
            if self.reference is not None and value.endswith(self.reference.name):
                self.hit(node, REF, E, f"{value!r} names the reference's file or module")

    def fold(self, node: ast.AST) -> str | None:
        """The string an expression builds from literals alone (concatenation, an f-string, ``sep.join`` of a list,
        a slice such as ``[::-1]``, ``chr(n)``, a name bound to one), or None."""
        if isinstance(node, ast.Constant):
            return node.value if isinstance(node.value, str) else None
        if isinstance(node, ast.Name):
            return self.constants.get(node.id)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self.fold(node.left), self.fold(node.right)
            return left + right if left is not None and right is not None else None
        if isinstance(node, ast.JoinedStr):
            parts = [
                self.fold(v.value if isinstance(v, ast.FormattedValue) and v.format_spec is None else v)
                for v in node.values
            ]
            return "".join(parts) if all(p is not None for p in parts) else None  # type: ignore[arg-type]
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice):
            base = self.fold(node.value)
            bounds = [_int_literal(b) for b in (node.slice.lower, node.slice.upper, node.slice.step)]
            if base is not None and all(b is None or isinstance(b, int) for b in bounds):
                return base[slice(*bounds)]
            return None
        if isinstance(node, ast.Call) and not node.keywords:
            func = node.func
            if isinstance(func, ast.Name) and func.id == "chr" and len(node.args) == 1:
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, int) and 0 <= arg.value < 0x110000:
                    return chr(arg.value)
            if isinstance(func, ast.Attribute) and func.attr == "join" and len(node.args) == 1:
                sep, items = self.fold(func.value), node.args[0]
                if sep is not None and isinstance(items, ast.List | ast.Tuple):
                    parts = [self.fold(e) for e in items.elts]
                    if all(p is not None for p in parts):
                        return sep.join(parts)  # type: ignore[arg-type]
        return None

    def visit_BinOp(self, node: ast.BinOp) -> None:
        self._visit_built(node)

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        self._visit_built(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        self._visit_built(node)

    def _visit_built(self, node: ast.AST) -> None:
        folded = self.fold(node)
        if folded is not None:
            self._check_string(node, folded)
        self.generic_visit(node)

    # -- assignments (monkeypatching) --------------------------------------------------------------
    def _check_patch(self, target: ast.AST) -> None:
        if not isinstance(target, ast.Attribute):
            return
        dotted = self.dotted(target)
        if dotted is None or PATCH_OK.search(dotted):
            return
        if PATCH_ERROR.search(dotted):
            self.hit(target, EV, E, f"assigns `{dotted}`: patches torch, triton or Python internals the judge uses")
        elif PATCH_WARN.search(dotted):
            self.hit(target, EV, W, f"assigns `{dotted}`: patches a library")

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._check_patch(target)
        folded = self.fold(node.value)
        if folded is not None:
            for target in node.targets:
                if isinstance(target, ast.Name):
                    self.constants[target.id] = folded
        # ``C = torch._C`` (or ``getattr(torch, "_C")``): later uses of C are read as torch._C.
        bound = self._bound_name(node.value)
        if bound is not None:
            for target in node.targets:
                if isinstance(target, ast.Name):
                    self.aliases[target.id] = bound
        self.generic_visit(node)

    def _bound_name(self, value: ast.AST) -> str | None:
        """The dotted name an assigned value is (an attribute chain, or getattr of one with a literal name)."""
        if isinstance(value, ast.Name):
            return self.aliases.get(value.id)
        if isinstance(value, ast.Attribute):
            return self.dotted(value)
        if (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Name)
            and value.func.id == "getattr"
            and len(value.args) == 2
            and isinstance(value.args[1], ast.Constant)
            and isinstance(value.args[1].value, str)
        ):
            base = self.dotted(value.args[0])
            return f"{base}.{value.args[1].value}" if base else None
        return None

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_patch(node.target)
        self.generic_visit(node)

    def _scan_source(self, node: ast.AST, code: str) -> None:
        """Code given to exec/eval/compile as a literal string is read like the file's own, its findings at the
        call's line."""
        try:
            tree = parse_python(code, "<exec string>")
        except SyntaxError:
            self.hit(node, EV, W, "runs a string that does not parse as Python")
            return
        for inner in ast.walk(tree):
            for attr in ("lineno", "end_lineno"):
                if hasattr(inner, attr):
                    setattr(inner, attr, getattr(node, attr, None))
            if hasattr(inner, "col_offset"):
                inner.col_offset = getattr(node, "col_offset", 0)
        self.visit(tree)

    # -- calls -------------------------------------------------------------------------------------
    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        dotted = self.dotted(func) if isinstance(func, ast.Attribute | ast.Name) else None
        name = dotted or ""
        built = self.fold(node)  # "".join([...]), chr(n)
        if built is not None:
            self._check_string(node, built)
        if isinstance(func, ast.Name) and func.id in ("exec", "eval", "compile"):
            code = self.fold(node.args[0]) if node.args else None
            if not isinstance(code, str):
                self.hit(node, EV, W, f"`{func.id}()` runs code the scan cannot read")
            else:
                self._scan_source(node, code)
        if name in TORCH_REGISTRARS and node.args:
            self._check_registration(node, name)
        if name == "super" and node.args and (self.dotted(node.args[0]) or "").startswith("torch."):
            self.hit(
                node, EV, E, "`super(torch…)` calls a torch class's base methods, around the judge's count of tensor "
                "data read by Python",
            )  # fmt: skip
        if name in ("getattr", "setattr", "delattr") and len(node.args) >= 2:
            target = self.dotted(node.args[0]) or ""
            attr = self.fold(node.args[1])
            if attr is not None:  # a literal, or a name built from literals
                self.check_name(node, f"{target}.{attr}")
                self.check_reach(node, attr)
                self.check_attr(node, attr)
                if name != "getattr" and target:
                    self._check_patch(ast.Attribute(value=node.args[0], attr=attr, lineno=node.lineno))
            # A name built at run time (folded or not): hiding it is the point.
            if isinstance(node.args[1], ast.Constant):
                pass
            elif target.startswith(("torch._C", "triton._C")):
                self.hit(node, EV, E, f"`{name}({target}, <computed name>)` reaches {target.split('.')[0]}'s C "
                         "internals by a name built at run time")  # fmt: skip
            elif target.split(".")[0] in IMPORT_MODULES:
                self.hit(node, EV, E, f"`{name}({target}, <computed name>)` reaches an import machinery's function by "
                         "a name built at run time")  # fmt: skip
            elif attr is None and target.startswith(("torch", "triton", "os", "sys", "signal")):
                self.hit(node, EV, W, f"`{name}({target}, <computed name>)` hides which attribute it reaches")
        if (name.rpartition(".")[2] in IMPORTERS or name in IMPORTERS) and node.args:
            module_name = self.fold(node.args[0])
            if module_name is not None:
                self.check_name(node, module_name)
                self.check_reference_import(node, module_name, 0)
            else:
                self.hit(node, EV, E, "imports a module whose name is computed (the judge's own could be one)")
        reads = name in OPEN_CALLS or (isinstance(func, ast.Attribute) and func.attr in READ_METHODS)
        if reads and name != "os.open" and not name.startswith(("torch.", "triton.", "tl.")):
            self.hit(node, REF, W, f"`{name or func.attr}()` reads a file at run time")
        self.generic_visit(node)

    def _check_registration(self, node: ast.Call, name: str) -> None:
        """A ``torch.library`` registration for an op of torch's own (``Library("aten", "IMPL")``,
        ``torch.library.impl("aten::clone", …)``)."""
        first = node.args[0]
        if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
            return
        namespace = first.value.split("::")[0] if "::" in first.value or name.endswith("ibrary") else None
        if namespace in TORCH_OP_NAMESPACES:
            self.hit(
                node, EV, E, f"`{name}({first.value!r}, …)` registers a kernel for PyTorch's own ops, which runs below "
                "the op recorder (or hides the op from it); define a custom op in a namespace of your own",
            )  # fmt: skip

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if node.name == "__torch_dispatch__":
            self.hit(
                node, EV, W, "defines a tensor subclass's `__torch_dispatch__`: the torch ops it runs count as the "
                "call's torch work",
            )  # fmt: skip
        self._scan_host_compute(node)
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def _scan_host_compute(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        """Data taken to numpy (``.numpy()``) and then used in arithmetic, inside one function."""
        tainted: set[str] = set()
        first_numpy: ast.AST | None = None
        for node in ast.walk(fn):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "numpy":
                first_numpy = first_numpy or node
        if first_numpy is None:
            return
        # Names bound to numpy data (directly or through another tainted name), to a fixed point.
        assigns = [n for n in ast.walk(fn) if isinstance(n, ast.Assign | ast.AugAssign | ast.AnnAssign)]
        for _ in range(4):
            for node in assigns:
                value = node.value
                if value is None or not _uses_numpy_data(value, tainted):
                    continue
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    for sub in ast.walk(target):
                        if isinstance(sub, ast.Name):
                            tainted.add(sub.id)
        numpy_alias = {k for k, v in self.aliases.items() if v == "numpy"}
        for node in ast.walk(fn):
            arithmetic = None
            if isinstance(node, ast.BinOp | ast.UnaryOp) and _uses_numpy_data(node, tainted):
                arithmetic = node
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                base = node.func.value
                if isinstance(base, ast.Name) and base.id in numpy_alias and node.func.attr not in NUMPY_PLAIN:
                    if any(_uses_numpy_data(a, tainted) for a in node.args):
                        arithmetic = node
                elif node.func.attr not in NUMPY_METHODS_PLAIN and _uses_numpy_data(base, tainted):
                    arithmetic = node
            if arithmetic is not None:
                self.hit(
                    arithmetic,
                    HOST,
                    E,
                    f"`{fn.name}` computes on tensor data in numpy on the host (`.numpy()` then arithmetic): "
                    "the kernel is not doing the work",
                )
                return
        self.hit(first_numpy, HOST, W, f"`{fn.name}` takes tensor data to numpy (`.numpy()`) during the call")


def _uses_numpy_data(node: ast.AST, tainted: set[str]) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id in tainted:
            return True
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr == "numpy":
            return True
    return False


def scan(candidate: Path, reference: Path | None = None) -> list[Finding]:
    """Findings for the candidate's own modules. ``reference`` (its file) is looked for unless it is the
    candidate's own file (a reference and its kernels in one module see each other by construction)."""
    candidate = candidate.resolve()
    ref = reference.resolve() if reference is not None else None
    if ref == candidate:
        ref = None
    ref_modules = {ref.stem} if ref is not None else set()
    findings: list[Finding] = []
    for path in local_modules(candidate):
        if ref is not None and path == ref:
            continue
        tree = _parse(path)
        if tree is None:
            continue
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            lines = []
        scanner = _Scanner(path, lines, ref, ref_modules)
        scanner.visit(tree)
        findings.extend(_dedupe(scanner.findings))
    return findings


def _dedupe(findings: list[Finding]) -> list[Finding]:
    """One finding per (kind, severity, reason) per file: the first place, and how many more."""
    first: dict[tuple[str, str, str], Finding] = {}
    more: dict[tuple[str, str, str], int] = {}
    for f in findings:
        reason = re.sub(r"^`[^`]*` |^'[^']*' ", "", f.message)
        key = (f.kind.value, f.severity.value, reason)
        if key in first:
            more[key] += 1
        else:
            first[key], more[key] = f, 0
    out = []
    for key, f in first.items():
        if more[key] and f.where is not None:
            note = f" (and {more[key]} more place(s) in {Path(f.where.file).name})"
            f = f.model_copy(update={"message": f.message + note})
        out.append(f)
    return out
