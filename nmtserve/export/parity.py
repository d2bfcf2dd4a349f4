"""Exported graphs against PyTorch: log-probs at every step of whole decodes, and output tokens.

The ONNX decoder is stepped on the reference decode's path (the same inputs each step), so the
per-step difference is measured where the search actually goes; then the ONNX model decodes on
its own and its tokens must equal the reference's.

The reference is recorded first (``record_reference``: each step's inputs, and its log-probs in
files under a folder) and the ONNX model checked against the recording after (``compare``), so
the PyTorch model can be freed in between: an export never holds the model and the ONNX
sessions at once (at NLLB-200-600M that was 2x the checkpoint for the two alone). The recording
costs sentences x beam x steps x vocabulary x 4 bytes on disk while the check runs (50
sentences of NLLB-200: a few GB), read back one step at a time.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..decoding.search import SearchOptions, beam_search
from ..graphs import pad_batch
from ..model.reference import TorchRuntime
from ..model.transformer import Transformer
from ..runtime.lockstep import Stats, diffs
from ..runtime.onnxruntime import OnnxModel

log = logging.getLogger(__name__)


class ParityError(RuntimeError):
    """The exported graphs do not reproduce the PyTorch model."""


@dataclass
class ParityReport:
    sentences: int = 0
    steps: int = 0
    max_abs_diff_log_probs: float = 0.0
    max_abs_diff_memory: float = 0.0
    token_mismatches: list[int] = field(default_factory=list)
    # Absolute float32 error grows with the logits' scale: the demo model of session 6 (no
    # dropout, very confident) measured 1.5e-4 with every token identical; the previous one 1.4e-5.
    tolerance: float = 5e-4

    @property
    def passed(self) -> bool:
        return self.max_abs_diff_log_probs <= self.tolerance and not self.token_mismatches

    def summary(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        return (
            f"parity {verdict}: {self.sentences} sentences, {self.steps} decoder steps; "
            f"max |log p_onnx - log p_torch| = {self.max_abs_diff_log_probs:.2e} (tolerance {self.tolerance:.0e}); "
            f"max |memory K/V diff| = {self.max_abs_diff_memory:.2e}; "
            f"sentences with different tokens: {len(self.token_mismatches)}"
        )


@dataclass
class _Batch:
    start: int  # index of its first sentence
    src: np.ndarray
    lengths: list[int]
    max_steps: int
    memory: list[np.ndarray]  # the reference's memory K/V, keys then values
    steps: list[tuple] = field(default_factory=list)  # (tokens, parents, batch_index) the search fed each step
    tokens: list[list[list[int]]] = field(default_factory=list)  # each sentence's hypotheses


@dataclass
class Reference:
    """The PyTorch decode of the parity sentences: what ``compare`` checks a model against."""

    folder: Path  # each step's log-probs, ``<batch>-<step>.npy``
    options: SearchOptions
    bos_id: int
    eos_id: int
    batches: list[_Batch] = field(default_factory=list)

    def log_probs(self, batch: int, step: int) -> np.ndarray:
        return np.load(self.folder / f"{batch}-{step}.npy")


class _Recorder:
    """A step model that records what the search feeds it and what it answers."""

    def __init__(self, model, batch: _Batch, folder: Path, number: int):
        self.model, self.batch, self.folder, self.number = model, batch, folder, number

    def step(self, tokens, parents, batch_index):
        out = self.model.step(tokens, parents, batch_index)
        copy = (lambda a: None if a is None else np.array(a, copy=True))  # noqa: E731
        np.save(self.folder / f"{self.number}-{len(self.batch.steps)}.npy", out)
        self.batch.steps.append((copy(tokens), copy(parents), copy(batch_index)))
        return out


def record_reference(model: Transformer, sources: Sequence[Sequence[int]], options: SearchOptions, folder: Path,
                     batch_size: int = 16) -> Reference:
    """Decode ``sources`` (id lists ending with EOS) with PyTorch, recording every step under ``folder``."""
    cfg = model.config
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    reference = Reference(folder, options, cfg.bos_id, cfg.eos_id)
    torch_runtime = TorchRuntime(model)
    for start in range(0, len(sources), batch_size):
        batch = [list(s) for s in sources[start : start + batch_size]]
        lengths = [len(s) for s in batch]
        src = pad_batch(batch, cfg.pad_id)
        max_steps = max(options.max_length_for(n) for n in lengths)
        keys, values = torch_runtime.encode(src)
        entry = _Batch(start, src, lengths, max_steps, [np.asarray(m) for m in (*keys, *values)])
        recorder = _Recorder(torch_runtime.step_model(src, options.beam_size, max_steps), entry, folder,
                             len(reference.batches))
        hypotheses = beam_search(recorder, len(batch), lengths, options, bos_id=cfg.bos_id, eos_id=cfg.eos_id)
        entry.tokens = [[h.tokens for h in sentence] for sentence in hypotheses]
        reference.batches.append(entry)
    return reference


def compare(reference: Reference, onnx_model: OnnxModel, tolerance: float = 5e-4) -> ParityReport:
    """Check ``onnx_model`` against a recorded reference: its log-probs on the reference's path, step
    by step, and its own decode's tokens."""
    report = ParityReport(tolerance=tolerance)
    stats = Stats()
    options = reference.options
    for number, entry in enumerate(reference.batches):
        keys, values = onnx_model.encode(entry.src)
        for got, want in zip([*keys, *values], entry.memory, strict=True):
            report.max_abs_diff_memory = max(report.max_abs_diff_memory, diffs(got, want)[0])
        candidate = onnx_model.step_model(entry.src, options.beam_size, entry.max_steps)
        for step, (tokens, parents, batch_index) in enumerate(entry.steps):
            stats.add_step(candidate.step(tokens, parents, batch_index), reference.log_probs(number, step))
        alone = beam_search(onnx_model.step_model(entry.src, options.beam_size, entry.max_steps), len(entry.lengths),
                            entry.lengths, options, bos_id=reference.bos_id, eos_id=reference.eos_id)
        for i, (want, got) in enumerate(zip(entry.tokens, alone, strict=True)):
            if want != [h.tokens for h in got]:
                report.token_mismatches.append(entry.start + i)
        report.sentences += len(entry.lengths)
    report.max_abs_diff_log_probs, report.steps = stats.max_all, stats.steps
    log.info(report.summary())
    return report


def check_parity(
    model: Transformer,
    onnx_model: OnnxModel,
    sources: Sequence[Sequence[int]],
    options: SearchOptions,
    batch_size: int = 16,
    tolerance: float = 5e-4,
) -> ParityReport:
    """Compare the ONNX model with PyTorch on ``sources`` (id lists ending with EOS): ``record_reference``
    then ``compare``, the recording in a temporary folder."""
    with tempfile.TemporaryDirectory(prefix="nmtserve-parity-") as folder:
        return compare(record_reference(model, sources, options, Path(folder), batch_size), onnx_model, tolerance)
