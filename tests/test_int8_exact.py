"""int8 graphs are refused where ONNX Runtime would not sum them exactly (runtime/onnxruntime.py).

ONNX Runtime's uint8 x int8 kernels for CPUs without VNNI add pairs of products in saturating
int16 (``vpmaddubsw``): nmtserve's int8 graphs then give other translations, with no error. The
probe ``int8_products_exact`` finds out on the machine; an int8 session is refused there with a
message that names the problem and the ways out; the compiled int8 step (exact everywhere) serves.
"""

from __future__ import annotations

import numpy as np
import pytest

from nmtserve.runtime import onnxruntime as ortrt
from nmtserve.runtime.spec import SPEC_FILE, ModelSpec


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


@pytest.mark.skipif(not _cpu_flags(), reason="no /proc/cpuinfo flags to compare the probe with")
def test_the_probe_finds_exact_sums_exactly_where_the_cpu_has_vnni_or_amx():
    flags = _cpu_flags()
    vnni = bool(flags & {"avx512_vnni", "avx_vnni", "amx_int8"})
    assert ortrt.int8_products_exact() == vnni, (sorted(flags & {"avx2", "avx512bw", "avx512_vnni", "avx_vnni",
                                                                 "amx_int8"}))


@pytest.fixture
def inexact(monkeypatch):
    monkeypatch.setattr(ortrt, "_int8_exact", [False])
    monkeypatch.delenv("NMTSERVE_INEXACT_INT8", raising=False)


def test_an_int8_session_is_refused_where_sums_are_not_exact(demo_int8_repository, inexact, monkeypatch):
    art = demo_int8_repository / "generate" / "1"
    spec = ModelSpec.load(art / SPEC_FILE)
    assert spec.precision == "int8"
    with pytest.raises(RuntimeError, match="not exact under ONNX Runtime on this CPU.*pip install ./native"):
        ortrt.OnnxModel(art / "encoder.onnx", art / "decoder.onnx", spec, native=False)
    # The compiled step and encoder serve it (they never open ONNX Runtime's int8 sessions) ...
    model = ortrt.OnnxModel(art / "encoder.onnx", art / "decoder.onnx", spec)
    if model.native_step is not None and model.native_encoder is not None:
        keys, _ = model.encode(np.array([[5, 6, 7, spec.eos_id]], np.int32))
        assert np.isfinite(keys[0]).all()
        with pytest.raises(RuntimeError, match="not exact"):
            model.decoder  # noqa: B018 - ... and asking for ONNX Runtime's session is refused
    # ... and a user who wants the inexact sums anyway (a measurement) says so.
    monkeypatch.setenv("NMTSERVE_INEXACT_INT8", "1")
    ortrt.OnnxModel(art / "encoder.onnx", art / "decoder.onnx", spec, native=False)


def test_fp32_graphs_are_never_refused(demo_repository, inexact):
    art = demo_repository / "generate" / "1"
    spec = ModelSpec.load(art / SPEC_FILE)
    ortrt.OnnxModel(art / "encoder.onnx", art / "decoder.onnx", spec, native=False)
    ortrt.check_int8("int8", ["CUDAExecutionProvider"])  # int8 graphs are CPU graphs; not this check's
