"""Ahead-of-time compilation of a user's @triton.jit kernel for a GPU target, in a child, without a GPU.

Uses Triton's own path: ``triton.compile(ASTSource(fn, signature, constexprs, attrs), target=GPUTarget)``.
Resource usage comes from ``ptxas -v`` on the PTX (the ptxas that ships with Triton); SASS from
``cuobjdump``. Nothing here launches a kernel.
"""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from mcp_server.engine.inputs import looks_like_type_list, materialise, parse_type_list
from mcp_server.engine.runner.child import (
    JobContext,
    UsageProblem,
    classify_exception,
    load_module,
    resolve,
)

# The openings of the two errors for a parameter with neither a type nor a value: the parent adds why the file's
# launcher, when it was asked, could not give them.
NO_TYPE = "No type for parameter"
NO_VALUE = "No value for constexpr parameter(s)"

TORCH_TO_TRITON = {
    torch.float32: "fp32",
    torch.float16: "fp16",
    torch.bfloat16: "bf16",
    torch.float64: "fp64",
    torch.int64: "i64",
    torch.int32: "i32",
    torch.int16: "i16",
    torch.int8: "i8",
    torch.uint8: "u8",
    torch.bool: "i1",
}
for _name, _short in (("float8_e4m3fn", "fp8e4nv"), ("float8_e5m2", "fp8e5")):
    if hasattr(torch, _name):
        TORCH_TO_TRITON[getattr(torch, _name)] = _short

SCALAR_TYPES = {
    "i1",
    "i8",
    "i16",
    "i32",
    "i64",
    "u1",
    "u8",
    "u16",
    "u32",
    "u64",
    "fp16",
    "bf16",
    "fp32",
    "fp64",
}
IR_NAMES = ("ttir", "ttgir", "llir", "ptx", "sass")


def unwrap_kernel(obj: Any) -> tuple[Any, list[Any], dict[str, Any]]:
    """(JITFunction, autotune configs, heuristics) behind Autotuner/Heuristics wrappers."""
    from triton.runtime.autotuner import Autotuner, Heuristics
    from triton.runtime.jit import JITFunction

    configs: list[Any] = []
    heuristics: dict[str, Any] = {}
    for _ in range(8):
        if isinstance(obj, Autotuner):
            configs = list(obj.configs)
            obj = obj.fn
        elif isinstance(obj, Heuristics):
            heuristics.update(obj.values)
            obj = obj.fn
        else:
            break
    if not isinstance(obj, JITFunction):
        raise TypeError(type(obj).__name__)
    return obj, configs, heuristics


def _jit_names(module: Any) -> list[str]:
    from triton.runtime import KernelInterface

    return sorted(n for n, v in vars(module).items() if isinstance(v, KernelInterface))


def parse_target(text: str) -> int:
    match = re.fullmatch(r"(?:cuda[:_]?|sm_?)?(\d{2,3})a?", text.strip().lower())
    if not match:
        raise UsageProblem(f"Unknown target {text!r}. Use cuda:80, cuda:90 or cuda:100.")
    return int(match.group(1))


def _type_of(value: Any) -> tuple[str, int | None]:
    """Triton signature type of an example argument, and its divisibility by 16 if known."""
    if isinstance(value, torch.Tensor):
        kind = TORCH_TO_TRITON.get(value.dtype)
        if kind is None:
            raise UsageProblem(f"Tensors of dtype {value.dtype} have no Triton pointer type.")
        return f"*{kind}", 16 if value.data_ptr() % 16 == 0 else None
    if isinstance(value, bool):
        return "i1", None
    if isinstance(value, int):
        kind = "i32" if -(2**31) <= value < 2**31 else "i64"
        return kind, 16 if value % 16 == 0 and value != 0 else None
    if isinstance(value, float):
        return "fp32", None
    raise UsageProblem(f"Cannot infer a Triton type for an argument of type {type(value).__name__}.")


def _parse_signature(text: str, params: list[str], constexpr_params: set[str]) -> dict[str, tuple[str, int | None]]:
    """'x_ptr=*fp32, n=i32:16' or positional '*fp32, i32' → {param: (type, divisibility)}."""
    items = [i.strip() for i in text.split(",") if i.strip()]
    runtime = [p for p in params if p not in constexpr_params]
    out: dict[str, tuple[str, int | None]] = {}
    for pos, item in enumerate(items):
        name, _, kind = item.rpartition("=")
        if not name:
            if pos >= len(runtime):
                raise UsageProblem(
                    f"The signature lists {len(items)} types but the kernel has {len(runtime)} non-constexpr "
                    f"parameters ({', '.join(runtime)})."
                )
            name = runtime[pos]
        name = name.strip()
        kind, _, div = kind.strip().partition(":")
        if name not in params:
            raise UsageProblem(
                f"The signature names `{name}`, which is not a parameter of the kernel ({', '.join(params)})."
            )
        base = kind.lstrip("*")
        if base not in SCALAR_TYPES and not base.startswith("fp8"):
            raise UsageProblem(f"Unknown Triton type {kind!r} for `{name}`; use e.g. *fp32, *bf16, i32, i64, fp32.")
        divisibility = int(div) if div else (16 if kind.startswith("*") else None)
        out[name] = (kind, divisibility)
    return out


def parse_value(value: Any) -> Any:
    """A constexpr value given as text: True/False/None, an int, a float, else the text itself."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    words = {"true": True, "false": False, "none": None}
    if text.lower() in words:
        return words[text.lower()]
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def _example_args(spec: str | None, params: list[str], ctx: JobContext) -> dict[str, Any]:
    if not spec:
        return {}
    if looks_like_type_list(spec):
        items = [i.strip() for i in spec.split(",")]
        named: dict[str, Any] = {}
        # Allow NAME=value items for constexprs next to positional type items.
        positional = []
        for item in re.split(r",(?![^\[]*\])", spec):
            item = item.strip()
            key, sep, value = item.partition("=")
            if sep and key.strip() in params:
                named[key.strip()] = parse_value(value)
            elif item:
                positional.append(item)
        del items
        values = materialise(parse_type_list(", ".join(positional)), "cpu") if positional else []
        out = dict(zip(params, values, strict=False))
        out.update(named)
        return out
    path, _, name = spec.rpartition(":")
    value = resolve(load_module(path, ctx.user_files), name)()
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, list | tuple):
        return dict(zip(params, value, strict=False))
    raise UsageProblem(f"{spec}() must return a list of arguments or a dict of name → value.")


_PTXAS_LINE = re.compile(r"Used (\d+) registers")


def _tool(name: str) -> str | None:
    from triton import knobs

    try:
        tool = getattr(knobs.nvidia, name)
        path = tool.path if hasattr(tool, "path") else str(tool)
        return path if path and os.path.exists(path) else None
    except Exception:
        return None


def _ptxas_usage(ptx: str, arch: int, workdir: Path) -> dict[str, Any]:
    ptxas = _tool("ptxas")
    if arch >= 100:
        blackwell = _tool("ptxas_blackwell")
        ptxas = blackwell or ptxas
    if not ptxas:
        return {"note": "ptxas not found; register counts unavailable"}
    suffix = "a" if arch >= 90 else ""
    src = workdir / "kernel.ptx"
    src.write_text(ptx)
    proc = subprocess.run(
        [ptxas, "-v", f"--gpu-name=sm_{arch}{suffix}", str(src), "-o", str(workdir / "kernel.o")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    text = proc.stdout + proc.stderr
    usage: dict[str, Any] = {"ptxas_output": text[-2000:]}
    if m := _PTXAS_LINE.search(text):
        usage["registers"] = int(m.group(1))
    if m := re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", text):
        usage["spill_stores"], usage["spill_loads"] = int(m.group(1)), int(m.group(2))
    if m := re.search(r"(\d+) bytes stack frame", text):
        usage["stack_bytes"] = int(m.group(1))
    return usage


# Instruction families worth counting in full PTX/SASS (the returned text is truncated; counts are not).
PTX_PATTERNS = {
    "ld.global": r"\bld\.global\.",
    "ld.global.v4": r"\bld\.global\.[\w.]*v4\b",
    "ld.global.v2": r"\bld\.global\.[\w.]*v2\b",
    "st.global": r"\bst\.global\.",
    "st.global.v4": r"\bst\.global\.[\w.]*v4\b",
    "st.global.v2": r"\bst\.global\.[\w.]*v2\b",
    "wgmma": r"\bwgmma\.mma_async\b",
    "mma.sync": r"\bmma\.sync\b",
    "local": r"\b(?:ld|st)\.local\b",
    "fp64": r"\b(?:add|sub|mul|fma|div|sqrt|rcp|ex2|lg2)\.[\w.]*f64\b",
    "atom": r"\b(?:atom|red)\.",
    "cp.async": r"\bcp\.async\.(?!bulk)",
    "tma": r"\bcp\.async\.bulk\.tensor\b",
}
SASS_PATTERNS = {
    "HGMMA": r"\bHGMMA\b",
    "HMMA": r"\bHMMA\b",
    "LDL/STL": r"\b(?:LDL|STL)\b",
    "LDG.128": r"\bLDG\.E\.(?:\w+\.)*128\b",
    "STG.128": r"\bSTG\.E\.(?:\w+\.)*128\b",
    "DFMA/DADD/DMUL": r"\bD(?:FMA|ADD|MUL)\b",
}


def count_instructions(ptx: str, sass: str | None) -> dict[str, int]:
    counts = {name: len(re.findall(pattern, ptx)) for name, pattern in PTX_PATTERNS.items()}
    if sass:
        counts.update({name: len(re.findall(pattern, sass)) for name, pattern in SASS_PATTERNS.items()})
    return counts


def _sass(cubin: bytes, workdir: Path) -> str | None:
    cuobjdump = _tool("cuobjdump")
    if not cuobjdump:
        return None
    path = workdir / "kernel.cubin"
    path.write_bytes(cubin)
    proc = subprocess.run(
        [cuobjdump, "--dump-sass", str(path)], capture_output=True, text=True, timeout=120, check=False
    )
    return proc.stdout if proc.returncode == 0 else None


def load_as_on_gpu(path: str, ctx: JobContext) -> tuple[Any, bool]:
    """Import the kernel's file with ``torch.cuda.is_available()`` answering True, so a module that declares
    its autotune configs by GPU presence (``if not torch.cuda.is_available(): configs = [small]``) shows the
    list a GPU would run. A module whose import then fails (it touches the GPU) is imported as it is."""
    if torch.cuda.is_available():
        return load_module(path, ctx.user_files), False
    original = torch.cuda.is_available
    torch.cuda.is_available = lambda: True  # type: ignore[assignment]
    try:
        return load_module(path, ctx.user_files), True
    except Exception:
        pass
    finally:
        torch.cuda.is_available = original  # type: ignore[assignment]
    import sys

    from mcp_server.engine.runner import child

    key = str(Path(path).resolve())
    child._loaded.pop(key, None)
    for name, mod in list(sys.modules.items()):
        if getattr(mod, "__file__", None) and str(Path(mod.__file__).resolve()) == key:
            del sys.modules[name]
    return load_module(path, ctx.user_files), False


def _select_configs(configs: list[Any], given: dict[str, Any], params: dict[str, Any]) -> tuple[list[int], list[str]]:
    """Indices of the autotune configs that agree with the caller's constexprs (and warps/stages if given).

    A constexpr the configs set is honoured by keeping the configs that set it to that value; when none
    does, the caller's value conflicts with the kernel's own configs and that is a usage error."""
    indices = list(range(len(configs)))
    notes: list[str] = []
    tuned = {k for c in configs for k in c.kwargs}
    for name, value in given.items():
        if name not in tuned:
            continue
        keep = [i for i in indices if configs[i].kwargs.get(name) == value]
        if not keep:
            declared = sorted({repr(c.kwargs.get(name)) for c in configs}, key=str)
            raise UsageProblem(
                f"--constexpr {name}={value!r} conflicts with the autotune configs: they set {name} to "
                f"{', '.join(declared)}. Drop --constexpr {name} to compile every config, pass one of those "
                "values to compile the configs that use it, or pick one with --config N."
            )
        if len(keep) < len(indices):
            notes.append(f"{name}={value!r} keeps autotune config(s) {', '.join(map(str, keep))}")
        indices = keep
    for option in ("num_warps", "num_stages"):
        wanted = params.get(option)
        if wanted:
            keep = [i for i in indices if getattr(configs[i], option, None) == int(wanted)]
            if keep:
                indices = keep
    return indices, notes


def run(params: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    module, as_gpu = load_as_on_gpu(params["kernel"]["path"], ctx)
    obj = resolve(module, params["kernel"]["name"])
    try:
        jit_fn, configs, heuristics = unwrap_kernel(obj)
    except TypeError as exc:
        kernels = _jit_names(module)
        file = Path(params["kernel"]["path"]).name
        listing = f" Kernels in this file: {', '.join(kernels)}; pass one as {file}:{kernels[0]}." if kernels else ""
        raise UsageProblem(
            f"`{params['kernel']['name']}` is a {exc}, not a @triton.jit kernel: compile takes a kernel, not the "
            f"launcher that calls it.{listing}"
        ) from None

    arg_names = list(jit_fn.arg_names)
    constexpr_params = {arg_names[i] for i in jit_fn.constexprs} if hasattr(jit_fn, "constexprs") else set()
    sig_params = inspect.signature(jit_fn.fn).parameters
    examples = _example_args(params.get("args"), arg_names, ctx)
    explicit = _parse_signature(params["signature"], arg_names, constexpr_params) if params.get("signature") else {}
    arch = parse_target(params.get("target") or "cuda:90")

    chosen = params.get("config")
    given = {k: parse_value(v) for k, v in (params.get("constexprs") or {}).items()}
    tuned = {k for c in configs or () for k in c.kwargs}
    unknown = sorted(k for k in given if k not in arg_names and k not in tuned)
    if unknown:
        raise UsageProblem(
            f"--constexpr {', '.join(unknown)}: no parameter of {params['kernel']['name']} is named so (it takes "
            f"{', '.join(arg_names)}). Check the spelling, or drop it."
        )
    selection_notes: list[str] = []
    if configs:
        if chosen in (None, "all"):
            indices, selection_notes = _select_configs(configs, given, params)
        else:
            indices = [int(chosen)]
        for i in indices:
            if not 0 <= i < len(configs):
                raise UsageProblem(
                    f"config {i} does not exist; the kernel has {len(configs)} autotune configs (0–{len(configs) - 1})."
                )
        indices = indices[: int(params.get("max_configs", 16))]
        variants = [(i, configs[i]) for i in indices]
    else:
        variants = [(None, None)]

    wanted_ir = [s for s in params.get("ir") or [] if s in IR_NAMES]
    results = []
    for index, config in variants:
        constexprs: dict[str, Any] = {}
        for name in constexpr_params:
            default = sig_params[name].default
            if default is not inspect.Parameter.empty:
                constexprs[name] = default
        if config is not None:
            constexprs.update({k: v for k, v in config.kwargs.items() if k in constexpr_params})
        constexprs.update({k: v for k, v in examples.items() if k in constexpr_params})
        constexprs.update({k: v for k, v in given.items() if k in arg_names})
        if heuristics:
            meta = {**examples, **constexprs}
            for name, fn in heuristics.items():
                try:
                    constexprs[name] = fn(meta)
                except Exception:
                    continue
        missing_const = sorted(c for c in constexpr_params if c not in constexprs)
        if missing_const:
            raise UsageProblem(
                f"{NO_VALUE} {', '.join(missing_const)}. Pass them as constexprs "
                f"(e.g. --constexpr {missing_const[0]}=1024) or in --args."
            )
        signature: dict[str, str] = {}
        attrs: dict[tuple[int, ...], list[list[Any]]] = {}
        for pos, name in enumerate(arg_names):
            if name in constexpr_params:
                signature[name] = "constexpr"
                continue
            if name in explicit:
                kind, div = explicit[name]
            elif name in examples:
                kind, div = _type_of(examples[name])
            else:
                raise UsageProblem(
                    f"{NO_TYPE} `{name}`. Give a signature (e.g. '*fp32, *fp32, i32') or example "
                    "args (e.g. 'f32[1024], f32[1024], 1024' or path.py:make_args)."
                )
            signature[name] = kind
            if div:
                attrs[(pos,)] = [["tt.divisibility", div]]
        options = {
            "num_warps": int(params.get("num_warps") or (config.num_warps if config else 4)),
            "num_stages": int(params.get("num_stages") or (config.num_stages if config else 3)),
        }
        if config is not None and getattr(config, "num_ctas", 1) != 1:
            options["num_ctas"] = config.num_ctas
        if config is not None and getattr(config, "maxnreg", None):
            options["maxnreg"] = config.maxnreg
        entry: dict[str, Any] = {
            "config_index": index,
            "config": {k: _plain(v) for k, v in (config.kwargs.items() if config else [])},
            "constexprs": {k: _plain(v) for k, v in constexprs.items()},
            "signature": signature,
            **options,
        }
        started = time.perf_counter()
        try:
            src = ASTSource(jit_fn, signature=signature, constexprs=constexprs, attrs=attrs)
            compiled = triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options)
        except BaseException as exc:
            entry["failure"] = classify_exception(exc, ctx.user_files).model_dump(mode="json")
            entry["compile_s"] = round(time.perf_counter() - started, 4)
            results.append(entry)
            continue
        entry["compile_s"] = round(time.perf_counter() - started, 4)
        meta = compiled.metadata
        entry["shared_bytes"] = int(getattr(meta, "shared", 0) or 0)
        entry["name"] = getattr(meta, "name", jit_fn.__name__)
        with tempfile.TemporaryDirectory() as tmp:
            usage = _ptxas_usage(compiled.asm["ptx"], arch, Path(tmp))
            entry.update(usage)
            texts = {k: compiled.asm[k] for k in ("ttir", "ttgir", "llir", "ptx") if k in compiled.asm}
            # Disassembly costs ~0.6 CPU-s a config (nvdisasm's start-up), more than most compiles: only on
            # request. The PTX counts carry what the audit rules read (wgmma, mma, local, fp64).
            if "sass" in wanted_ir:
                sass = _sass(compiled.asm["cubin"], Path(tmp))
                if sass:
                    texts["sass"] = sass
        entry["instructions"] = count_instructions(texts.get("ptx", ""), texts.get("sass"))
        entry["ir_available"] = sorted(texts)
        out_name = f"config{index}" if index is not None else "kernel"
        for key, text in texts.items():
            (ctx.job_dir / f"{out_name}.{key}").write_text(text)
        entry["ir_files_prefix"] = out_name
        results.append(entry)
    return {
        "kernel": jit_fn.__name__,
        "arch": arch,
        "configs": results,
        "autotuned": bool(configs),
        "n_configs": len(configs),
        "params": arg_names,
        "constexpr_params": sorted(constexpr_params),
        "imported_as_gpu": as_gpu and "is_available" in Path(params["kernel"]["path"]).read_text(errors="replace"),
        "selection_notes": selection_notes,
        "int_params_without_divisibility": sorted(
            name
            for name in arg_names
            if name in explicit
            and name not in given
            and explicit[name][1] is None
            and explicit[name][0].startswith(("i", "u"))
        ),
    }


def _plain(value: Any) -> Any:
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    return str(value)
