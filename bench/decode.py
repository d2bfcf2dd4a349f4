"""Decode speed and agreement on one checkpoint: PyTorch eager, ONNX Runtime, the in-flight
batcher and CTranslate2, all on the same weights and the same held-out sentences.

    python bench/decode.py [--checkpoint models/en-fr-numbers] [--sentences 1000]

Rows (beam 4, length penalty 1, max length 2 * source tokens + 10, capped at 200):

* ``pytorch``   ``reference_decode`` (PyTorch eager + the shared numpy beam search), batch 32;
* ``ort``       ``OnnxModel`` + ``beam_search`` in-process, batch 32 (what the engine runs);
* ``ort-es``    the same with ``early_stopping=True`` (stop once K hypotheses finished):
  CTranslate2's stopping rule, for a like-for-like comparison with the ``ct2`` rows;
* ``inflight``  ``InflightBatcher`` over ``OnnxModel`` (max 32 running sentences), every
  sentence submitted as its own request at once; batch-1 latency = one request at a time;
* ``inflight-bound``  the same over ``OnnxBoundModel``: every input and output bound by address
  (ONNX Runtime I/O binding), the code path of the GPU runtimes, here on NumPy arrays;
* ``ct2``       CTranslate2 on the same weights, converted here with ``ctranslate2.specs``
  (fp32, and int8 weights as an extra row), batch 32.

Every row reports sentences/s and tokens/s (generated tokens of the best hypothesis, EOS
included) over all sentences in batches of 32 (file order), p50/p90 latency at batch 1 on the
first 100 sentences, token agreement with the PyTorch reference and with CTranslate2 fp32, and
exact match with test.fr. Timings exclude tokenization and detokenization (common to every
row). ``--omp-wait-policy PASSIVE`` stops OpenMP workers spinning (see bench/README.md: with
spinning workers PyTorch eager is ~10x slower on a 2-core machine as soon as anything else
runs; on an idle one spinning is faster). Results go to bench/results/decode-*.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    DEFAULT_CHECKPOINT,
    MAX_CAP,
    OtherLoad,
    chunks,
    load_average,
    load_test_set,
    machine,
    markdown_table,
    percentile,
    reference_cache_path,
    search_options,
    versions,
    write_json,
)

log = logging.getLogger("bench.decode")

Decoder = Callable[[list[list[int]]], list[list[int]]]  # id lists -> best token lists


# ---- CTranslate2 conversion -------------------------------------------------------------------


def convert_to_ctranslate2(ckpt, out_dir: Path) -> tuple[Path, list[str]]:
    """Write the nmtserve checkpoint as a CTranslate2 Transformer model; returns (dir, vocab).

    Mapping (nmtserve -> ctranslate2.specs): fused Q/K/V for self-attention (``linear[0]``),
    Q then fused K/V for cross-attention, ``linear[-1]`` the output projection; each
    sublayer's LayerNorm goes on the attention / FFN spec (post-norm: applied after the
    residual sum when ``pre_norm`` is False); the sinusoidal table is given explicitly so the
    paper's interleaved sin/cos layout is kept (CT2's built-in table is sin|cos concatenated).
    """
    import ctranslate2.specs as cs
    from ctranslate2.specs import common_spec, transformer_spec

    from nmtserve.model.transformer import sinusoidal_positions

    cfg = ckpt.config
    sd = {k: v.detach().cpu().numpy().astype(np.float32) for k, v in ckpt.model.state_dict().items()}
    activation = {"relu": common_spec.Activation.RELU, "gelu": common_spec.Activation.GELU,
                  "swish": common_spec.Activation.SWISH}[cfg.activation]
    encoder = transformer_spec.TransformerEncoderSpec(cfg.encoder_layers, cfg.h, pre_norm=cfg.pre_norm,
                                                      activation=activation)
    decoder = transformer_spec.TransformerDecoderSpec(cfg.decoder_layers, cfg.h, pre_norm=cfg.pre_norm,
                                                      activation=activation)
    spec = cs.TransformerSpec(encoder, decoder)

    def linear(target, prefix: str) -> None:
        target.weight = sd[f"{prefix}.weight"]
        if f"{prefix}.bias" in sd:
            target.bias = sd[f"{prefix}.bias"]

    def fused(target, prefixes: list[str]) -> None:
        target.weight = np.concatenate([sd[f"{p}.weight"] for p in prefixes])
        target.bias = np.concatenate([sd[f"{p}.bias"] for p in prefixes])

    def norm(target, prefix: str) -> None:
        target.gamma = sd[f"{prefix}.weight"]
        target.beta = sd[f"{prefix}.bias"]

    def ffn(target, prefix: str, norm_prefix: str) -> None:
        norm(target.layer_norm, norm_prefix)
        linear(target.linear_0, f"{prefix}.fc1")
        linear(target.linear_1, f"{prefix}.fc2")

    positions = sinusoidal_positions(cfg.max_positions, cfg.d_model, cfg.position_layout).numpy()
    for stack in (encoder, decoder):
        stack.scale_embeddings = bool(cfg.scale_embedding)
        stack.position_encodings.encodings = positions
    encoder.embeddings[0].weight = sd["src_embed.lut.weight"]
    decoder.embeddings.weight = sd["tgt_embed.lut.weight"]
    decoder.projection.weight = sd["generator.weight"]  # tied: CT2 aliases equal variables
    if cfg.final_logits_bias:
        decoder.projection.bias = sd["final_logits_bias"]
    if cfg.pre_norm:
        norm(encoder.layer_norm, "encoder_norm")
        norm(decoder.layer_norm, "decoder_norm")

    for i, layer in enumerate(encoder.layer):
        p = f"encoder_layers.{i}"
        att = f"{p}.self_attn"
        fused(layer.self_attention.linear[0], [f"{att}.q_proj", f"{att}.k_proj", f"{att}.v_proj"])
        linear(layer.self_attention.linear[1], f"{att}.out_proj")
        norm(layer.self_attention.layer_norm, f"{p}.sub_attn.norm")
        ffn(layer.ffn, f"{p}.ffn", f"{p}.sub_ffn.norm")
    for i, layer in enumerate(decoder.layer):
        p = f"decoder_layers.{i}"
        att, cross = f"{p}.self_attn", f"{p}.cross_attn"
        fused(layer.self_attention.linear[0], [f"{att}.q_proj", f"{att}.k_proj", f"{att}.v_proj"])
        linear(layer.self_attention.linear[1], f"{att}.out_proj")
        norm(layer.self_attention.layer_norm, f"{p}.sub_self.norm")
        linear(layer.attention.linear[0], f"{cross}.q_proj")
        fused(layer.attention.linear[1], [f"{cross}.k_proj", f"{cross}.v_proj"])
        linear(layer.attention.linear[2], f"{cross}.out_proj")
        norm(layer.attention.layer_norm, f"{p}.sub_cross.norm")
        ffn(layer.ffn, f"{p}.ffn", f"{p}.sub_ffn.norm")

    tok = ckpt.tokenizer
    if tok.vocab is not None:
        raise SystemExit("bench/decode.py converts nmtserve checkpoints only (no vocab.json mapping)")
    sp = tok.target
    vocab = [sp.id_to_piece(i) for i in range(cfg.tgt_vocab_size)]
    if len(set(vocab)) != len(vocab):
        raise SystemExit("sentencepiece pieces are not unique: cannot build a CTranslate2 vocabulary")
    spec.config.unk_token = vocab[cfg.unk_id]
    spec.config.bos_token = vocab[cfg.bos_id]
    spec.config.eos_token = vocab[cfg.eos_id]
    spec.config.decoder_start_token = vocab[cfg.bos_id]
    spec.config.layer_norm_epsilon = cfg.layer_norm_eps
    spec.register_source_vocabulary(vocab)
    spec.register_target_vocabulary(vocab)
    spec.validate()
    spec.optimize(quantization=None)
    out_dir.mkdir(parents=True, exist_ok=True)
    spec.save(str(out_dir))
    return out_dir, vocab


# ---- the decoders -------------------------------------------------------------------------------


def torch_decoder(ckpt, options) -> Decoder:
    from nmtserve.model.reference import reference_decode

    def run(batch: list[list[int]]) -> list[list[int]]:
        return [h[0].tokens for h in reference_decode(ckpt.model, batch, options)]

    return run


def ort_decoder(onnx_model, options) -> Decoder:
    from nmtserve.decoding.search import beam_search
    from nmtserve.graphs import pad_batch

    spec = onnx_model.spec

    def run(batch: list[list[int]]) -> list[list[int]]:
        lengths = [len(x) for x in batch]
        max_steps = max(options.max_length_for(n) for n in lengths)
        stepper = onnx_model.step_model(pad_batch(batch, spec.pad_id), options.beam_size, max_steps)
        hyps = beam_search(stepper, len(batch), lengths, options, bos_id=spec.bos_id, eos_id=spec.eos_id)
        return [h[0].tokens for h in hyps]

    return run


def inflight_decoder(engine, options) -> Decoder:
    """Every sentence is its own request, all submitted at once (what concurrent clients do)."""

    def run(batch: list[list[int]]) -> list[list[int]]:
        results: list[list[int] | None] = [None] * len(batch)
        errors: list[BaseException] = []
        remaining = [len(batch)]
        lock, done = threading.Lock(), threading.Event()

        def callback_for(i: int):
            def callback(hyps, error):
                if error is not None:
                    errors.append(error)
                else:
                    results[i] = hyps[0][0].tokens
                with lock:
                    remaining[0] -= 1
                    if remaining[0] == 0:
                        done.set()

            return callback

        for i, ids in enumerate(batch):
            engine.submit([ids], options, callback_for(i))
        if not done.wait(600):
            raise TimeoutError("the in-flight batcher did not finish")
        if errors:
            raise errors[0]
        return results  # type: ignore[return-value]

    return run


def ct2_decoder(translator, vocab: list[str], options, pad_piece: str) -> Decoder:
    piece_id = {p: i for i, p in enumerate(vocab)}

    def run(batch: list[list[int]]) -> list[list[int]]:
        # Per-sentence max lengths are not a CT2 option: a batch decodes up to its longest cap.
        max_len = max(options.max_length_for(len(x)) for x in batch)
        out = translator.translate_batch(
            [[vocab[i] for i in ids] for ids in batch],
            beam_size=options.beam_size, length_penalty=options.length_penalty,
            max_decoding_length=max_len, min_decoding_length=0, return_end_token=True,
            # nmtserve's decoder gives pad log-probability -inf.
            suppress_sequences=[[pad_piece]],
        )
        return [[piece_id[p] for p in r.hypotheses[0]] for r in out]

    return run


def ct2_logprob_diff(translator, vocab: list[str], ckpt, sources: list[list[int]],
                     targets: list[list[int]]) -> float:
    """Max |log p| difference between CTranslate2 ``score_batch`` and PyTorch teacher forcing
    over the given targets (EOS appended): checks the conversion independently of the search."""
    import torch

    cfg = ckpt.config
    targets = [[t for t in tgt if t != cfg.eos_id] for tgt in targets]
    scored = translator.score_batch([[vocab[i] for i in s] for s in sources],
                                    [[vocab[i] for i in t] for t in targets])
    worst = 0.0
    with torch.no_grad():
        for src, tgt, res in zip(sources, targets, scored, strict=True):
            tgt_in = torch.tensor([[cfg.bos_id, *tgt]])
            logp = torch.log_softmax(ckpt.model(torch.tensor([src]), tgt_in)[0], dim=-1)
            want = logp[torch.arange(len(tgt) + 1), torch.tensor([*tgt, cfg.eos_id])].numpy()
            got = np.asarray(res.log_probs, dtype=np.float64)
            if got.shape != want.shape:
                raise RuntimeError(f"CT2 scored {len(got)} tokens, expected {len(want)} ({res.tokens})")
            worst = max(worst, float(np.abs(got - want).max()))
    return worst


# ---- measuring ----------------------------------------------------------------------------------


def throughput(decode: Decoder, sources: list[list[int]], batch: int) -> tuple[list[list[int]], float]:
    decode(sources[: batch if batch > 0 else 32])  # warm-up
    started = time.perf_counter()
    outputs: list[list[int]] = []
    if batch <= 0:  # the whole list at once (the in-flight batcher schedules it itself)
        outputs = decode(sources)
    else:
        for chunk in chunks(sources, batch):
            outputs.extend(decode(chunk))
    return outputs, time.perf_counter() - started


def latencies(decode: Decoder, sources: list[list[int]]) -> tuple[list[list[int]], list[float]]:
    decode(sources[:1])
    outputs, seconds = [], []
    for ids in sources:
        started = time.perf_counter()
        outputs.extend(decode([ids]))
        seconds.append(time.perf_counter() - started)
    return outputs, seconds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", type=Path, default=DEFAULT_CHECKPOINT)
    ap.add_argument("--sentences", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--latency-sentences", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2, help="intra-op threads of every runtime")
    ap.add_argument("--rows", default="pytorch,ort,ort-es,inflight,inflight-bound,ct2,ct2-int8")
    ap.add_argument("--omp-wait-policy", default="keep",
                    help="set OMP_WAIT_POLICY (PASSIVE / ACTIVE) for PyTorch and CTranslate2 (OpenMP); "
                         "default 'keep': leave the environment (OpenMP spins: fastest on an idle machine)")
    args = ap.parse_args(argv)
    if args.omp_wait_policy != "keep":  # before torch / ctranslate2 load libgomp
        os.environ["OMP_WAIT_POLICY"] = args.omp_wait_policy
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("nmtserve").setLevel(logging.WARNING)
    wanted = args.rows.split(",")

    import torch

    from nmtserve.engine import InflightBatcher
    from nmtserve.export.pipeline import ExportOptions, export
    from nmtserve.model.checkpoint import load_checkpoint
    from nmtserve.runtime.onnxruntime import OnnxModel
    from nmtserve.runtime.spec import ModelSpec

    torch.set_num_threads(args.threads)
    info = {"machine": machine(), "versions": versions("torch", "onnxruntime", "ctranslate2", "numpy"),
            "checkpoint": str(args.checkpoint), "sentences": args.sentences, "batch": args.batch,
            "latency_sentences": args.latency_sentences, "threads": args.threads,
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "(unset)"),
            "options": {"beam": 4, "length_penalty": 1.0, "max_length": f"min(2*src+10, {MAX_CAP})"}}
    ckpt = load_checkpoint(args.checkpoint)
    tok, cfg = ckpt.tokenizer, ckpt.config
    texts, refs = load_test_set(args.checkpoint, args.sentences)
    sources = [tok.encode(t) for t in texts]
    options = search_options()
    info["capped_sentences"] = sum(2 * len(s) + 10 > MAX_CAP for s in sources)
    lat_sources = sources[: args.latency_sentences]

    rows: list[dict] = []
    reference: list[list[int]] | None = None
    outputs_of: dict[str, tuple[list[list[int]], list[list[int]]]] = {}  # row -> (b32, b1) outputs
    ref_speed: dict[str, float] = {}

    def record(name: str, what: str, decode: Decoder, batch: int) -> None:
        nonlocal reference
        log.info("%s: %d sentences (load %s)", name, len(sources), load_average())
        load_before = load_average()
        others = OtherLoad().start()
        outputs, seconds = throughput(decode, sources, batch)
        lat_outputs, lat = latencies(decode, lat_sources)
        others_pct = others.stop()
        outputs_of[name] = (outputs, lat_outputs)
        if reference is None:
            reference = outputs
        agree_b1 = sum(a == b for a, b in zip(lat_outputs, reference, strict=False))
        agree = sum(a == b for a, b in zip(outputs, reference, strict=True))
        exact = sum(tok.decode(o) == r for o, r in zip(outputs, refs, strict=True))
        n_tokens = sum(len(o) for o in outputs)
        row = {
            "row": name, "what": what, "seconds": round(seconds, 3),
            "sentences_per_s": len(sources) / seconds, "tokens_per_s": n_tokens / seconds,
            "p50_ms_batch1": 1000 * percentile(lat, 50), "p90_ms_batch1": 1000 * percentile(lat, 90),
            "agreement_with_pytorch": agree / len(sources), "exact_match_test_fr": exact / len(sources),
            "agreement_with_pytorch_batch1": agree_b1 / len(lat_sources),
            "load_before": load_before, "load_after": load_average(), "other_processes_cpu_pct": others_pct,
            "other_processes_top": others.top,
        }
        rows.append(row)
        log.info("%s: %.1f sent/s, p50 %.1f ms, agreement %.3f, exact %.3f; other processes %.0f%% CPU %s", name,
                 row["sentences_per_s"], row["p50_ms_batch1"], row["agreement_with_pytorch"],
                 row["exact_match_test_fr"], others_pct, others.top)
        ref_speed.setdefault(name, row["sentences_per_s"])

    with tempfile.TemporaryDirectory(prefix="nmtserve-bench-") as tmp_name:
        tmp = Path(tmp_name)
        repo = tmp / "repo"
        export(args.checkpoint, ExportOptions(repository=repo, skip_parity=True, max_target_len=MAX_CAP,
                                              max_source_len=MAX_CAP, max_batch=64))
        art = repo / "generate" / "1"
        spec = ModelSpec.load(art / "model.json")

        # The reference always runs first: every other row is compared with it.
        record("pytorch", "PyTorch eager reference_decode, batch 32", torch_decoder(ckpt, options), args.batch)
        reference_cache_path(args.checkpoint, args.sentences).parent.mkdir(parents=True, exist_ok=True)
        reference_cache_path(args.checkpoint, args.sentences).write_text(json.dumps(
            {"texts": texts, "tokens": reference, "translations": [tok.decode(o) for o in reference]}))

        if {"ort", "ort-es", "inflight"} & set(wanted):
            onnx_model = OnnxModel(art / "encoder.onnx", art / "decoder.onnx", spec, threads=args.threads)
        if "ort" in wanted:
            record("ort", "ONNX Runtime in-process + beam_search, batch 32", ort_decoder(onnx_model, options),
                   args.batch)
        if "ort-es" in wanted:
            record("ort-es", "ONNX Runtime in-process + beam_search(early_stopping=True), batch 32",
                   ort_decoder(onnx_model, dataclasses.replace(options, early_stopping=True)), args.batch)
        if "inflight" in wanted:
            engine = InflightBatcher(onnx_model, max_sentences=args.batch, max_beam=options.beam_size).start()
            try:
                record("inflight", f"InflightBatcher (ORT), {args.batch} running sentences, 1 sentence/request",
                       inflight_decoder(engine, options), 0)
            finally:
                engine.stop()
        if "inflight-bound" in wanted:
            from nmtserve.runtime.onnxruntime import OnnxBoundModel

            bound = OnnxBoundModel(art / "encoder.onnx", art / "decoder.onnx", spec, threads=args.threads)
            engine = InflightBatcher(bound, max_sentences=args.batch, max_beam=options.beam_size).start()
            try:
                record("inflight-bound", f"InflightBatcher (ORT I/O binding), {args.batch} running sentences, "
                       "1 sentence/request", inflight_decoder(engine, options), 0)
            finally:
                engine.stop()
        if "ct2" in wanted or "ct2-int8" in wanted:
            import ctranslate2

            ct2_dir, vocab = convert_to_ctranslate2(ckpt, tmp / "ct2")
            pad_piece = vocab[cfg.pad_id]
            for name, compute in (("ct2", "float32"), ("ct2-int8", "int8")):
                if name not in wanted:
                    continue
                translator = ctranslate2.Translator(str(ct2_dir), device="cpu", compute_type=compute,
                                                    intra_threads=args.threads, inter_threads=1)
                n_check = min(len(sources), args.latency_sentences)
                diff = ct2_logprob_diff(translator, vocab, ckpt, sources[:n_check], reference[:n_check])
                log.info("%s: max |log p - PyTorch| over %d reference outputs: %.2e", name, n_check, diff)
                record(name, f"CTranslate2 {ctranslate2.__version__} {compute}, batch 32",
                       ct2_decoder(translator, vocab, options, pad_piece), args.batch)
                rows[-1]["max_abs_logprob_diff_vs_pytorch"] = diff
                del translator

    base, ct2 = ref_speed.get("pytorch"), ref_speed.get("ct2")
    base_lat = next((r["p50_ms_batch1"] for r in rows if r["row"] == "pytorch"), None)
    ct2_lat = next((r["p50_ms_batch1"] for r in rows if r["row"] == "ct2"), None)
    ct2_out = outputs_of.get("ct2")
    for r in rows:
        if ct2_out is not None:
            mine = outputs_of[r["row"]]
            r["agreement_with_ct2"] = sum(a == b for a, b in zip(mine[0], ct2_out[0], strict=True)) / len(sources)
            r["agreement_with_ct2_batch1"] = sum(a == b for a, b in zip(mine[1], ct2_out[1], strict=True)) / len(
                lat_sources)
        r["speed_vs_pytorch"] = r["sentences_per_s"] / base if base else None
        r["speed_vs_ct2"] = r["sentences_per_s"] / ct2 if ct2 else None
        r["latency_vs_pytorch"] = r["p50_ms_batch1"] / base_lat if base_lat else None
        r["latency_vs_ct2"] = r["p50_ms_batch1"] / ct2_lat if ct2_lat else None
    info["rows"] = rows
    info["machine"]["load_average_end"] = load_average()
    path = write_json("decode", info)

    def ratio(x):
        return "-" if x is None else f"{x:.2f}x"

    table = markdown_table(
        ["row", "sent/s (b32)", "tok/s (b32)", "vs PyTorch", "vs CT2", "p50 ms (b1)", "p90 ms (b1)",
         "p50 vs PyTorch", "p50 vs CT2", "agree w/ PyTorch (b32 / b1)", "agree w/ CT2 (b32 / b1)",
         "exact vs test.fr", "load before", "others' CPU"],
        [[r["row"], r["sentences_per_s"], r["tokens_per_s"], ratio(r["speed_vs_pytorch"]), ratio(r["speed_vs_ct2"]),
          r["p50_ms_batch1"], r["p90_ms_batch1"], ratio(r["latency_vs_pytorch"]), ratio(r["latency_vs_ct2"]),
          f"{100 * r['agreement_with_pytorch']:.1f}% / {100 * r['agreement_with_pytorch_batch1']:.0f}%",
          (f"{100 * r['agreement_with_ct2']:.1f}% / {100 * r['agreement_with_ct2_batch1']:.0f}%"
           if "agreement_with_ct2" in r else "-"),
          f"{100 * r['exact_match_test_fr']:.1f}%", r["load_before"], f"{r['other_processes_cpu_pct']:.0f}%"]
         for r in rows],
    )
    m = info["machine"]
    print(f"\n{args.sentences} sentences of {args.checkpoint}, beam 4, {args.threads} threads, "
          f"OMP_WAIT_POLICY {info['omp_wait_policy']}; "
          f"{m['nproc']} CPUs ({m['cpu']}), {m['date_utc']} UTC, load {m['load_average_1_5_15']} -> "
          f"{m['load_average_end']}; sentences capped at {MAX_CAP}: {info['capped_sentences']}")
    print(table)
    print(f"\nwritten {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
