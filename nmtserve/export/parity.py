"""Exported graphs against PyTorch: log-probs at every step of whole decodes, and output tokens.

The ONNX decoder runs in lockstep with the PyTorch one on the reference decode's path (same
inputs each step), so the per-step difference is measured where the search actually goes;
then the ONNX model decodes on its own and its tokens must equal the reference's.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..decoding.search import SearchOptions, beam_search
from ..graphs import pad_batch
from ..model.reference import TorchRuntime
from ..model.transformer import Transformer
from ..runtime.lockstep import Lockstep, Stats, diffs
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


def check_parity(
    model: Transformer,
    onnx_model: OnnxModel,
    sources: Sequence[Sequence[int]],
    options: SearchOptions,
    batch_size: int = 16,
    tolerance: float = 5e-4,
) -> ParityReport:
    """Compare the ONNX model with PyTorch on ``sources`` (id lists ending with EOS)."""
    cfg = model.config
    report = ParityReport(tolerance=tolerance)
    torch_runtime = TorchRuntime(model)
    stats = Stats()
    for start in range(0, len(sources), batch_size):
        batch = [list(s) for s in sources[start : start + batch_size]]
        lengths = [len(s) for s in batch]
        src = pad_batch(batch, cfg.pad_id)
        max_steps = max(options.max_length_for(n) for n in lengths)
        ref_keys, ref_values = torch_runtime.encode(src)
        keys, values = onnx_model.encode(src)
        for got, want in zip([*keys, *values], [*ref_keys, *ref_values], strict=True):
            report.max_abs_diff_memory = max(report.max_abs_diff_memory, diffs(got, want)[0])

        lockstep = Lockstep(torch_runtime.step_model(src, options.beam_size, max_steps),
                            onnx_model.step_model(src, options.beam_size, max_steps), stats)
        reference = beam_search(lockstep, len(batch), lengths, options, bos_id=cfg.bos_id, eos_id=cfg.eos_id)
        alone = beam_search(
            onnx_model.step_model(src, options.beam_size, max_steps), len(batch), lengths, options,
            bos_id=cfg.bos_id, eos_id=cfg.eos_id,
        )
        for i, (want, got) in enumerate(zip(reference, alone, strict=True)):
            if [h.tokens for h in want] != [h.tokens for h in got]:
                report.token_mismatches.append(start + i)
        report.sentences += len(batch)
    report.max_abs_diff_log_probs, report.steps = stats.max_all, stats.steps
    log.info(report.summary())
    return report
