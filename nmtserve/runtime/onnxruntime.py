"""The exported graphs under ONNX Runtime: an encoder call and a ``StepModel`` for the search.

Per step, the self-attention cache is never copied: the buffers are time-major
``(T_max, R, L, h, d_k)`` so ``buf[:T]`` is a contiguous view ORT reads in place, beams are
reordered through the ``cache_rows`` table, and only the new step's K/V come back.

Every runtime (this one, ``TensorRTModel``, the BLS runtime) has the same shape: ``encode(src_ids)``
-> per-layer memory K and V lists, and ``run_step(feeds, outputs)`` -> ``{name: array}`` for the
requested decoder outputs (``nmtserve.graphs``), nothing read by position.
"""

from __future__ import annotations

import base64
import ctypes
import itertools
import logging
import os
import sys
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import onnxruntime as ort

from .. import graphs
from . import native_step, vocabulary
from .arrays import HOST, ArrayBackend
from .lockstep import LockstepModel, step_model
from .spec import ModelSpec

log = logging.getLogger(__name__)


_shared_arena: list[bool] = []  # [registered?] once per process
_shared_arena_lock = threading.Lock()


def _register_shared_arena() -> bool:
    """One CPU arena for every session of the process, growing by what is asked of it.

    By default each session has its own arena and an arena grows by doubling its last chunk: at
    NLLB-200-600M's 256,206-word logits, the generate process kept ~270 MB more under load than
    with one shared arena extended by the requested size, at the same speed (measured: 1730 vs
    1458 MB after the same bulk; switching the arena off saved more and cost 40% of the speed:
    every step's logits were then fresh pages)."""
    with _shared_arena_lock:
        if not _shared_arena:
            try:
                info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
                # max_mem 0: no limit; extend strategy 1: kSameAsRequested; chunk sizes: ORT's defaults.
                ort.create_and_register_allocator(info, ort.OrtArenaCfg(0, 1, -1, -1))
                _shared_arena.append(True)
            except Exception as exc:  # noqa: BLE001 - an older runtime: each session keeps its own arena
                log.warning("ONNX Runtime: no shared CPU arena (%s); each session keeps its own", exc)
                _shared_arena.append(False)
        return _shared_arena[0]


def session_options(threads: int | None = None) -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if threads:
        so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    # Spinning workers fight the Python thread between calls on small machines (bench/RESULTS.md).
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if _register_shared_arena():
        so.add_session_config_entry("session.use_env_allocators", "1")
    return so


INEXACT_INT8 = (
    "int8 graphs are not exact under ONNX Runtime on this CPU: without VNNI (AVX-512 VNNI, AVX-VNNI or "
    "AMX) its uint8 x int8 kernels add pairs of products in saturating 16-bit integers, which changes "
    "translations. Serve them with nmtserve's compiled int8 step, exact on every CPU (pip install "
    "./native; the CPU image has it), or export fp32 (--precision fp32). NMTSERVE_INEXACT_INT8=1 runs "
    "them anyway (for measurements)")
_int8_exact: list[bool] = []  # the probe's answer, once per process
# The probe's graph, serialized (onnx is not a serving dependency): y = MatMulInteger(a, b), a uint8
# (m, 64), b int8 (64, 16), y int32, opset 13 (onnx.helper made it).
_PROBE = ("CAg6YgoYCgFhCgFiEgF5Ig1NYXRNdWxJbnRlZ2VyEgVwcm9iZVoUCgFhEg8KDQgCEgkKAxIBbQoCCEBaEwoBYhIOCgwIAxIICgIIQAoC"
          "CBBiFAoBeRIPCg0IBhIJCgMSAW0KAggQQgQKABAN")


def int8_products_exact() -> bool:
    """Whether ONNX Runtime sums uint8 x int8 products exactly on this CPU.

    nmtserve's int8 graphs (export/quantize.py) multiply uint8 activation codes by int8 weights.
    ONNX Runtime's kernels for CPUs without VNNI (AVX2, AVX-512 without VNNI) multiply with
    ``vpmaddubsw``, which adds each pair of products in a saturating int16: 255 x 127 twice is
    64,770, far past 32,767 (ONNX Runtime's quantization docs say to use 7-bit weights there).
    With codes around 128 that happens in ordinary rows, not only outliers: on an AVX2-only EPYC the
    int8 decoder's log-probs were 0.26 off the exact sums' in the median (tests/test_native_step.py).
    The probe: a product whose every pair saturates, at one row and at four."""
    if not _int8_exact:
        so = ort.SessionOptions()
        so.log_severity_level = 3
        session = ort.InferenceSession(base64.b64decode(_PROBE), so, providers=["CPUExecutionProvider"])
        k, n = 64, 16
        b = np.full((k, n), 127, np.int8)
        exact = all((session.run(None, {"a": np.full((m, k), 255, np.uint8), "b": b})[0] == 255 * 127 * k).all()
                    for m in (1, 4))
        _int8_exact.append(bool(exact))
    return _int8_exact[0]


def check_int8(precision: str, providers: Sequence[str] = ("CPUExecutionProvider",)) -> None:
    """Refuse int8 graphs on a CPU where ONNX Runtime's int8 products are not exact (``INEXACT_INT8``)."""
    if precision != "int8" or "CPUExecutionProvider" not in providers or os.environ.get("NMTSERVE_INEXACT_INT8") == "1":
        return
    if not int8_products_exact():
        raise RuntimeError(INEXACT_INT8)


MADV_DONTNEED = 4  # <sys/mman.h> on Linux


def release_mapped_weights(graphs: Iterable[Path]) -> int:
    """Drop from memory the pages of the graphs' mapped weight files (``<graph>.onnx.data``, in
    their folders) that building the sessions read; the bytes dropped.

    ONNX Runtime maps a large external initializer instead of copying it; the kernels that
    pre-pack a weight (MatMul, Gemm) read all of it once into their own packed copy and never read
    the mapping again, but the pages they read stay resident: the tied vocabulary table, which the
    decoder's Gemm packs and its Gather keeps reading by rows, counted twice (NLLB-200-600M: 1 GB).
    ``madvise(MADV_DONTNEED)`` gives the pages back; a later read (a Gather's rows) faults them in
    again from the file, unchanged (ONNX Runtime never writes its initializers). Linux only; elsewhere 0."""
    if not sys.platform.startswith("linux"):
        return 0
    folders = {str(Path(g).resolve().parent) for g in graphs}
    try:
        with open("/proc/self/maps", encoding="utf-8") as f:
            maps = f.read().splitlines()
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return 0
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    dropped = 0
    for line in maps:
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or not fields[5].endswith(".data") or os.path.dirname(fields[5]) not in folders:
            continue
        start, end = (int(x, 16) for x in fields[0].split("-"))
        if libc.madvise(start, end - start, MADV_DONTNEED) == 0:
            dropped += end - start
    return dropped


def _shrinking_run_options() -> ort.RunOptions:
    """A run that gives back to the system the CPU arena's chunks it no longer uses when it ends.

    Every encoder run: a batch's encoder intermediates grow with its sources' tokens (NLLB-200-600M
    fp32, two loops of 8 sentences of ~100 tokens: the arena kept ~440 MB more after them); the
    encoder runs once a batch admitted, so reallocating them costs little (measured: bulk within
    noise). Every ``DECODER_SHRINK_EVERY``-th decoder step: each step's intermediates (the logits,
    the gathered past K/V) change size with the running rows, and the arena kept regions of every
    size it had been asked for; shrinking after every step cost 13-25% of the speed (NLLB-200-600M
    fp32, every run's intermediates fresh pages), after every 8th nothing measurable (0.97x, 0.98x
    the time, two alternating pairs) for a peak 105-111 MB lower (3,197 -> 3,090 MB in process, the
    multilingual benchmark's bulk)."""
    options = ort.RunOptions()
    options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    return options


_SHRINKING_RUN = _shrinking_run_options()
DECODER_SHRINK_EVERY = 8


class OnnxModel:
    """Encoder + incremental decoder sessions for one exported model."""

    def __init__(self, encoder: Path, decoder: Path, spec: ModelSpec, threads: int | None = None,
                 providers: list[str] | None = None, native: bool = True):
        self.spec = spec
        providers = providers or ["CPUExecutionProvider"]
        compiled = native and providers == ["CPUExecutionProvider"]
        self._session_args = (threads, providers)
        self._decoder_runs = itertools.count(1)  # run_step's calls (the arena shrinks every DECODER_SHRINK_EVERY-th)
        self._encoder_path, self._decoder_path = str(encoder), str(decoder)
        # The decoder's step in compiled code where the graph allows it (runtime/native_step.py);
        # ONNX Runtime's session of the decoder is then built only if something asks for it (it
        # would hold the weights a second time).
        self.native_step = native_step.load(decoder, spec) if compiled else None
        # The encoder in compiled code where its graph allows it (native_step.NativeEncoder), reading
        # a tied int8 table from the decoder's projection (held once): ONNX Runtime's session of it
        # is then built only if something asks for it.
        self.native_encoder = native_step.load_encoder(encoder, spec, self.native_step) if compiled else None
        self._encoder = None if self.native_encoder else self._new_session(self._encoder_path)
        # The served engine's step on its own pools (no feeds, the new K/V written in place), when compiled.
        self.pool_step = self.native_step.run_pool if self.native_step is not None else None
        # ... and its steps with no Python between them (the search's compiled step in the loop).
        self.pool_steps = self.native_step.run_steps if self.native_step is not None else None
        self._decoder = None if self.native_step else self._new_session(self._decoder_path)
        # The export's restricted vocabularies (runtime/vocabulary.py), applied by the compiled step alone.
        self.vocabularies = self.native_step.vocabularies if self.native_step is not None else None
        if self.vocabularies is not None:
            log.info("restricted target vocabularies (%s, an export's opt-in; %s=0 turns them off): %s",
                     vocabulary.FILE, vocabulary.ENV, self.vocabularies.describe())
        elif vocabulary.enabled() and (Path(decoder).parent / vocabulary.FILE).exists():
            log.warning("this repository restricts target vocabularies (%s), which only the compiled CPU decoder "
                        "step applies: this runtime decodes with the whole vocabulary", vocabulary.FILE)
        release_mapped_weights((encoder, decoder))
        dims = spec.dims
        self._enc_out = [t.name for t in graphs.encoder_outputs(dims)]
        self._float: type[np.floating] = np.float32
        if self.native_step is not None:  # float32 inputs and outputs (fp32 and int8 graphs alike)
            self.has_attention = self.native_step.has_attention
        else:
            past_type = next(i.type for i in self.decoder.get_inputs() if i.name == "past_key")
            self._float = np.float16 if past_type == "tensor(float16)" else np.float32
            # Graphs exported before the decoder's ``attention`` output have no word alignments.
            self.has_attention = graphs.ATTENTION in {o.name for o in self.decoder.get_outputs()}

    def _new_session(self, path: str) -> ort.InferenceSession:
        threads, providers = self._session_args
        check_int8(self.spec.precision, providers)
        return ort.InferenceSession(path, session_options(threads), providers=providers)

    @property
    def encoder(self) -> ort.InferenceSession:
        """ONNX Runtime's session of the encoder graph (built on first use when the compiled encoder serves)."""
        if self._encoder is None:
            self._encoder = self._new_session(self._encoder_path)
        return self._encoder

    @encoder.setter
    def encoder(self, session) -> None:
        self._encoder = session

    @property
    def decoder(self) -> ort.InferenceSession:
        """ONNX Runtime's session of the decoder graph (built on first use when the compiled step serves)."""
        if self._decoder is None:
            self._decoder = self._new_session(self._decoder_path)
        return self._decoder

    @decoder.setter
    def decoder(self, session) -> None:
        self._decoder = session

    def encode(self, src_ids: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """src_ids (B, S) -> per layer memory keys (B, h, d_k, S) and values (B, h, S, d_k)."""
        if self.native_encoder is not None:
            return self.native_encoder.encode(src_ids)
        out = dict(zip(self._enc_out, self.encoder.run(
            self._enc_out, {"src_ids": np.ascontiguousarray(src_ids, dtype=np.int32)}, _SHRINKING_RUN), strict=True))
        return graphs.split_memory(out, self.spec.layers)

    def step_model(self, src_ids: np.ndarray, beam: int, max_steps: int) -> LockstepModel:
        return step_model(self, src_ids, beam, max_steps)

    def run_step(self, feeds: dict[str, np.ndarray], outputs: Sequence[str] = graphs.STEP_OUTPUTS) -> dict[str, np.ndarray]:
        if self.native_step is not None:
            return self.native_step.run_step(feeds, outputs)
        names = list(outputs)
        shrink = _SHRINKING_RUN if next(self._decoder_runs) % DECODER_SHRINK_EVERY == 0 else None
        return dict(zip(names, self.decoder.run(names, feeds, shrink), strict=True))


class OnnxBoundModel(OnnxModel):
    """The graphs with every input and output bound by address (ONNX Runtime I/O binding).

    The engine's arrays are read and written where they live: with ``CupyArrays`` the session
    runs on the CUDA execution provider, on the backend's stream, and the cache pool and
    cross-attention memory never leave the GPU; host-side feeds (the small per-step tables) are
    uploaded, and every output stays where it was written (the batcher reduces ``log_probs`` on the
    device before it reads them). With ``HOST`` it is the same code
    on the CPU provider (what the tests run).
    """

    def __init__(self, encoder: Path, decoder: Path, spec: ModelSpec, arrays: ArrayBackend = HOST,
                 threads: int | None = None):
        if arrays.device_type == "cuda":  # pragma: no cover - needs CUDA
            cuda = {"device_id": str(arrays.device_id), "user_compute_stream": str(arrays.stream_handle())}
            providers: list = [("CUDAExecutionProvider", cuda), "CPUExecutionProvider"]
        else:
            providers = ["CPUExecutionProvider"]
        super().__init__(encoder, decoder, spec, threads=threads, providers=providers, native=False)
        if arrays.device_type == "cuda" and self.decoder.get_providers()[0] != "CUDAExecutionProvider":
            raise RuntimeError(f"ONNX Runtime cannot run on CUDA here (providers: {self.decoder.get_providers()});"
                               " install onnxruntime-gpu matching the CUDA version")
        self.arrays = arrays
        dims = spec.dims
        self._enc_tensors = graphs.encoder_outputs(dims)
        self._dec_tensors = graphs.served_decoder_outputs(dims, {o.name for o in self.decoder.get_outputs()})

    def _run(self, session: ort.InferenceSession, feeds: dict, outputs: list[graphs.Tensor], sizes: dict[str, int]) -> dict:
        arrays = self.arrays
        binding = session.io_binding()
        bound = []  # keep every bound array alive until the run is over
        for name, value in feeds.items():
            value = arrays.ascontiguous(value) if arrays.is_device(value) else arrays.asarray(value)
            bound.append(value)
            binding.bind_input(name, arrays.device_type, arrays.device_id, value.dtype, value.shape, arrays.pointer(value))
        results = {}
        for t in outputs:
            out = arrays.empty(graphs.shape_of(t, sizes), graphs.resolve_dtype(t, np.dtype(self._float).name))
            binding.bind_output(t.name, arrays.device_type, arrays.device_id, out.dtype, out.shape, arrays.pointer(out))
            results[t.name] = out
        # ONNX Runtime gets the backend's stream (user_compute_stream), but uploads and the pool's
        # scatter must be complete whatever stream it ends up on; a no-op on the host.
        arrays.synchronize()
        session.run_with_iobinding(binding)  # synchronises its own stream before returning
        return results

    def encode(self, src_ids: np.ndarray) -> tuple[list, list]:
        src = np.ascontiguousarray(src_ids, dtype=np.int32)
        out = self._run(self.encoder, {"src_ids": src}, self._enc_tensors, {"batch": src.shape[0], "src_len": src.shape[1]})
        return graphs.split_memory(out, self.spec.layers)

    def run_step(self, feeds: dict, outputs: Sequence[str] = graphs.STEP_OUTPUTS) -> dict:
        batch, beam = feeds["input_ids"].shape
        wanted = [t for t in self._dec_tensors if t.name in outputs]
        return self._run(self.decoder, feeds, wanted, {"batch": batch, "beam": beam, "src_len": feeds["src_mask"].shape[1]})
