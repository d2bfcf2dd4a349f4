"""The compiled search step against the Python search, on the served engine (issue 49).

    python bench/native_search.py [--shapes demo,student] [--precisions fp32,int8] [--rounds 3]
                                  [--one 32] [--sentences 128] [--batch 64] [--json OUT]

Per shape and precision (exported as served, bench/step_profile.py's shapes), one engine
(``InflightBatcher``, one decode loop, one ONNX Runtime thread, beam 4) decodes the same sentences
with ``BeamBatch.native`` on and off in alternating rounds (on, off, on, off, ...), each round:

* ``one``: ``--one`` requests of one sentence, one at a time (what interactive use waits on);
* ``bulk``: ``--sentences`` sentences in requests of ``--batch``.

Reports each round's seconds, the ratio off / on per pair of rounds (above 1: the compiled step
is faster) and whether both gave the same hypotheses (tokens and score bits).

``--gil``: instead, the server's layout (``EnginePool``, two decode loops of one thread, bulk in
requests of ``--batch``), the compiled step releasing the GIL while it works (from 4 rows, the
default) against never releasing it, alternating.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from step_profile import (  # noqa: E402
    BEAM,
    MAX_NEW,
    _cpu_flags,
    alternating_parser,
    checkpoint_dir,
    export_shape,
    sentences,
)


def main() -> None:
    parser = alternating_parser(__doc__)
    parser.add_argument("--gil", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    from nmtserve.decoding import native
    from nmtserve.decoding.search import BeamBatch, SearchOptions
    from nmtserve.engine import InflightBatcher
    from nmtserve.model.tokenizer import load_tokenizer
    from nmtserve.runtime.onnxruntime import OnnxModel
    from nmtserve.runtime.spec import ModelSpec

    if not native.available():
        sys.exit("nmtserve_native is not installed (pip install ./native)")
    report: dict = {"cpu_flags": _cpu_flags(), "beam": BEAM, "max_new_tokens": MAX_NEW}
    options = SearchOptions(beam_size=BEAM, max_length=MAX_NEW)
    with tempfile.TemporaryDirectory(prefix="nmtserve-native-search-") as name:
        tmp = Path(name)
        for shape in args.shapes.split(","):
            model_dir = checkpoint_dir(shape, tmp)
            texts = sentences(shape, max(args.sentences, args.one))
            for precision in args.precisions.split(","):
                repo = tmp / f"{shape}-{precision}" / "model_repository"
                export_shape(model_dir, repo, precision, texts)
                art = repo / "generate" / "1"
                spec = ModelSpec.load(art / "model.json")
                tok = load_tokenizer(art, spec)
                ids = [tok.encode(t) for t in texts]
                model = OnnxModel(art / "encoder.onnx", art / "decoder.onnx", spec, threads=1)
                if args.gil:
                    report[f"{shape}/{precision}"] = entry = gil_rounds(model, ids, options, args)
                    print(f"{shape}/{precision}", json.dumps(entry), flush=True)
                    continue
                engine = InflightBatcher(model, max_sentences=args.batch, max_beam=BEAM).start()
                entry: dict = {}
                try:
                    engine.translate(ids[: args.batch], options, timeout=600)  # warm-up
                    for load in ("one", "bulk"):
                        seconds: dict[bool, list[float]] = {True: [], False: []}
                        results: dict[bool, list] = {}
                        for _ in range(args.rounds):
                            for compiled in (True, False):
                                BeamBatch.native = compiled
                                start = time.perf_counter()
                                if load == "one":
                                    out = [engine.translate([s], options, timeout=600)[0] for s in ids[: args.one]]
                                else:
                                    out = [r for at in range(0, args.sentences, args.batch)
                                           for r in engine.translate(ids[at:at + args.batch], options, timeout=600)]
                                seconds[compiled].append(time.perf_counter() - start)
                                results[compiled] = [[(h.tokens, h.score.hex()) for h in r] for r in out]
                        BeamBatch.native = True
                        entry[load] = {
                            "seconds_native": [round(s, 3) for s in seconds[True]],
                            "seconds_python": [round(s, 3) for s in seconds[False]],
                            "python_over_native": [round(p / n, 3) for n, p in zip(seconds[True], seconds[False], strict=True)],
                            "identical": results[True] == results[False],
                        }
                finally:
                    engine.stop()
                report[f"{shape}/{precision}"] = entry
                print(f"{shape}/{precision}", json.dumps(entry), flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


def gil_rounds(model, ids: list, options, args) -> dict:
    """Bulk on two decode loops, the compiled step releasing the GIL (from 4 rows) or never."""
    from nmtserve.decoding import native
    from nmtserve.engine import EnginePool

    engine = EnginePool(model, 2, max_sentences=args.batch, max_beam=BEAM).start()
    seconds: dict[bool, list[float]] = {True: [], False: []}
    results: dict[bool, list] = {}
    try:
        engine.translate(ids[: args.batch], options, timeout=600)  # warm-up
        for _ in range(args.rounds):
            for release in (True, False):
                native.module.release_gil_from(4 if release else 1 << 40)
                start = time.perf_counter()
                out = [r for at in range(0, args.sentences, args.batch)
                       for r in engine.translate(ids[at:at + args.batch], options, timeout=600)]
                seconds[release].append(time.perf_counter() - start)
                results[release] = [[(h.tokens, h.score.hex()) for h in r] for r in out]
    finally:
        native.module.release_gil_from(4)
        engine.stop()
    return {"seconds_released": [round(x, 3) for x in seconds[True]],
            "seconds_held": [round(x, 3) for x in seconds[False]],
            "held_over_released": [round(h / r, 3) for r, h in zip(seconds[True], seconds[False], strict=True)],
            "identical": results[True] == results[False]}


if __name__ == "__main__":
    main()
