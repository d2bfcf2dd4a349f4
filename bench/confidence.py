"""What word and sentence confidence (``CONFIDENCE``) and the omission check cost, and what they
cost when not asked.

    python bench/confidence.py [--sentences 1000] [--rounds 5] [--threads 1]

Exports the demo model (ONNX Runtime CPU graphs, as served) to a temporary folder and runs the
served engine (``InflightBatcher``) on the held-out sentences (``test.en``) in alternating rounds
in one process, so that the machine's state changes both sides alike:

* **bulk**: every sentence in requests of 32, sentences a second;
* **one sentence**: one request at a time, the median milliseconds a sentence;

each with ``SearchOptions()`` as a request without the new inputs gets it ("off"); the same
plus ``coverage.warning`` on the text, as every request's WARNING is ("checks"); with
``confidence=True`` ("confidence"), and with ``confidence`` and ``alignment`` plus what
``detokenize`` then computes per sentence (``protocol.qualities``, ``coverage.omitted_words``,
``coverage.warning``: "all"). Reported per mode: the median of the rounds and the ratio to "off".
A run before confidence existed has no "off" to compare with the same code: the search's cost
when nobody asks is one flag test a step (``BeamBatch._confidence``), so "off" is it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from nmtserve.coverage import omitted_words, warning
from nmtserve.decoding.search import SearchOptions
from nmtserve.engine import InflightBatcher
from nmtserve.export.pipeline import ExportOptions, export
from nmtserve.model.tokenizer import load_tokenizer
from nmtserve.runtime.onnxruntime import OnnxModel
from nmtserve.runtime.spec import ModelSpec
from nmtserve.server.protocol import qualities, results_to_arrays

ROOT = Path(__file__).resolve().parents[1]
MODES = ("off", "checks", "confidence", "all")


def options_for(mode: str) -> SearchOptions:
    base = SearchOptions(beam_size=4, max_length=200, max_length_a=2.0, max_length_b=10)
    if mode in ("off", "checks"):
        return base
    return dataclasses.replace(base, confidence=True, alignment=mode == "all")


def run(engine, tokenizer, spec, texts: list[str], ids: list[list[int]], mode: str, batch: int) -> float:
    """Seconds to translate ``ids`` in requests of ``batch``, with detokenize's checks for "all"."""
    options = options_for(mode)
    start = time.perf_counter()
    for at in range(0, len(ids), batch):
        results = engine.translate(ids[at:at + batch], options, timeout=600)
        if mode == "all":
            arrays = results_to_arrays(results, 1, spec.pad_id)
            src = np.full((len(results), max(len(s) for s in ids[at:at + batch])), spec.pad_id, dtype=np.int32)
            for i, s in enumerate(ids[at:at + batch]):
                src[i, :len(s)] = s
            src_len = np.array([len(s) for s in ids[at:at + batch]], dtype=np.int32)
            found = qualities(tokenizer, src, src_len, arrays["OUT_IDS"], arrays["OUT_LEN"], arrays["OUT_ALIGN"],
                              arrays["OUT_LOGPROB"], None, None)
            for text, hyps, q in zip(texts[at:at + batch], results, found, strict=True):
                translation = tokenizer.decode(hyps[0].tokens)
                omitted = omitted_words(text, q.covered or (), "en", translation, "fr")
                warning(text, translation, "en", "fr", 1.06, hyps[0].score, -0.35, (), omitted)
        elif mode == "checks":  # what every request's WARNING costs (text only: no ALIGN, no CONFIDENCE)
            for text, hyps in zip(texts[at:at + batch], results, strict=True):
                warning(text, tokenizer.decode(hyps[0].tokens), "en", "fr", 1.06, hyps[0].score, -0.35)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", type=Path, default=ROOT / "models" / "en-fr-numbers")
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--single", type=int, default=100, help="sentences sent one at a time per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    texts = (args.checkpoint / "test.en").read_text(encoding="utf-8").splitlines()[:args.sentences]
    with tempfile.TemporaryDirectory(prefix="nmtserve-bench-") as tmp:
        repo = Path(tmp) / "repo"
        export(args.checkpoint, ExportOptions(repository=repo, skip_parity=True, max_target_len=200,
                                              max_source_len=200, max_batch=64))
        art = repo / "generate" / "1"
        spec = ModelSpec.load(art / "model.json")
        tokenizer = load_tokenizer(art, spec)
        ids = [tokenizer.encode(t) for t in texts]
        engine = InflightBatcher(OnnxModel(art / "encoder.onnx", art / "decoder.onnx", spec, threads=args.threads),
                                 max_sentences=args.batch, max_beam=4).start()
        bulk: dict[str, list[float]] = {m: [] for m in MODES}
        single: dict[str, list[float]] = {m: [] for m in MODES}
        try:
            run(engine, tokenizer, spec, texts[:64], ids[:64], "all", args.batch)  # warm up
            for r in range(args.rounds):
                order = MODES if r % 2 == 0 else MODES[::-1]
                for mode in order:
                    seconds = run(engine, tokenizer, spec, texts, ids, mode, args.batch)
                    bulk[mode].append(len(ids) / seconds)
                for mode in order:
                    n = min(args.single, len(ids))
                    seconds = run(engine, tokenizer, spec, texts[:n], ids[:n], mode, 1)
                    single[mode].append(1000 * seconds / n)
                print(f"round {r + 1}: " + ", ".join(f"{m} {bulk[m][-1]:.0f} sent/s, {single[m][-1]:.2f} ms"
                                                     for m in MODES), flush=True)
        finally:
            engine.stop()
    report = {}
    for mode in MODES:
        report[mode] = {"bulk_sent_per_s": round(statistics.median(bulk[mode]), 1),
                        "bulk_ratio_to_off": round(statistics.median(b / o for b, o in zip(bulk[mode], bulk["off"],
                                                                                         strict=True)), 3),
                        "one_sentence_ms": round(statistics.median(single[mode]), 2),
                        "one_sentence_ratio_to_off": round(statistics.median(
                            s / o for s, o in zip(single[mode], single["off"], strict=True)), 3)}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
