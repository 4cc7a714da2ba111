"""Evidence the candidate's Python cannot switch off: the static scan, the copy-only kernel check, the CUDA
trace judge (fed synthetic traces here; the device test feeds real ones), and each attack validated."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from mcp_server.engine.jobs import trace
from mcp_server.engine.models import FindingKind, Severity
from mcp_server.engine.trust import cuda_trace, kernels, scan
from mcp_server.engine.validate import validate

ATTACKS = Path(__file__).resolve().parent.parent / "fixtures" / "validate" / "attacks"
PROBLEM = ATTACKS / "problem.py"
REPO = Path(__file__).resolve().parents[2]


def _errors(findings) -> set[str]:
    return {f.kind.value for f in findings if f.severity is Severity.error}


def _scan_source(tmp_path, source: str):
    """The scan's findings on a candidate file holding ``source``."""
    (tmp_path / "cand.py").write_text(source)
    return scan.scan(tmp_path / "cand.py")


# --- the static scan ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("attack", "kind"),
    [
        ("dispatch_toggle.py", "evasion"),
        ("numpy_host.py", "host_compute"),
        ("reads_reference.py", "evasion"),
        ("reads_reference.py", "reads_reference"),
        ("spawns.py", "process_escape"),
        ("kills_parents.py", "process_escape"),
        ("kills_everything.py", "process_escape"),
        ("leaks.py", "evasion"),
        ("other_gpu_code.py", "evasion"),
    ],
)
def test_the_scan_names_each_way_out(attack, kind):
    assert kind in _errors(scan.scan(ATTACKS / attack, PROBLEM))


@pytest.mark.parametrize("twin", ["good.py", "copy_good.py", "python_host_small.py"])
def test_the_scan_passes_the_twins(twin):
    assert scan.scan(ATTACKS / twin, PROBLEM) == []


def test_the_scan_follows_local_imports_but_not_site_packages(tmp_path):
    (tmp_path / "helper.py").write_text("import ctypes\n")
    (tmp_path / "cand.py").write_text("import torch\nimport helper\n\ndef candidate(x):\n    return x\n")
    modules = scan.local_modules(tmp_path / "cand.py")
    assert {p.name for p in modules} == {"cand.py", "helper.py"}
    found = scan.scan(tmp_path / "cand.py")
    assert [f.where.file for f in found if f.kind is FindingKind.evasion] == [str(tmp_path / "helper.py")]


def test_importing_the_reference_by_name_is_reads_reference(tmp_path):
    (tmp_path / "ref.py").write_text("def reference(x):\n    return x + 1\n")
    (tmp_path / "cand.py").write_text("from ref import reference\n\ndef candidate(x):\n    return reference(x)\n")
    assert "reads_reference" in _errors(scan.scan(tmp_path / "cand.py", tmp_path / "ref.py"))
    # The same file as reference and candidate sees itself by construction: nothing to flag.
    assert scan.scan(tmp_path / "ref.py", tmp_path / "ref.py") == []


def test_numpy_alone_is_a_warning_and_numpy_arithmetic_an_error(tmp_path):
    (tmp_path / "look.py").write_text("def candidate(x):\n    n = x.numpy()\n    return x\n")
    (tmp_path / "calc.py").write_text("def candidate(x):\n    n = x.numpy()\n    return n * 2\n")
    look = scan.scan(tmp_path / "look.py")
    assert [(f.kind.value, f.severity.value) for f in look] == [("host_compute", "warning")]
    assert "host_compute" in _errors(scan.scan(tmp_path / "calc.py"))


@pytest.mark.parametrize(
    "source",
    [
        "import cupy as cp\n",
        "from numba import cuda\n",
        "import numba.cuda\n",
        "from cuda.bindings import driver\n",
        "from cuda import cudart\n",
        "import jax.numpy as jnp\n",
        "import warp as wp\n",
        "from torch.utils.cpp_extension import load_inline\n",
        "import torch\nf = torch.cuda.jiterator._create_jit_fn('template <typename T> T f(T x) { return x; }')\n",
        "import importlib\ncp = importlib.import_module('cupy')\n",
        "import torch\ntorch.ops.load_library('ops.so')\n",
        # cuBLAS through the binding Triton ships (its matmul would be timed as the candidate's kernel).
        "from triton._C.libtriton import nvidia\nlt = nvidia.cublas.CublasLt(None)\n",
        "import triton._C.libtriton.nvidia.cublas as cublas\n",
        "from triton._C import libtriton\nblas = getattr(libtriton.nvidia, 'cub' + 'las')\n",
    ],
)
def test_gpu_code_outside_triton_and_torch_ops_is_evasion(tmp_path, source):
    found = _scan_source(tmp_path, source)
    assert "evasion" in _errors(found), found


@pytest.mark.parametrize(
    "source",
    [
        "import numba\n",  # CPU numba: host work, judged as such elsewhere
        "import torch\ns = torch.cuda.Stream()\ntorch.cuda.synchronize()\n",
        "import cutlass_helpers\n",  # a module of the user's own, not NVIDIA's cutlass
        "from triton.experimental import gluon\n",
        # Twin of the cuBLAS binding rule: Gluon's builtins build IR through the same C module.
        "from triton._C.libtriton import ir\nkind = ir.DESCRIPTOR_REDUCE_KIND.ADD\n",
        "import torch\ntorch.ops.aten.mm\n",
        # Twins of the thread-starter and raw-graph rules: starting threads and using the graph class torch gives.
        "import threading\nworker = threading.Thread(target=print)\n",
        "import torch\ng = torch.cuda.CUDAGraph()\nwith torch.cuda.graph(g):\n    pass\n",
        # Twins of the C-tensor-type rule: super() in a module of one's own.
        "import torch\nclass M(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n",
        "import torch\nclass M(torch.nn.Module):\n    def __init__(self):\n        super(M, self).__init__()\n",
    ],
)
def test_triton_gluon_torch_cuda_streams_and_lookalike_names_are_not(tmp_path, source):
    assert "evasion" not in _errors(_scan_source(tmp_path, source))


@pytest.mark.parametrize(
    "source",
    [
        "import sys\njob = sys.modules['mcp_' + 'server.engine.jobs.bench_job']\n",
        "import importlib\njob = importlib.import_module('mcp_' + 'server')\n",
        "job = __import__('mcp_' + 'server')\n",
        "import gc\ntimers = [o for o in gc.get_objects() if type(o).__name__ == '_Timer']\n",
        "import sys\ncaller = sys._getframe(1)\n",
        "def f(tb):\n    return tb.tb_frame.f_back.f_locals\n",
        # …the same through getattr with the names written out, or built from literals.
        "def f(tb):\n    return getattr(getattr(tb, 'tb_frame'), 'f_back')\n",
        "def f(frame):\n    return getattr(frame, 'f_' + 'locals')\n",
        "def f(fn):\n    return getattr(fn, '__glo' + 'bals__')\n",
        "classes = object.__subclasses__()\n",
        "def f(fn):\n    return fn.__globals__\n",
        "import torch\ntorch.cuda.Event.elapsed_time = lambda self, end: 1e-3\n",  # bench's own timer
        "import time\ntime.perf_counter = lambda: 0.0\n",
        "import torch.nn.functional as F\nF.scaled_dot_product_attention = print\n",
        # The thread starters the op recorder wraps, so that other threads' torch ops are recorded too.
        "import threading\nthreading._start_new_thread = print\n",
        "import _thread\n_thread.start_new_thread = print\n",
        # The raw CUDA graph class: its replays would run captured torch work the recorder never counts.
        "import torch\ng = torch._C._CUDAGraph()\n",
        "from torch.cuda.graphs import _CUDAGraph\n",
        # Around the count of tensor data handed to Python: the C tensor type's own methods.
        "import torch\ndef f(x):\n    return torch._C.TensorBase.tolist(x)\n",
        "import torch\ndef f(x):\n    return super(torch.Tensor, x).tolist()\n",
        "import torch\ndef f(x):\n    return torch._C.StorageBase.tolist(x.untyped_storage())\n",
        # …reached through a class's base types, or by a name the scan cannot read.
        "def f(x):\n    return type(x).__mro__[1].tolist(x)\n",
        "def f(x):\n    return x.__class__.__bases__[0].tolist(x)\n",
        "def f(x):\n    return type(x).mro()[1].numpy(x)\n",
        "import inspect\ndef f(x):\n    return inspect.getmro(type(x))[1].tolist(x)\n",
        "def f(x):\n    return getattr(type(x), '__base__').tolist(x)\n",
        "import torch\ndef f(x):\n    return getattr(torch._C, 'Tensor' + 'Base').tolist(x)\n",
        "import torch\ndef f(x):\n    return torch._C.__dict__['TensorBase'].tolist(x)\n",
        # A literal string given to exec is read as code too.
        'exec(\'import sys\\njob = sys.modules["mcp_" + "server"]\')\n',
    ],
)
def test_reaching_the_judges_objects_in_the_process_is_evasion(tmp_path, source):
    # Bench times the candidate in the process it runs in: its timer, its checks and its results are objects there.
    found = _scan_source(tmp_path, source)
    assert "evasion" in _errors(found), found


@pytest.mark.parametrize(
    "source",
    [
        "import pickle\ndef f(x):\n    return pickle.dumps(x)\n",
        "import io\nimport torch\ndef f(x):\n    torch.save(x, io.BytesIO())\n",
    ],
)
def test_serializing_is_a_host_compute_warning(tmp_path, source):
    # A tensor's bytes reach Python through pickle or torch.save (the recorder counts them during a call).
    found = _scan_source(tmp_path, source)
    assert {(f.kind.value, f.severity) for f in found} == {("host_compute", Severity.warning)}, found


@pytest.mark.parametrize(
    "source",
    [
        "def f(x):\n    return x.untyped_storage().__reduce__()\n",
        "def f(x):\n    return x.__reduce_ex__(2)\n",
        "import io\ndef f(x):\n    x.untyped_storage()._write_file(io.BytesIO(), False, True, 4)\n",
        "def f(x):\n    return x.untyped_storage()._share_filename_cpu_()\n",
        "def f(x):\n    return getattr(x.untyped_storage(), '_share_fd_cpu_')()\n",
        "import torch\ndef f(x):\n    return torch._C._pickle_save(x)\n",
        "def f(x, y):\n    return x.clone().map_(y, lambda a, b: a * b + a)\n",
    ],
)
def test_serializing_internals_and_shared_memory_files_are_host_compute_errors(tmp_path, source):
    # What pickle and torch.save call inside, and a storage as a shared-memory file: no place in a launcher.
    found = _scan_source(tmp_path, source)
    assert "host_compute" in _errors(found), found


@pytest.mark.parametrize(
    ("source", "kind"),
    [
        # torch._C through a plain name, then a computed attribute of it: the dispatch toggle the alias hid.
        ('import torch\nC = torch._C\n_off = getattr(C, "_Disable" + "TorchDispatch")\n', "evasion"),
        ('import torch\nC = getattr(torch, "_C")\n_off = getattr(C, "_Dis" + "able")\n', "evasion"),
        (
            "import torch\nC = torch._C\ndef f(x):\n    with C._DisableTorchDispatch():\n        return x * 2\n",
            "evasion",
        ),
        # A tensor's address handed to numpy as an array (attribute, class body, a namespace's key).
        (
            'class R:\n    def __init__(s, t):\n        s.__array_interface__ = {"data": (t.data_ptr(), False)}\n',
            "host_compute",
        ),
        ("class R:\n    __array_interface__ = property(lambda s: {})\n", "host_compute"),
        ('R = type("R", (), {"__cuda_array_interface__": {}})\n', "host_compute"),
        # A wrapper's hidden state, where the judge's counting wrappers keep what they wrap.
        ('import torch\noriginal = torch.Tensor.tolist.__kwdefaults__["__original"]\n', "evasion"),
        ("def f(g):\n    return g.__closure__[0].cell_contents\n", "evasion"),
        # Imports by computed names through any import function, the built-ins by name, modules by name.
        ('import builtins\nm = builtins.__import__("ct" + "ypes")\n', "evasion"),
        ('import importlib._bootstrap as b\nm = b._gcd_import("ct" + "ypes")\n', "evasion"),
        ('import pkgutil\nm = pkgutil.resolve_name("ct" + "ypes")\n', "evasion"),
        ('import builtins\nf = getattr(builtins, "__imp" + "ort__")\n', "evasion"),
        ('m = __builtins__["__imp" + "ort__"]("ct" + "ypes")\n', "evasion"),
        ('import sys\nm = sys.modules.get("ct" + "ypes")\n', "evasion"),
        ("import numpy\ndef f(a):\n    return a.ctypes.data\n", "evasion"),
        ("from triton._C.libtriton import interpreter\n", "evasion"),
        # The process's own output captured (where a kernel's tl.device_print writes what it loaded).
        ("import contextlib, io\nwith contextlib.redirect_stdout(io.StringIO()):\n    pass\n", "evasion"),
        ("import os\nos.dup2(3, 1)\n", "evasion"),
        ("import io, sys\nsys.stdout = io.StringIO()\n", "evasion"),
        # Code imported from outside the candidate's folder, which nothing reads.
        ('import sys\nsys.path.insert(0, "/elsewhere")\n', "evasion"),
        # Names built from literals: concatenated, joined, sliced backwards, in an f-string, bound to a name.
        ('K = "__array_" + "interface__"\nR = type("R", (), {K: {}})\n', "host_compute"),
        ('R = type("R", (), {"".join(["__array_", "struct__"]): {}})\n', "host_compute"),
        ('def f(g):\n    return getattr(g, "__kw" + "defaults__")\n', "evasion"),
        ('p = "fles/corp/"[::-1]\n', "evasion"),
        ('part = "oc"\np = f"/pr{part}/self/mem"\n', "evasion"),
    ],
)
def test_aliases_of_torch_internals_and_raw_array_protocols_are_errors(tmp_path, source, kind):
    assert kind in _errors(_scan_source(tmp_path, source))


@pytest.mark.parametrize(
    "source",
    [
        "import torch\nK = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)\n",
        "import torch\ndef f(x):\n    return torch.ops.aten.mul.Tensor._op_dk(1, x, x)\n",
        "import torch\nfrom torch._inductor import aoti_load_package\n",
        "import torch\nrun = torch._inductor.aoti_compile_and_package\n",
        # Kernels registered for PyTorch's own ops, a fallthrough for the Python key, a kernel run below it.
        'import torch\nlib = torch.library.Library("aten", "IMPL")\n',
        'from torch.library import Library\nlib = Library("prims", "FRAGMENT")\n',
        'import torch\n@torch.library.impl("aten::clone", "CPU")\ndef f(x, memory_format=None):\n    return x * 2\n',
        'import torch\ntorch.library.register_kernel("aten::sin", "CPU")(lambda x: x)\n',
        "import torch\nskip = torch.library.fallthrough_kernel\n",
        'import torch\nk = torch.library.get_kernel("aten::mul.Tensor", "CPU")\n',
    ],
)
def test_ops_run_below_the_dispatch_mode_and_ahead_of_time_code_are_evasion(tmp_path, source):
    assert "evasion" in _errors(_scan_source(tmp_path, source))


@pytest.mark.parametrize(
    "source",
    [
        # Twins: a library, a kernel and a custom op in a namespace of the candidate's own.
        'import torch\nlib = torch.library.Library("mylib", "DEF")\n',
        'import torch\n@torch.library.impl("mylib::fma", "CPU")\ndef f(x):\n    return x\n',
        'import torch\n@torch.library.custom_op("mylib::fma", mutates_args=())\ndef f(x: torch.Tensor) -> '
        "torch.Tensor:\n    return x\n",
        'import importlib\nm = importlib.import_module("math")\n',
        'from pkgutil import resolve_name\nsqrt = resolve_name("math:sqrt")\n',
        # Reading the import path (not adding to it).
        "import sys\nsearched = list(sys.path)\n",
        # Strings built from harmless pieces.
        'import torch\nname = "float" + "32"\ndtype = getattr(torch, name)\nlabel = f"{name}-{1}"\n',
    ],
)
def test_registrations_in_a_namespace_of_the_candidates_own_and_imports_by_literal_names_are_not(tmp_path, source):
    assert not _errors(_scan_source(tmp_path, source))


def test_a_tensor_subclass_handler_is_named_as_a_warning(tmp_path):
    source = (
        "import torch\nclass S(torch.Tensor):\n    @classmethod\n"
        "    def __torch_dispatch__(c, f, t, a=(), k=None):\n        return 0\n"
    )
    found = _scan_source(tmp_path, source)
    assert [(f.kind, f.severity) for f in found] == [(FindingKind.evasion, Severity.warning)]


def test_ops_run_below_the_python_key_count_once_however_they_were_reached():
    # Must count: each way to run an op for the CPU key, which no dispatch mode sees. Twin: an op run for the Python
    # key (the mode sees it) counts once, not twice; a plain op once.
    from mcp_server.engine.jobs import recorder

    recorder.install_launch_hooks()
    cpu, keys = torch._C.DispatchKey.CPU, torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
    a, b = torch.randn(64), torch.randn(64)
    handle = torch._C._dispatch_find_schema_or_throw("aten::tanh", "")
    ways = {
        "mul": lambda: a * b,
        "sin": lambda: torch.ops.aten.sin.default._op_dk(torch._C.DispatchKey.Python, a),
        "add": lambda: torch.ops.aten.add.Tensor.redispatch(keys, a, b),
        "cos": lambda: torch.ops.aten.cos.default._op_dk(cpu, a),
        "exp": lambda: torch._C._get_operation_overload("aten::exp", "")[1](cpu, a),
        "tanh": lambda: handle.redispatch_boxed(keys, a),
    }
    if hasattr(torch.library, "get_kernel"):
        ways["sigmoid"] = lambda: torch.library.get_kernel("aten::sigmoid", "CPU").call_boxed(keys, a)
    for name, run in ways.items():
        with recorder.recording() as record:
            run()
        assert {op: int(use[0]) for op, use in record.ops.items()} == {name: 1}, (name, record.ops)


def test_raw_memory_through_ctypes_during_a_call_is_noted_and_torchs_own_use_is_not():
    import ctypes
    import os

    from mcp_server.engine.jobs import recorder

    recorder.install_launch_hooks()
    t = torch.arange(4, dtype=torch.float32)
    with recorder.recording() as record:
        values = list((ctypes.c_float * 4).from_address(t.data_ptr()))
        raw = ctypes.string_at(t.data_ptr(), 16)
    assert values == [0.0, 1.0, 2.0, 3.0] and len(raw) == 16
    assert [n.split(" from ")[0] for n in record.raw_memory] == ["a ctypes type's from_address", "ctypes.string_at"]
    # Twin: the same call made by torch's own code (a function whose file is in torch's folder) is not noted.
    space: dict = {}
    code = "import ctypes\ndef read(p):\n    return ctypes.string_at(p, 16)\n"
    exec(compile(code, os.path.join(os.path.dirname(torch.__file__), "_ptt_twin.py"), "exec"), space)
    with recorder.recording() as record:
        assert space["read"](t.data_ptr()) == raw
    assert record.raw_memory == []


def test_native_code_loaded_from_outside_the_installed_packages_is_named_and_torchs_own_loads_are_not(tmp_path):
    # Must be named: a shared library ctypes loads for the test's code, an extension module imported from a folder of
    # its own. Twins: the same ctypes load made by torch's code (a function whose file is in torch's folder), and an
    # extension module imported from the installed Python, are not.
    import ctypes
    import importlib.util
    import os
    import shutil

    import triton

    from mcp_server.engine.jobs import recorder

    recorder.install_launch_hooks()
    before = list(recorder._native)
    try:
        ctypes.CDLL("libm.so.6")
        assert recorder.native_loads()[len(before) :] == ["a shared library libm.so.6"]
        space: dict = {}
        code = "import ctypes\ndef load():\n    return ctypes.CDLL('libm.so.6')\n"
        exec(compile(code, os.path.join(os.path.dirname(torch.__file__), "_ptt_twin.py"), "exec"), space)
        space["load"]()
        assert len(recorder.native_loads()) == len(before) + 1
        import _bisect

        bisect = _bisect.__file__  # an extension module of the installed Python's
        spec = importlib.util.spec_from_file_location("_bisect", bisect)
        importlib.util.module_from_spec(spec)  # from the installed Python: not named
        assert len(recorder.native_loads()) == len(before) + 1
        copy = shutil.copy(bisect, tmp_path)
        # Triton's code loading its compiled launcher from its cache (a function whose file is in Triton's folder).
        code = "import importlib.util\ndef load(p):\n    s = importlib.util.spec_from_file_location('_bisect', p)\n"
        code += "    return importlib.util.module_from_spec(s)\n"
        exec(compile(code, os.path.join(os.path.dirname(triton.__file__), "_ptt_twin.py"), "exec"), space)
        space["load"](copy)
        assert len(recorder.native_loads()) == len(before) + 1
        importlib.util.module_from_spec(importlib.util.spec_from_file_location("_bisect", copy))
        assert recorder.native_loads()[-1] == f"a native extension module {os.path.basename(copy)} from {tmp_path}"
    finally:
        del recorder._native[len(before) :]


def test_kernels_registered_for_torch_ops_are_named_and_torchs_own_imports_are_not():
    from mcp_server.engine.jobs import recorder

    recorder.install_launch_hooks()
    before = recorder.replaced_kernels()
    # torch's own modules, imported late, register kernels of their own.
    import torch._dynamo

    assert recorder.replaced_kernels() == before
    lib = torch.library.Library("aten", "IMPL")
    try:
        lib.impl("mul.Tensor", torch.library.fallthrough_kernel, "Python")
        found = recorder.replaced_kernels()
        assert any("'aten'" in note for note in found), found
        assert any(note.startswith("aten::mul.Tensor's Python kernel (a fallthrough)") for note in found), found
    finally:
        lib._destroy()
        del recorder._replaced[len(before) :]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("attack", "problem"),
    [
        ("matmul_bilinear.py", "matmul_problem.py"),  # a matrix product as one aten._trilinear: its FLOPs count
        ("scale_list_op.py", "scale_problem.py"),  # the tensors of a list argument count, whatever the op
        # A C++ kernel of another torch namespace whose body dispatched only its own allocation (counted as nothing).
        pytest.param(
            "matmul_mkldnn.py",
            "matmul_problem.py",
            marks=pytest.mark.skipif(
                not hasattr(torch.ops.mkldnn, "_linear_pointwise"), reason="this torch has no mkldnn linear"
            ),
        ),
    ],
)
def test_one_torch_op_doing_the_work_counts_as_the_work_it_does(runner, attack, problem):
    result = _validate(runner, attack, ATTACKS / problem)
    assert not result.ok and "torch_compute" in _errors(result.findings), result.findings


def test_heavy_ops_count_their_flops_and_any_op_the_tensors_of_its_lists():
    # Must count as what they do: _trilinear (F.bilinear) standing for a matrix product, a pairwise distance, an
    # inverse, an op over a list of tensors. Twin: an elementwise op still counts its elements.
    from mcp_server.engine.jobs.recorder import op_work

    a, b = torch.ones(64, 64), torch.ones(64, 64)
    trilinear = (a, b.t().unsqueeze(-1), torch.ones(64, 1), [1, 3], [0], [1, 2], [2, 3])
    assert op_work("_trilinear", trilinear, torch.ones(64, 64)) == 2 * 64**3
    assert (
        op_work("_cdist_forward", (torch.ones(10, 3), torch.ones(20, 3), 2.0, None), torch.ones(10, 20)) == 3 * 200 * 3
    )
    assert op_work("linalg_inv", (torch.ones(4, 8, 8),), torch.ones(4, 8, 8)) == 2 * 4 * 8**3
    unscale = ([torch.ones(4096)], torch.zeros(1), torch.ones(1))
    assert op_work("_amp_foreach_non_finite_check_and_unscale", unscale, None) == 4096
    assert op_work("mul", (a, b), a) == 64 * 64
    # A one-element first list broadcast over the others; convolutions by other names; addbmm's batch; LDL; FFT;
    # a C++ kernel of another namespace taking two matrices.
    lists = ([torch.ones(1)], [torch.ones(4096)], [torch.ones(4096)])
    assert op_work("_foreach_addcmul", lists, [torch.ones(4096)]) == 4096 * 3
    tbc = (torch.ones(64, 1, 32), torch.ones(1, 32, 16), torch.zeros(16), 0)
    assert op_work("conv_tbc", tbc, torch.ones(64, 1, 16)) == 2 * 64 * 16 * 32
    batches = (torch.zeros(4, 4), torch.ones(1000, 4, 1), torch.ones(1000, 1, 4))
    assert op_work("addbmm", batches, torch.ones(4, 4)) == 2 * 1000 * 4 * 4
    assert op_work("linalg_ldl_factor_ex", (torch.ones(8, 8),), torch.ones(8, 8)) >= 2 * 8**3
    assert op_work("_fft_r2c", (torch.ones(1024),), torch.ones(513)) == 5 * 1024 * 10
    assert op_work("_linear_pointwise", (a, b), a, foreign=True) == 2 * 64**3


def test_matmul_variants_count_their_flops_and_foreach_ops_their_lists():
    from mcp_server.engine.jobs.recorder import op_work

    a, b, bias = torch.ones(64, 32), torch.ones(32, 16), torch.zeros(64, 16)
    assert op_work("_addmm_activation", (bias, a, b), torch.ones(64, 16)) == 2 * 64 * 16 * 32
    assert op_work("dot", (torch.ones(1000), torch.ones(1000)), torch.ones(())) == 2 * 1000
    lists = ([torch.ones(100), torch.ones(50)], [torch.ones(100), torch.ones(50)], [torch.ones(100), torch.ones(50)])
    assert op_work("_foreach_addcmul", lists, None) == 150 * 3  # (in place; observe strips the _) addcmul: three
    assert op_work("mul", (torch.ones(10), torch.ones(10)), torch.ones(10)) == 10
    # A fused op whose list argument holds ints (the normalized shape) counts as the elementwise work it fuses.
    x, w = torch.ones(64, 256), torch.ones(256)
    assert op_work("_fused_rms_norm", (x, [256], w, 1e-6), (x, torch.ones(64, 1))) == 64 * 256 * 4


def test_plain_aliases_and_a_pointer_for_alignment_are_not(tmp_path):
    source = (
        "import torch\nimport triton.language as tl\nf32 = torch.float32\ncx = tl.constexpr\n"
        "def aligned(t):\n    return t.data_ptr() % 16 == 0\n"
    )
    assert not _errors(_scan_source(tmp_path, source))


def test_a_tensors_type_name_and_shared_memory_alone_are_not_errors(tmp_path):
    # The twins: a class's own name, and share_memory_ (a warning: the recorder counts what it exposes).
    assert _scan_source(tmp_path, "def f(x):\n    return type(x).__name__, x.__class__.__qualname__\n") == []
    found = _scan_source(tmp_path, "def f(x):\n    return x.share_memory_()\n")
    assert {(f.kind.value, f.severity) for f in found} == {("host_compute", Severity.warning)}, found


def test_setting_torch_flags_is_fine_but_patching_triton_is_evasion(tmp_path):
    (tmp_path / "flags.py").write_text("import torch\ntorch.backends.cuda.matmul.allow_tf32 = True\n")
    (tmp_path / "patch.py").write_text("import triton\ntriton.runtime.jit.JITFunction.run = print\n")
    assert scan.scan(tmp_path / "flags.py") == []
    assert "evasion" in _errors(scan.scan(tmp_path / "patch.py"))


@pytest.mark.slow
def test_no_false_alarm_on_the_bundled_kernels_and_the_validate_fixtures():
    sources = [p for p in (REPO / "reference_kernels").glob("*.py") if p.name != "__main__.py"]
    sources += [p for p in (REPO / "tests" / "fixtures" / "validate").glob("*.py")]
    sources += list((REPO / "tests" / "fixtures" / "eval").rglob("*.py"))
    # These fixtures crash or hang on purpose through the very means the scan looks for.
    on_purpose = {"add_segfault.py", "add_spawns_and_hangs.py", "5_negate.py"}
    flagged = {p.name: _errors(scan.scan(p)) for p in sources if p.name not in on_purpose}
    assert {k: v for k, v in flagged.items() if v} == {}


# --- copy-only kernels -------------------------------------------------------------------------------


def _kernel(source: str) -> ast.FunctionDef:
    tree = ast.parse(source)
    return next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef))


def test_a_copy_is_copy_only_and_arithmetic_on_loads_is_not():
    module = ast.parse((ATTACKS / "_kernels.py").read_text())
    fns = {n.name: n for n in ast.walk(module) if isinstance(n, ast.FunctionDef)}
    assert kernels.copy_only(fns["copy_kernel"])
    assert not kernels.copy_only(fns["fma_kernel"])


@pytest.mark.parametrize(
    ("body", "copy"),
    [
        ("tl.store(o + i, tl.load(x + i).to(tl.float16))", True),  # a cast moves data
        ("tl.store(o + i, tl.where(i < 4, tl.load(x + i), 0.0))", True),  # a select on addresses
        ("tl.store(o + i, tl.where(tl.load(x + i) > 0, 1.0, 0.0))", False),  # a comparison on data
        ("tl.store(o + i, tl.sum(tl.load(x + i), axis=0))", False),
        ("tl.store(o + i, _helper(tl.load(x + i)))", False),  # another jit function: assumed to compute
        ("v = tl.load(x + i)\n    if v > 0:\n        tl.store(o, i)", False),  # data-dependent control flow
        ("tl.atomic_add(o, tl.load(x + i))", False),
        ("tl.load(x + i)", True),  # stores nothing at all
        # Arithmetic that leaves the value as it is: still a copy. Its twins change the value.
        ("tl.store(o + i, tl.load(x + i) * 1.0)", True),
        ("tl.store(o + i, 0 + tl.load(x + i) / 1)", True),
        ("tl.store(o + i, +(tl.load(x + i) - 0.0))", True),
        ("tl.store(o + i, tl.load(x + i) * 2.0)", False),
        ("tl.store(o + i, tl.load(x + i) - 0.5)", False),
        # …and calls that leave it as it is (the same value twice, a reflexive comparison, fma by 1 and 0); twins
        # with another value.
        ("v = tl.load(x + i)\n    tl.store(o + i, tl.maximum(v, v))", True),
        ("v = tl.load(x + i)\n    tl.store(o + i, tl.where(v == v, v, 0.0))", True),
        ("v = tl.load(x + i)\n    tl.store(o + i, tl.where(v > 0, v, v))", True),
        ("v = tl.load(x + i)\n    tl.store(o + i, tl.fma(v, 1, 0))", True),
        ("v = tl.load(x + i)\n    tl.store(o + i, tl.maximum(v, 0.0))", False),
        ("v = tl.load(x + i)\n    tl.store(o + i, tl.where(v > 0, v, 0.0))", False),
        ("v = tl.load(x + i)\n    tl.store(o + i, tl.fma(v, 2, 0))", False),
    ],
)
def test_the_kernel_data_flow(body, copy):
    source = (
        f"@triton.jit\ndef k(x, o, n, B: tl.constexpr):\n    i = tl.program_id(0) * B + tl.arange(0, B)\n    {body}\n"
    )
    assert kernels.copy_only(_kernel(source)) is copy


def test_a_reference_that_only_moves_data_does_not_count_as_computing():
    assert not kernels.reference_computes({"embedding", "flip", "index", "index_select", "gather"})
    assert kernels.reference_computes({"mul", "add"})


# --- the CUDA trace judge ----------------------------------------------------------------------------


def _events(kernels_run, dtoh=0):
    events = [{"ph": "X", "cat": "user_annotation", "name": "ptt_call:base#1@0", "ts": 100.0, "dur": 1000.0}]
    for i, (name, dur) in enumerate(kernels_run):
        events.append({"ph": "X", "cat": "kernel", "name": name, "ts": 200.0 + i * 10, "dur": dur})
    if dtoh:
        events.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pageable)", "ts": 150.0,
                       "dur": 5.0, "args": {"bytes": dtoh}})  # fmt: skip
    # Activity outside every window is not the call's.
    events.append({"ph": "X", "cat": "kernel", "name": "ampere_sgemm_128x64_nn", "ts": 5000.0, "dur": 90.0})
    return trace.summarise(events)["windows"]["base#1@0"]


def test_hidden_library_kernels_are_torch_compute():
    window = _events(
        [("void at::native::vectorized_elementwise_kernel<4, MulFunctor<float>>", 8.0), ("copy_kernel", 2.0)]
    )
    found = cuda_trace.judge_window("base#1", window, ["copy_kernel (_kernels.py:14)"], 0, 16384, "base", 1)
    assert [(f.kind.value, f.severity.value) for f in found] == [("torch_compute", "error")]


def test_triton_kernels_fills_and_recorded_ops_are_not_hidden_compute():
    window = _events(
        [("fma_kernel", 8.0), ("void at::native::vectorized_elementwise_kernel<4, FillFunctor<float>>", 1.0)]
    )
    assert cuda_trace.judge_window("base#1", window, ["fma_kernel (_kernels.py:7)"], 0, 16384, "base", 1) == []
    # A compute kernel the recorder saw (as one op call) is judged by the recorder, not here.
    window = _events([("fma_kernel", 8.0), ("void at::native::reduce_kernel<512, 1, SumOps>", 4.0)])
    assert cuda_trace.judge_window("base#1", window, ["fma_kernel (_kernels.py:7)"], 1, 16384, "base", 1) == []


def _launched(name, launch_ts, gpu_ts, corr):
    return [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": launch_ts, "dur": 2.0,
         "args": {"correlation": corr}},
        {"ph": "X", "cat": "kernel", "name": name, "ts": gpu_ts, "dur": 50.0, "args": {"correlation": corr}},
    ]  # fmt: skip


def test_a_kernel_launched_in_the_call_counts_even_when_the_gpu_starts_it_after_the_call_returned():
    call = {"ph": "X", "cat": "user_annotation", "name": "ptt_call:base#1@0", "ts": 100.0, "dur": 100.0}
    events = [call, *_launched("ampere_sgemm_128x64_nn", 150.0, 900.0, 7)]
    events += _launched("ampere_sgemm_64x64_nn", 400.0, 450.0, 8)  # launched after the call: not its work
    kernels = trace.summarise(events)["windows"]["base#1@0"]["kernels"]
    assert kernels == {"ampere_sgemm_128x64_nn": [1, 50.0]}


def test_kernels_the_validator_launches_itself_inside_a_call_are_left_out():
    call = {"ph": "X", "cat": "user_annotation", "name": "ptt_call:base#1@0", "ts": 100.0, "dur": 100.0}
    own = {"ph": "X", "cat": "user_annotation", "name": "ptt_own:side-stream delay", "ts": 120.0, "dur": 10.0}
    spin = "void at::cuda::(anonymous namespace)::spin_kernel(long)"
    events = [call, own, *_launched(spin, 125.0, 126.0, 1), *_launched(spin, 150.0, 151.0, 2)]
    # Only the spin the validator wrapped is dropped; the candidate's own spin stays the call's.
    assert trace.summarise(events)["windows"]["base#1@0"]["kernels"] == {spin: [1, 50.0]}


def test_data_copied_to_the_host_during_a_call_is_a_round_trip():
    big = _events([("copy_kernel", 2.0)], dtoh=16384)
    small = _events([("fma_kernel", 2.0)], dtoh=4)
    kinds = [
        (f.kind.value, f.severity.value) for f in cuda_trace.judge_window("k", big, ["copy_kernel"], 0, 16384, "b", 1)
    ]
    assert kinds == [("host_round_trip", "error")]
    kinds = [
        (f.kind.value, f.severity.value) for f in cuda_trace.judge_window("k", small, ["fma_kernel"], 0, 16384, "b", 1)
    ]
    assert kinds == [("host_round_trip", "info")]


# --- each attack, validated (interpreter) -------------------------------------------------------------


def _validate(runner, candidate: str, reference: Path = PROBLEM):
    return validate(
        f"{reference}:reference",
        f"{ATTACKS / candidate}:candidate",
        runner=runner,
        seeds=1,
        derive_shapes=False,
        determinism=False,
        timeout_s=60,
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("attack", "kinds"),
    [
        ("dispatch_toggle.py", {"evasion", "copy_only_kernel"}),
        ("numpy_host.py", {"host_compute", "copy_only_kernel"}),
        ("reads_reference.py", {"evasion", "reads_reference"}),
        # Under the interpreter the reads are counted through torch.Tensor's methods; on a GPU the trace sees them.
        ("python_host.py", {"host_round_trip"}),
        ("storage_host.py", {"host_round_trip"}),
        ("storage_items.py", {"host_round_trip"}),
        ("unhooks_reads.py", {"evasion"}),  # names hidden from the scan; the recorder sees its wrapper gone
        ("serialized_host.py", {"host_round_trip"}),  # torch.save's bytes, counted as read by Python
        ("reduce_host.py", {"host_compute", "host_round_trip"}),  # a storage's __reduce__: pickle's route
        ("base_type_host.py", {"evasion"}),  # the C tensor type's .tolist(), reached through __mro__
        ("dlpack_host.py", {"host_round_trip"}),  # torch._C._to_dlpack, read by numpy
        ("script_host.py", {"host_round_trip"}),  # TorchScript's serializer
        ("per_element_python.py", {"host_compute", "host_round_trip"}),  # map_: Python on every element pair
        # Python on the interpreter's NumPy blocks inside the kernel: the GPU compiler's front end refuses it.
        ("numpy_in_kernel.py", {"compile_error"}),
        # …or in a Python function bound at run time to a @triton.jit helper's name: not the kernel its file holds.
        ("rebinds_helper.py", {"evasion"}),
        # …or in a Python function put in place of a triton.language builtin at run time.
        ("patches_language.py", {"evasion"}),
        ("patches_interpreter.py", {"evasion"}),  # the interpreter's float add replaced: x + y reads as x * y + x
        # torch work where the dispatch mode is off: a custom op's Python body (named like a copy), a heuristic
        # Triton calls back inside the launch.
        ("custom_op_body.py", {"torch_compute"}),
        ("hook_computes.py", {"torch_compute"}),
        # …or in a process the call started (a DataLoader's worker, forked), outside the call's dispatch mode.
        ("worker_process.py", {"process_escape"}),
        # A fused op doing most of the elements, counted as the operations it fuses (as one, it read 47 %).
        ("fused_most.py", {"torch_compute"}),
        # The dispatch toggle by a name the scan cannot read: its wrapper notes the call's use of it.
        ("dispatch_off_by_param.py", {"evasion"}),
        # …below the Python key (redispatch for the CPU key), or under a toggle torch bound by name at import, or
        # under a torch context manager that turns dispatch off around the code that entered it.
        ("below_dispatch.py", {"evasion"}),
        ("no_dispatch_bound.py", {"evasion"}),
        ("no_dispatch_torch_cm.py", {"evasion"}),
        ("foreach_work.py", {"torch_compute"}),  # tensors in lists, an in-place op that returns none
        # An op run for the CPU key through a name the scan cannot read: counted as the mode would count it.
        ("below_dispatch_hidden.py", {"torch_compute"}),
        # A tensor subclass's handler, which the dispatcher calls with the modes off: run with the mode pushed again.
        ("subclass_dispatch.py", {"torch_compute"}),
        # Kernels of torch's own ops: a fallthrough for the Python key; clone's kernel computing, by computed names.
        ("fallthrough_python.py", {"evasion"}),
        ("kernel_override.py", {"evasion"}),
        # The C base type's tolist through super() of a computed type: no torch name, counted at the base type.
        ("base_type_super.py", {"host_round_trip"}),
        # Raw pointers through the ctypes numpy re-exports: the scan's name, wherever in the dotted name ctypes is.
        ("numpy_ctypeslib.py", {"evasion"}),
        # …and by names the scan cannot read: the recorder notes ctypes' cast during the call.
        ("raw_memory_hidden.py", {"host_compute"}),
        # The child's report rewritten on its way out (json.dumps patched): the guard puts it back and refuses it.
        ("forges_result.py", {"evasion"}),
        # The Triton interpreter's raw loads and stores, reached through its Python module: noted at run time.
        ("interp_raw_memory.py", {"host_compute"}),
        # Tensors over numpy arrays' memory made at import: the inputs copied in are data handed to Python.
        ("shared_memory_numpy.py", {"host_round_trip"}),
        # The inputs printed by a kernel's tl.device_print and read back from the call's own output.
        ("device_print_leak.py", {"host_round_trip"}),
        # An array protocol's name built from pieces: the scan folds strings built from literals.
        ("array_interface_built.py", {"host_compute"}),
        # numpy on the tensors' memory inside a heuristic Triton calls back during a launch.
        ("heuristic_numpy.py", {"host_round_trip"}),
        # Tensors over numpy memory made by torch's own helpers, and by the unwrapped maker.
        ("shared_via_torch_helper.py", {"host_round_trip"}),
        # .tolist() inside another counted read's Python callback.
        ("nested_host_read.py", {"host_round_trip"}),
        # torch's tensor-expression evaluator (NNC), which dispatches no op: the scan names it.
        ("tensor_expressions.py", {"evasion"}),
        # A storage made in shared memory at import, mapped by numpy through its descriptor's path.
        ("shared_memory_fd.py", {"host_round_trip"}),
    ],
)
def test_forging_attacks_fail(runner, attack, kinds):
    result = _validate(runner, attack)
    assert not result.ok
    assert kinds <= _errors(result.findings), result.findings
    # Right values reached the wrong way: the summary must not read as if the cases had failed on their values.
    right = all(c.status == "passed" for c in result.cases)
    assert result.summary.startswith("FAIL (") and ("values right in all" in result.summary) is right


def test_an_output_a_thread_finishes_after_the_call_returned_is_judged_as_it_was_returned(runner):
    # The thread writes 50 ms after the call returns and each call first waits for the last one's thread: the
    # judge's copy, taken when the call returns, holds the unwritten allocation (a copy taken after the next call
    # would hold the right values). The twin does its work before returning.
    late = validate(
        f"{PROBLEM}:reference", f"{ATTACKS / 'late_thread.py'}:candidate", runner=runner, seeds=2,
        derive_shapes=False, timeout_s=60,
    )  # fmt: skip
    assert not late.ok and "uninitialized_output" in _errors(late.findings), late.findings
    twin = validate(
        f"{PROBLEM}:reference", f"{ATTACKS / 'good.py'}:candidate", runner=runner, seeds=2, derive_shapes=False,
        timeout_s=60,
    )  # fmt: skip
    assert twin.ok, twin.findings


@pytest.mark.slow
def test_answers_tabled_at_import_for_known_seeds_pass_only_a_run_that_replays_those_seeds(runner):
    # The fixture rebuilds the inputs of seeds 1234-1236 at import and answers them from a table. Replaying those
    # seeds shows the table works; a run's own seeds, drawn afresh, leave the kernel's wrong answer.
    def run(**seed):
        return validate(
            f"{PROBLEM}:reference", f"{ATTACKS / 'seeded_table.py'}:candidate", runner=runner, seeds=3,
            derive_shapes=False, determinism=False, timeout_s=60, **seed,
        )  # fmt: skip

    replayed = run(seed=1234)
    assert replayed.ok and replayed.seeds == [1234, 1235, 1236], replayed.findings
    fresh = run()
    assert not fresh.ok and "mismatch" in _errors(fresh.findings), fresh.findings
    assert not set(fresh.seeds) & {1234, 1235, 1236}


def test_the_file_of_cases_is_gone_before_user_code_runs(runner):
    # Before: a PASS. At import it read every case's inputs from the judge's file beside the job's HOME and had
    # torch compute their answers there, where nothing records; each call patched a wrong kernel from that table.
    result = validate(
        f"{PROBLEM}:reference", f"{ATTACKS / 'cases_file_table.py'}:candidate", runner=runner, seeds=2, timeout_s=120
    )
    assert not result.ok and "mismatch" in _errors(result.findings), result.findings
    assert all(c.status == "failed" for c in result.cases)


@pytest.mark.slow
def test_a_lookup_table_filled_at_import_is_torch_work_and_a_kernel_that_computes_passes(runner):
    # index_select with a table torch filled at import computes any function of a 16-bit input: it counts as work.
    problem = ATTACKS / "sigmoid_problem.py"
    table = _validate(runner, "lookup_table.py", problem)
    assert not table.ok and "torch_compute" in _errors(table.findings), table.findings
    good = _validate(runner, "sigmoid_good.py", problem)
    assert good.ok, good.findings


@pytest.mark.slow
def test_a_fused_torch_op_counts_the_work_it_fuses_and_a_kernel_that_computes_passes(runner):
    # torch.softmax is one op for a reference written as five: counted as one it read as a fifth of the work (a
    # warning, PASS); as the five it fuses, all of it. The same for addcmul on most of an fma's elements.
    problem = ATTACKS / "softmax_parts_problem.py"
    for attack in ("softmax_fused_torch.py", "softmax_safe_torch.py"):
        fused = _validate(runner, attack, problem)
        assert not fused.ok and "torch_compute" in _errors(fused.findings), (attack, fused.findings)
    good = _validate(runner, "../softmax_good.py", problem)
    assert good.ok and not _errors(good.findings), good.findings


@pytest.mark.slow
def test_the_twins_pass(runner):
    assert _validate(runner, "good.py").ok
    flag = _validate(runner, "python_host_small.py")  # one element read back: a flag, not the data
    assert flag.ok, flag.findings
    assert {f.severity for f in flag.findings if f.kind is FindingKind.host_round_trip} <= {Severity.info}
    copy = _validate(runner, "copy_good.py", ATTACKS / "copy_problem.py")
    assert copy.ok, copy.findings
    assert not any(f.kind is FindingKind.copy_only_kernel for f in copy.findings)
    saved = _validate(runner, "serialized_small.py")  # torch.save of one element
    assert saved.ok, saved.findings
    assert {f.severity for f in saved.findings if f.kind is FindingKind.host_round_trip} == {Severity.info}
    status = _validate(runner, "own_status.py")  # its own /proc status and its tensors' type name
    assert status.ok, status.findings
    # A custom op around the kernel; a heuristic picking a block; the kernel launched from a thread, not a process.
    # A custom op writing in place (torch redispatches it below the Python key), a subclass launching the kernel.
    twins = (
        "custom_op_good.py",
        "hook_good.py",
        "thread_worker_good.py",
        "custom_op_inplace_good.py",
        "subclass_good.py",
        "shared_memory_good.py",
        "device_print_good.py",
    )
    for twin in twins:
        result = _validate(runner, twin)
        assert result.ok and not _errors(result.findings), (twin, result.findings)


@pytest.mark.gpu
def test_on_a_gpu_ops_below_the_mode_subclass_handlers_and_replaced_kernels_fail_and_their_twins_pass(runner):
    attacks = {
        "below_dispatch_hidden.py": "torch_compute",
        "subclass_dispatch.py": "torch_compute",
        "fallthrough_python.py": "evasion",
        "kernel_override.py": "evasion",
    }
    for attack, kind in attacks.items():
        result = _validate(runner, attack)
        assert not result.ok and kind in _errors(result.findings), (attack, result.findings)
    for twin in ("custom_op_good.py", "custom_op_inplace_good.py", "subclass_good.py"):
        result = _validate(runner, twin)
        assert result.ok and not _errors(result.findings), (twin, result.findings)


@pytest.mark.gpu
def test_on_a_gpu_the_cuda_trace_sees_hidden_compute_and_host_round_trips(runner):
    toggle = _validate(runner, "dispatch_toggle.py")
    assert {"evasion", "copy_only_kernel", "torch_compute"} <= _errors(toggle.findings), toggle.findings
    host = _validate(runner, "numpy_host.py")
    assert {"host_compute", "host_round_trip"} <= _errors(host.findings), host.findings
    for attack in ("serialized_host.py", "reduce_host.py"):  # torch.save and __reduce__ copy device→host
        saved = _validate(runner, attack)
        assert "host_round_trip" in _errors(saved.findings), (attack, saved.findings)
    small = _validate(runner, "serialized_small.py")
    assert small.ok, small.findings
    good = _validate(runner, "good.py")
    assert good.ok, good.findings
    assert not any(f.kind in (FindingKind.torch_compute, FindingKind.host_round_trip) for f in good.findings)


def test_profiler_annotations_are_fine_but_stopping_the_profiler_is_evasion(tmp_path):
    (tmp_path / "note.py").write_text(
        "import torch.profiler\n\ndef candidate(x):\n    with torch.profiler.record_function('k'):\n        return x\n"
    )
    (tmp_path / "stop.py").write_text("import torch\n\ndef candidate(x):\n    torch.autograd._disable_profiler()\n")
    (tmp_path / "own.py").write_text("from torch.profiler import profile\n")
    assert scan.scan(tmp_path / "note.py") == []
    assert "evasion" in _errors(scan.scan(tmp_path / "stop.py"))
    assert "evasion" in _errors(scan.scan(tmp_path / "own.py"))


def test_a_result_in_no_shape_the_candidates_child_writes_is_evasion_not_an_error_of_the_judge(tmp_path):
    # Must fail as a finding, not a crash of the judge: a record that is a string, a result nested past any
    # decoder's depth. (Every honest fixture's result is judged as before: the twins above.)
    from mcp_server.engine.device import DeviceInfo
    from mcp_server.engine.runner.parent import _read_result
    from mcp_server.engine.validate import _Judge, _judged

    deep = tmp_path / "result.json"
    deep.write_text("[" * 200_000 + "]" * 200_000)
    assert _read_result(deep) is None
    device = DeviceInfo(device="cpu", interpreter=True, torch="t", triton="t", python="p")
    ref_meta = {"cases": [{"key": "base#1", "name": "base", "seed": 1, "status": "ok", "record": {"ops": {}}}]}
    broken = {"cases": [{"key": "base#1", "status": "ok", "record": "boom"}]}
    judge = _Judge(ref_meta, {"cases": {}}, broken, {}, None, (), device)
    assert _judged(judge, PROBLEM, ref_meta, {"cases": {}}, broken) == []
    assert [f.kind for f in judge.findings if f.severity is Severity.error] == [FindingKind.evasion]
    assert "cannot read" in judge.findings[-1].message
