"""The decoder step in compiled code against ONNX Runtime's run of the same graph (issue 49).

    python bench/native_step.py [--shapes demo,student,base] [--precisions fp32,int8] [--rounds 3] [--one 32]
                                [--sentences 128] [--batch 64] [--calls 300] [--json OUT]

Per shape (bench/step_profile.py's: the shipped demo, and random-weight student and base shapes),
exported as served at each precision (the fused CPU decoder; int8 as ``--precision int8`` writes
it), one engine (``InflightBatcher``, one decode
loop, one ONNX Runtime thread, beam 4) decodes the same sentences with its decoder step on
``nmtserve_native.DecoderStep`` and on ONNX Runtime in alternating rounds (compiled, ONNX
Runtime, compiled, ...), the encoder the same in both (compiled where the step's rule allows it,
``NMTSERVE_NATIVE_ENCODER=0``: ONNX Runtime):

* ``one``: ``--one`` requests of one sentence, one at a time;
* ``bulk``: ``--sentences`` sentences in requests of ``--batch``.

Reports each round's seconds, the ratio ONNX Runtime / compiled per pair (above 1: the compiled
step is faster), and how many sentences got the same best translation both ways (the two round
differently: float32 noise can flip a near tie, more often with random weights).

``step_us``: the decoder call alone, on feeds captured from the first rounds (the last
one-sentence step and the last step of the largest batch), ``--calls`` calls each way, alternating.

``--against one-thread``: the compiled step in both, lending idle cores (native/src/team.h: a lone
step shares its products with ``nmtserve_native.step_threads()`` threads) against one thread
(``set_step_threads(1)``); the keys then read ``seconds_shared`` / ``seconds_one_thread`` and
``one_thread_over_shared``. The engine has one decode loop here, so every step is a lone step.

``--against onnxruntime-encoder``: the compiled step in both, the encoder compiled
(``nmtserve_native.EncoderStep``) against ONNX Runtime's session of the same encoder graph; keys
``seconds_native_encoder`` / ``seconds_onnxruntime_encoder``, and ``encode_us``: one call of each
on one sentence and on ``--batch`` sentences, ``--calls`` calls each way, alternating.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

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
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--against", choices=("onnxruntime", "one-thread", "onnxruntime-encoder"), default="onnxruntime")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    from nmtserve.decoding.search import SearchOptions

    report: dict = {"cpu_flags": _cpu_flags(), "beam": BEAM, "max_new_tokens": MAX_NEW, "against": args.against}
    options = SearchOptions(beam_size=BEAM, max_length=MAX_NEW)
    with tempfile.TemporaryDirectory(prefix="nmtserve-native-step-") as name:
        tmp = Path(name)
        for shape in args.shapes.split(","):
            model_dir = checkpoint_dir(shape, tmp)
            texts = sentences(shape, max(args.sentences, args.one))
            for precision in args.precisions.split(","):
                report[f"{shape}/{precision}"] = _one(args, model_dir, texts, tmp / f"{shape}-{precision}", precision, options)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


def _one(args, model_dir: Path, texts: list[str], tmp: Path, precision: str, options) -> dict:
    from nmtserve import graphs
    from nmtserve.engine import InflightBatcher
    from nmtserve.model.tokenizer import load_tokenizer
    from nmtserve.runtime.native_step import NativeDecoder
    from nmtserve.runtime.onnxruntime import OnnxModel
    from nmtserve.runtime.spec import ModelSpec

    repo = tmp / "model_repository"
    export_shape(model_dir, repo, precision, texts)
    art = repo / "generate" / "1"
    spec = ModelSpec.load(art / "model.json")
    ids = [load_tokenizer(art, spec).encode(t) for t in texts]
    model = OnnxModel(art / "encoder.onnx", art / "decoder.onnx", spec, threads=1)
    compiled = NativeDecoder(art / "decoder.onnx", spec)
    captured: dict[int, dict] = {}
    run_step = model.run_step

    def keep(feeds, outputs=graphs.STEP_OUTPUTS, run_step=run_step, captured=captured):
        b = feeds["input_ids"].shape[0]
        if b == 1 or b >= captured.get(0, {"input_ids": np.zeros((0, 0))})["input_ids"].shape[0]:
            captured[1 if b == 1 else 0] = dict(feeds)  # the last one-sentence step, the largest batch's
        return run_step(feeds, outputs)

    model.run_step = keep
    engine = InflightBatcher(model, max_sentences=args.batch, max_beam=BEAM).start()
    entry: dict = {"kernels": compiled.kernels}
    from nmtserve.decoding import native as native_module

    threads = native_module.module.step_threads()
    entry["step_threads"] = threads
    team, encoder = args.against == "one-thread", args.against == "onnxruntime-encoder"
    names = (("shared", "one_thread") if team else ("native_encoder", "onnxruntime_encoder") if encoder
             else ("native", "onnxruntime"))
    compiled_encoder = model.native_encoder
    if encoder and compiled_encoder is None:
        raise SystemExit(f"{model_dir.name}/{precision}: the encoder does not run compiled here")

    def use(first: bool) -> None:  # the round's path: first = compiled (shared), else ORT (one thread)
        if team:
            native_module.module.set_step_threads(threads if first else 1)
            return
        if encoder:
            model.native_encoder = compiled_encoder if first else None
            return
        model.native_step = compiled if first else None
        engine.pool_step = compiled.run_pool if first else None
    try:
        engine.translate(ids[: args.batch], options, timeout=600)  # warm-up
        for load in ("one", "bulk"):
            seconds: dict[bool, list[float]] = {True: [], False: []}
            results: dict[bool, list] = {}
            for _ in range(args.rounds):
                for native in (True, False):
                    use(native)
                    start = time.perf_counter()
                    if load == "one":
                        out = [engine.translate([s], options, timeout=600)[0] for s in ids[: args.one]]
                    else:
                        out = [r for at in range(0, args.sentences, args.batch)
                               for r in engine.translate(ids[at:at + args.batch], options, timeout=600)]
                    seconds[native].append(time.perf_counter() - start)
                    results[native] = [r[0].tokens for r in out]
            entry[load] = {
                f"seconds_{names[0]}": [round(s, 3) for s in seconds[True]],
                f"seconds_{names[1]}": [round(s, 3) for s in seconds[False]],
                f"{names[1]}_over_{names[0]}": [round(o / n, 3) for n, o in zip(seconds[True], seconds[False], strict=True)],
                "same_best": f"{sum(a == b for a, b in zip(results[True], results[False], strict=True))}/{len(results[True])}",
            }
    finally:
        engine.stop()
        use(True)
    model.run_step = run_step
    if encoder:  # the encoder's call alone, each way, alternating
        from nmtserve.graphs import pad_batch

        encode_us: dict = {}
        for b in (1, args.batch):
            src = pad_batch(ids[:b], spec.pad_id, np.int32)
            calls = max(2, args.calls // (2 * b))
            times = {True: 0.0, False: 0.0}
            for native in (True, False, True, False):
                use(native)
                model.encode(src)
                start = time.perf_counter()
                for _ in range(calls):
                    model.encode(src)
                times[native] += (time.perf_counter() - start) / calls / 2
            encode_us[f"{b} sentences"] = {names[0]: round(1e6 * times[True], 1), names[1]: round(1e6 * times[False], 1)}
        use(True)
        entry["encode_us"] = encode_us
    else:
        step_us: dict = {}
        for key, label in ((1, "one sentence"), (0, "full batch")):
            feeds = captured.get(key)
            if feeds is None:
                continue
            times: dict[bool, float] = {True: 0.0, False: 0.0}
            for native in (True, False, True, False):
                use(native)
                start = time.perf_counter()
                for _ in range(args.calls // 2):
                    model.run_step(feeds)
                times[native] += time.perf_counter() - start
            step_us[label] = {"rows": int(feeds["input_ids"].size), "past": int(feeds["past_key"].shape[0]),
                              names[0]: round(1e6 * times[True] / args.calls, 1),
                              names[1]: round(1e6 * times[False] / args.calls, 1)}
            use(True)
        entry["step_us"] = step_us
    print(f"{model_dir.name}/{precision}", json.dumps(entry), flush=True)
    return entry


if __name__ == "__main__":
    main()
