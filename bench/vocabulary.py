"""A restricted target vocabulary against the whole one (issue 49: CTranslate2's ``use_vmap`` as an
opt-in; nmtserve.runtime.vocabulary): speed and what it costs in quality, on one repository, in
alternating rounds.

    python bench/vocabulary.py --repository REPO [--source FILE --reference FILE]
    python bench/vocabulary.py --repository NLLB_REPO --synthetic 32000 --target-lang fra_Latn --source-lang eng_Latn

``REPO`` was exported with ``--restrict-vocabulary``. Two engines load its graphs: one with the
restriction (``NMTSERVE_VOCABULARY=1``) and one without (``=0``), each laid out as the server lays out
2 cores (``EnginePool``: 2 decode loops x 1 thread). Each round decodes the same sentences on both,
one after the other, in requests of ``--batch`` (bulk; sentences/s), and reports:

* sentences/s of each, and their ratio per round;
* BLEU against ``--reference`` of each (sacrebleu), the share of sentences translated identically,
  and the token agreement (as the export's quality gate computes them), from the first round.

``--synthetic N``: a random-weight model says nothing about quality, and its tiny test tokenizer
covers a few hundred ids: the restriction is then N random ids of the model's vocabulary (plus the
end-of-sentence, unknown and target-language tokens), keyed by ``--target-lang``'s token, written
into a copy of the repository's artifacts (links to its files) — the speed of a realistic
restriction's size. NLLB-200's languages use ~10-40k of its 256k tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _engine(art: Path, spec, restricted: bool, workers: int):
    from nmtserve.engine import EnginePool
    from nmtserve.runtime import vocabulary
    from nmtserve.runtime.onnxruntime import OnnxModel

    os.environ[vocabulary.ENV] = "1" if restricted else "0"
    try:
        model = OnnxModel(art / "encoder.onnx", art / "decoder.onnx", spec, threads=1)
    finally:
        del os.environ[vocabulary.ENV]
    if restricted and model.vocabularies is None:
        sys.exit(f"{art}: no restriction applies (exported without --restrict-vocabulary, or not on the compiled step)")
    return model, EnginePool(model, workers, max_sentences=spec.max_batch, max_beam=4).start()


def _synthetic(art: Path, tmp: Path, size: int, language: str, spec, tok) -> Path:
    from nmtserve.runtime import vocabulary

    out = tmp / "artifacts"
    out.mkdir()
    for item in art.iterdir():
        if item.name != vocabulary.FILE:
            (out / item.name).symlink_to(item.resolve())
    token = tok.language_id(language)
    rng = np.random.default_rng(0)
    ids = set(rng.choice(spec.vocab, size, replace=False).tolist()) | {spec.eos_id, spec.unk_id, token}
    vocabulary.save(out, [vocabulary.Restriction(language, token, tuple(sorted(ids)), f"synthetic {size}", 0)])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repository", type=Path, required=True)
    parser.add_argument("--source", type=Path, default=ROOT / "models" / "en-fr-numbers" / "test.en")
    parser.add_argument("--reference", type=Path, default=ROOT / "models" / "en-fr-numbers" / "test.fr")
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-length", type=int, default=None, help="generated tokens at most (default: the model's rule)")
    parser.add_argument("--synthetic", type=int, default=0, metavar="N", help="a random restriction of N ids (speed only)")
    parser.add_argument("--source-lang", default=None)
    parser.add_argument("--target-lang", default=None)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    import sacrebleu

    from nmtserve.decoding.search import SearchOptions, TargetPrefix
    from nmtserve.model.tokenizer import load_tokenizer
    from nmtserve.runtime.spec import ModelSpec

    art = args.repository / "generate" / "1"
    spec = ModelSpec.load(art / "model.json")
    tok = load_tokenizer(art, spec)
    texts = args.source.read_text(encoding="utf-8").splitlines()[: args.sentences]
    references = args.reference.read_text(encoding="utf-8").splitlines()[: args.sentences] if not args.synthetic else None
    sources = [tok.encode(t, args.source_lang) if args.source_lang else tok.encode(t) for t in texts]
    sources = [s[: spec.max_source_len - 1] + [spec.eos_id] if len(s) > spec.max_source_len else s for s in sources]
    prefixes = [TargetPrefix((tok.language_id(args.target_lang),))] * len(sources) if args.target_lang else None
    options = SearchOptions(beam_size=4, **({"max_length": args.max_length} if args.max_length else {}))
    with tempfile.TemporaryDirectory(prefix="nmtserve-vocabulary-") as name:
        folder = _synthetic(art, Path(name), args.synthetic, args.target_lang, spec, tok) if args.synthetic else art
        engines = {label: _engine(folder, spec, label == "restricted", args.workers) for label in ("whole", "restricted")}
        restriction = engines["restricted"][0].vocabularies.describe()
        print(f"restriction: {restriction}; {len(sources)} sentences, requests of {args.batch}, "
              f"{args.workers} loops x 1 thread", flush=True)

        def decode(engine) -> tuple[list, float]:
            out: list = []
            started = time.perf_counter()
            for at in range(0, len(sources), args.batch):
                part = slice(at, at + args.batch)
                out += engine.translate(sources[part], options, prefixes=prefixes[part] if prefixes else None,
                                        timeout=3600)
            return out, time.perf_counter() - started

        for _, engine in engines.values():  # warm-up
            engine.translate(sources[: args.batch], options, prefixes=prefixes[: args.batch] if prefixes else None)
        rounds, outputs = [], {}
        for r in range(args.rounds):
            entry = {}
            for label, (_, engine) in (engines.items() if r % 2 == 0 else reversed(engines.items())):
                results, seconds = decode(engine)
                entry[label] = round(len(sources) / seconds, 2)
                outputs.setdefault(label, [h[0].tokens for h in results])
            entry["speedup"] = round(entry["restricted"] / entry["whole"], 3)
            rounds.append(entry)
            print(f"round {r + 1}: whole {entry['whole']} sent/s, restricted {entry['restricted']} sent/s "
                  f"({entry['speedup']}x)", flush=True)
        for _, engine in engines.values():
            engine.stop()
    whole, restricted = outputs["whole"], outputs["restricted"]
    report = {
        "repository": str(args.repository), "restriction": restriction, "sentences": len(sources),
        "cpu_flags": sorted(set(open("/proc/cpuinfo").read().split()) & {"avx2", "avx512f", "avx512_vnni", "amx_int8"}),
        "rounds": rounds, "median_speedup": statistics.median(r["speedup"] for r in rounds),
        "identical": round(sum(a == b for a, b in zip(whole, restricted, strict=True)) / len(whole), 4),
        "token_agreement": round(sum(sum(x == y for x, y in zip(a, b, strict=False)) for a, b in zip(whole, restricted, strict=True))
                                 / max(1, sum(max(len(a), len(b)) for a, b in zip(whole, restricted, strict=True))), 4),
    }
    if references is not None:
        for label, tokens in outputs.items():
            report[f"bleu_{label}"] = round(sacrebleu.corpus_bleu([tok.decode(t) for t in tokens], [references]).score, 2)
    print(json.dumps(report, indent=1))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
