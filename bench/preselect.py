"""What the search reads per step: full log-probs vs each hypothesis' best 2K+1 (``preselect``).

    python bench/preselect.py [--sentences 300] [--vocab 32000] [--repeats 2]

The in-flight batcher over ONNX Runtime (CPU), the same sentences decoded with
``InflightBatcher(preselect=False)`` (the search reads all ``b x K x V`` log-probs) and
``preselect=True`` (it reads ``b x K x (2K+1)`` candidates picked by ``search.preselect``),
alternating, on two models:

* ``demo``       ``models/en-fr-numbers`` (vocabulary 800) on its held-out sentences;
* ``vocab-N``    a random model of the same family with an N-token vocabulary (d_model 64,
                 2+2 layers, exported here), on random sources: the shape of an opus-mt
                 vocabulary (58k) without its weights, where the search's share of a step grows.

Outputs must be identical (the script fails otherwise); it reports sentences/s per mode and
run. On a GPU the point of preselection is the transfer (``V`` floats per hypothesis per step
never leave the device), which this CPU benchmark does not show. Results go to
bench/results/preselect-*.json.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

from _common import (
    DEFAULT_CHECKPOINT,
    load_average,
    load_test_set,
    machine,
    markdown_table,
    versions,
    write_json,
)

from nmtserve.decoding.search import SearchOptions

log = logging.getLogger("bench.preselect")


def decode(runtime, sources, options, preselect: bool, max_sentences: int) -> tuple[list, float, int]:
    from nmtserve.server.engine import InflightBatcher

    engine = InflightBatcher(runtime, max_sentences=max_sentences, max_beam=options.beam_size,
                             preselect=preselect).start()
    try:
        engine.translate(sources[:4], options, timeout=600)  # warm-up
        started = time.perf_counter()
        out = engine.translate(sources, options, timeout=3600)
        seconds = time.perf_counter() - started
    finally:
        engine.stop()
    return [[h.tokens for h in r] for r in out], seconds, engine.stats["steps"]


def demo_model(tmp: Path, n: int, threads: int):
    from nmtserve.export.pipeline import ExportOptions, export
    from nmtserve.model.checkpoint import load_checkpoint
    from nmtserve.runtime.onnxruntime import OnnxModel
    from nmtserve.runtime.spec import ModelSpec

    tmp.mkdir(parents=True, exist_ok=True)
    export(DEFAULT_CHECKPOINT, ExportOptions(repository=tmp / "repo", skip_parity=True))
    art = tmp / "repo" / "generate" / "1"
    runtime = OnnxModel(art / "encoder.onnx", art / "decoder.onnx", ModelSpec.load(art / "model.json"), threads=threads)
    tok = load_checkpoint(DEFAULT_CHECKPOINT).tokenizer
    texts, _ = load_test_set(DEFAULT_CHECKPOINT, n)
    options = SearchOptions(beam_size=4, max_length=200, max_length_a=2.0, max_length_b=10)
    return runtime, [tok.encode(t) for t in texts], options


def random_model(tmp: Path, n: int, vocab: int, threads: int):
    import numpy as np
    import torch

    from nmtserve.export.onnx_export import dims_of, export_decoder, export_encoder
    from nmtserve.model.config import TransformerConfig
    from nmtserve.model.transformer import Transformer
    from nmtserve.runtime.onnxruntime import OnnxModel
    from nmtserve.runtime.spec import ModelSpec

    torch.manual_seed(0)
    model = Transformer(TransformerConfig(src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=64, h=4, d_ff=128,
                                          encoder_layers=2, decoder_layers=2, dropout=0.0, max_positions=128)).eval()
    with torch.no_grad():
        model.generator.weight.mul_(4.0)  # sharper output, so that beams diverge and EOS comes
    export_encoder(model, tmp / "encoder.onnx")
    export_decoder(model, tmp / "decoder.onnx")
    c, d = model.config, dims_of(model)
    spec = ModelSpec(layers=d.layers, heads=d.heads, d_k=d.d_k, vocab=d.vocab, max_positions=c.max_positions,
                     pad_id=c.pad_id, bos_id=c.bos_id, eos_id=c.eos_id, unk_id=c.unk_id, max_target_len=64)
    rng = np.random.default_rng(1)
    sources = [[*rng.integers(4, vocab, size=rng.integers(3, 20)).tolist(), c.eos_id] for _ in range(n)]
    options = SearchOptions(beam_size=4, max_length=40, max_length_a=1.5, max_length_b=5)
    return OnnxModel(tmp / "encoder.onnx", tmp / "decoder.onnx", spec, threads=threads), sources, options


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sentences", type=int, default=300, help="demo sentences (the random model gets half)")
    ap.add_argument("--vocab", type=int, default=32000, help="vocabulary of the random model")
    ap.add_argument("--repeats", type=int, default=2, help="runs per mode, alternating")
    ap.add_argument("--batch", type=int, default=32, help="running sentences")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("nmtserve").setLevel(logging.WARNING)

    info = {"machine": machine(), "versions": versions("onnxruntime", "numpy"), "args": vars(args), "models": []}
    table = []
    with tempfile.TemporaryDirectory(prefix="nmtserve-preselect-") as tmp_name:
        tmp = Path(tmp_name)
        cases = [("demo", lambda: demo_model(tmp / "demo", args.sentences, args.threads)),
                 (f"vocab-{args.vocab}", lambda: random_model(tmp, args.sentences // 2, args.vocab, args.threads))]
        for name, make in cases:
            runtime, sources, options = make()
            runs: dict[str, list[float]] = {"dense": [], "preselect": []}
            baseline = None
            for _ in range(args.repeats):
                for mode in runs:
                    log.info("%s %s: %d sentences (load %s)", name, mode, len(sources), load_average())
                    tokens, seconds, steps = decode(runtime, sources, options, mode == "preselect", args.batch)
                    if baseline is None:
                        baseline = tokens
                    elif tokens != baseline:
                        log.error("%s: %s changed the output", name, mode)
                        return 1
                    runs[mode].append(len(sources) / seconds)
            best = {mode: max(v) for mode, v in runs.items()}
            info["models"].append({"model": name, "vocab": runtime.spec.vocab, "sentences": len(sources),
                                   "steps": steps, "sentences_per_s": runs, "load_after": load_average()})
            table.append([name, runtime.spec.vocab, len(sources), best["dense"], best["preselect"],
                          f"{best['preselect'] / best['dense']:.2f}x"])
    path = write_json("preselect", info)
    print(markdown_table(["model", "vocab", "sentences", "dense sent/s", "preselect sent/s", "ratio"], table))
    print(f"\nwritten {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
