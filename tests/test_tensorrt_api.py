"""nmtserve's TensorRT code checked against TensorRT's real Python API, without a GPU.

No GPU has run this code, and TensorRT cannot be imported here, so two descriptions of the real
API stand in for running it (scripts/tensorrt-api.txt; scripts/setup.sh downloads and unpacks
them into .venv/tensorrt-api, never installs them):

* the **TensorRT 10.5 bindings** (``tensorrt-cu12-bindings==10.5.0``, what NGC's Triton 24.10
  image runs): their ``tensorrt.so`` is read as bytes, never imported, for the names it
  registers (every class, method, property and enum value of the Python API is a string in
  it). Every TensorRT name the GPU code uses must be there: a name of a later TensorRT, or one
  TensorRT 10 removed, is not.
* the **published type stubs** (``tensorrt-stubs`` 10.13, the closest to 10.5 published): mypy
  checks the GPU code with ``trt`` typed (each module imports ``tensorrt`` under
  ``TYPE_CHECKING``), so a misspelt method, a TensorRT 8 call (``execute_async_v2``,
  ``build_engine``, ``max_workspace_size``, binding indices) or a wrong argument count fails.
  The stubs' own defects are patched at test time (``patched_stubs``): a parameter named ``in``
  (a keyword), a parameter without a default after one with a default (``add_scale_nd``), an
  import of ``tensorrt_libs`` (not in the stubs), a module-level ``bool`` (the DataType alias
  ``trt.bool``) that shadows the builtin in every annotation, and ``Dims`` without the
  ``__iter__`` it has at run time ("Dims ... behave like Python tuples"); errors mypy finds
  inside the stubs themselves are not reported (``ignore_errors`` for their modules).

Each check is shown to fail on a deliberate misuse (mypy's ``--shadow-file`` checks a broken copy
of a module in its place).
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
API = ROOT / ".venv" / "tensorrt-api"
BINDINGS = API / "bindings" / "tensorrt_bindings" / "tensorrt.so"
STUBS = API / "stubs"
# The modules that call TensorRT (the rest of the GPU path reaches it through these).
TENSORRT_CODE = ["nmtserve/runtime/tensorrt.py", "nmtserve/export/tensorrt.py"]
# Everything the GPU image runs that touches them, type-checked together with the stubs.
GPU_CODE = [*TENSORRT_CODE, "nmtserve/export/engines.py", "nmtserve/export/gpucheck.py"]


@pytest.fixture(scope="module")
def api() -> Path:
    if not (BINDINGS.is_file() and (STUBS / "tensorrt_bindings" / "tensorrt.pyi").is_file()):
        message = "TensorRT's API description is not in .venv/tensorrt-api (scripts/setup.sh downloads it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return API


# ---- the stubs, patched, and mypy over the GPU code ----------------------------------------

def patched_stubs(folder: Path) -> Path:
    """The published stubs with their known defects fixed (the module docstring lists them)."""
    out = folder / "stubs"
    shutil.copytree(STUBS, out)
    for stub in out.rglob("*.pyi"):
        text = stub.read_text(encoding="utf-8")
        text = re.sub(r"\bin: ", "in_: ", text)  # `in` is a keyword
        text = text.replace("power: Weights = None, channel_axis: int)", "power: Weights = None, channel_axis: int = ...)")
        text = re.sub(r"^import tensorrt_libs as tensorrt_libs$", "", text, flags=re.M)
        text = re.sub(r"^bool: .*DataType.*$", "", text, flags=re.M)  # shadows the builtin
        if stub.name == "tensorrt.pyi":  # Dims iterates at run time (a sequence): say so
            at = text.index("    def __len__(self) -> int:", text.index("class Dims:"))
            text = text[:at] + "    def __iter__(self) -> typing.Iterator[int]:\n        ...\n" + text[at:]
        stub.write_text(text, encoding="utf-8")
    return out


def mypy_config(folder: Path, stubs: Path) -> Path:
    config = folder / "mypy.ini"
    config.write_text(f"""[mypy]
python_version = 3.10
check_untyped_defs = True
follow_imports = silent
mypy_path = {stubs}

[mypy-tensorrt,tensorrt.*,tensorrt_bindings,tensorrt_bindings.*]
ignore_errors = True

[mypy-cupy,cupy.*,onnxruntime,onnxruntime.*,sentencepiece,triton_python_backend_utils,safetensors,safetensors.*]
ignore_missing_imports = True
""")
    return config


@pytest.fixture(scope="module")
def mypy(api, tmp_path_factory):
    folder = tmp_path_factory.mktemp("tensorrt-mypy")
    config = mypy_config(folder, patched_stubs(folder))

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--config-file", str(config),
                               *args, *GPU_CODE], capture_output=True, text=True, timeout=600, cwd=ROOT)
    return run


def test_the_dims_patch_finds_its_place(api, tmp_path):
    stub = (patched_stubs(tmp_path) / "tensorrt_bindings" / "tensorrt.pyi").read_text(encoding="utf-8")
    dims = stub[stub.index("class Dims:"):stub.index("class Dims2")]
    assert "def __iter__(self) -> typing.Iterator[int]:" in dims


def test_the_gpu_code_type_checks_against_tensorrts_stubs(mypy):
    result = mypy()
    assert result.returncode == 0, result.stdout + result.stderr


MISUSES = [
    # (module, what the code says, the misuse, what mypy must name)
    ("nmtserve/runtime/tensorrt.py", "ctx.execute_async_v3(arrays.stream_handle())",
     "ctx.execute_async_v2(arrays.stream_handle())", "execute_async_v2"),  # TensorRT 8
    ("nmtserve/runtime/tensorrt.py", "engine.get_tensor_name(i)", "engine.get_binding_name(i)",
     "get_binding_name"),  # binding indices, removed in TensorRT 10
    ("nmtserve/runtime/tensorrt.py", "ctx.set_input_shape(name, tuple(value.shape))",
     "ctx.set_input_shap(name, tuple(value.shape))", "set_input_shap"),  # misspelt
    ("nmtserve/runtime/tensorrt.py", "self.context.set_tensor_address(name, pointer)",
     "self.context.set_tensor_address(name)", "set_tensor_address"),  # an argument missing
    ("nmtserve/export/tensorrt.py", "config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, opts.workspace_mb << 20)",
     "config.max_workspace_size = opts.workspace_mb << 20", "max_workspace_size"),  # TensorRT 8
    ("nmtserve/export/tensorrt.py", "builder.build_serialized_network(network, config)",
     "builder.build_engine(network, config)", "build_engine"),  # TensorRT 8
    ("nmtserve/export/tensorrt.py", "layer.set_output_type(j, trt.float32)",
     "layer.set_output_type(j, trt.float32, True)", "set_output_type"),  # one argument too many
]


@pytest.mark.parametrize("module, right, wrong, named", MISUSES, ids=[m[3] for m in MISUSES])
def test_a_misuse_of_the_api_fails_the_type_check(mypy, tmp_path, module, right, wrong, named):
    source = (ROOT / module).read_text(encoding="utf-8")
    assert right in source, f"{module} no longer says {right!r}: update this test"
    broken = tmp_path / Path(module).name
    broken.write_text(source.replace(right, wrong, 1), encoding="utf-8")
    result = mypy("--shadow-file", module, str(broken))
    assert result.returncode == 1 and named in result.stdout, result.stdout + result.stderr


# ---- the 10.5 bindings' names ----------------------------------------------------------------

@cache
def binding_names() -> frozenset[str]:
    """Every identifier the 10.5 bindings hold: the strings of ``tensorrt.so`` (what pybind11
    registers: classes, methods, properties, enum values, keyword arguments) and the names of
    the wheel's ``__init__.py`` (``nptype``, ``volume``). The linker merges a string into the
    tail of a longer one ("INPUT" is stored as the end of "CONDITIONAL_INPUT"), so every tail of
    every string counts too."""
    data = BINDINGS.read_bytes()
    names: set[str] = set()
    for raw in re.findall(rb"[A-Za-z0-9_]+(?=\0)", data):
        word = raw.decode()
        names.update(word[i:] for i in range(len(word)))
    names.update(n.decode() for n in re.findall(rb"[A-Za-z_][A-Za-z0-9_]*", data))
    init = (BINDINGS.parent / "__init__.py").read_text(encoding="utf-8")
    names.update(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", init))
    return frozenset(names)


@cache
def stub_names() -> frozenset[str]:
    """The names the published stubs define: classes, functions, methods, attributes, enum values."""
    names: set[str] = set()
    for stub in STUBS.rglob("*.pyi"):
        text = re.sub(r"\bin: ", "in_: ", stub.read_text(encoding="utf-8"))
        text = text.replace("channel_axis: int)", "channel_axis: int = ...)")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
                names.add(node.name)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
    return frozenset(n for n in names if not n.startswith("__"))


def tensorrt_names_used(source: str) -> set[str]:
    """The attribute names ``source`` uses that are TensorRT API names (the stubs define them):
    mypy has checked that each is used on the TensorRT object that has it."""
    used = {node.attr for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Attribute)}
    return used & stub_names()


def missing_from_bindings(source: str) -> list[str]:
    return sorted(tensorrt_names_used(source) - binding_names())


def test_every_tensorrt_name_the_gpu_code_uses_is_in_the_10_5_bindings(api):
    for module in TENSORRT_CODE:
        source = (ROOT / module).read_text(encoding="utf-8")
        used = tensorrt_names_used(source)
        assert {"execute_async_v3", "set_tensor_address", "set_output_type",
                "build_serialized_network"} & used, module  # the check sees the calls
        assert missing_from_bindings(source) == [], module


def test_a_name_of_a_later_tensorrt_fails_the_bindings_check(api):
    later = stub_names() - binding_names()
    # APIs of TensorRT 10.6-10.13 that the 10.5 bindings do not have
    assert {"add_squeeze", "IDynamicQuantizeLayer", "build_engine_with_config"} <= later
    assert missing_from_bindings("network.add_squeeze(x, axes)\nbuilder.build_engine_with_config(n, c)\n") == [
        "add_squeeze", "build_engine_with_config"]
    assert missing_from_bindings("ctx.execute_async_v3(0)\nmode = trt.TensorIOMode.INPUT\n") == []
