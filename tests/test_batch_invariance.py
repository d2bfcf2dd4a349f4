"""A sentence's numbers never depend on its batch, at fp32 and at int8.

Graph level (this module's first part): one decoder step of a hypothesis gives the same bits alone
and in a batch where other sentences sit beside it, its past starts later in the window (it joined
the running batch at a later step), and its source is padded; the same for the encoder with its
source padded. The fp32 graphs and their int8 quantization (``nmtserve.export.quantize``) both.

Served (the second part): 1,000 held-out sentences translated alone, in one bulk call, and by
concurrent clients sending requests of random sizes give the same tokens and the same scores, to
the last bit, at fp32 and int8. The third part is the same check on the GPU's TensorRT plans (fp32
and fp16), where a GPU and TensorRT are present.
"""

from __future__ import annotations

import importlib.util
import random
import shutil
import threading
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from nmtserve import graphs
from nmtserve.export.cpu_graph import build_cpu_decoder, build_cpu_encoder
from nmtserve.export.quantize import quantize_int8
from nmtserve.model.config import TransformerConfig
from nmtserve.model.transformer import Transformer
from nmtserve.runtime.onnxruntime import session_options

VOCAB = 67


def _model() -> Transformer:
    torch.manual_seed(3)
    config = TransformerConfig(src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, d_model=32, h=4, d_ff=48, encoder_layers=2,
                               decoder_layers=2, dropout=0.0, max_positions=64)
    model = Transformer(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.normal_(0.0, 0.3)
    return model


@pytest.fixture(scope="module")
def graphs_fp32_int8(tmp_path_factory) -> dict[str, tuple[ort.InferenceSession, ort.InferenceSession]]:
    tmp = tmp_path_factory.mktemp("invariance")
    model = _model()
    encoder = build_cpu_encoder(model, tmp / "encoder.onnx")  # the graphs the CPU target serves
    decoder = build_cpu_decoder(model, tmp / "decoder.onnx")
    (tmp / "int8").mkdir()
    q_encoder = quantize_int8(encoder, tmp / "int8" / "encoder.onnx", tables=(VOCAB,))
    q_decoder = quantize_int8(decoder, tmp / "int8" / "decoder.onnx", tables=(VOCAB,))
    assert q_encoder.tables == 1 and q_decoder.tables == 1 and q_decoder.quantized == 6 * 2 + 1

    def sessions(enc: Path, dec: Path):
        return tuple(ort.InferenceSession(str(p), session_options(1), providers=["CPUExecutionProvider"]) for p in (enc, dec))

    return {"fp32": sessions(encoder, decoder), "int8": sessions(q_encoder.path, q_decoder.path), "model": model}


def _sentence(rng, model: Transformer, past: int, src: int, beam: int) -> dict:
    """One sentence's step: its own past (``past`` times), memory and tokens."""
    c = model.config
    return {
        "ids": rng.integers(3, VOCAB, beam).astype(np.int32),
        "position": past,
        "past_k": rng.standard_normal((past, beam, c.decoder_layers, c.h, c.d_k)).astype(np.float32),
        "past_v": rng.standard_normal((past, beam, c.decoder_layers, c.h, c.d_k)).astype(np.float32),
        "parents": rng.integers(0, beam, (beam, past)).astype(np.int32),  # which of its beam rows each time reads
        "mem_k": [rng.standard_normal((c.h, c.d_k, src)).astype(np.float32) for _ in range(c.decoder_layers)],
        "mem_v": [rng.standard_normal((c.h, src, c.d_k)).astype(np.float32) for _ in range(c.decoder_layers)],
    }


def _batch(model: Transformer, sentences: list[dict], offsets: list[int], window: int, src_len: int, beam: int) -> dict:
    """Feeds for sentences side by side: sentence j's past sits at times ``offsets[j]..`` of a window of
    ``window`` times (masked before: it joined later), its cache rows after the previous sentences',
    its source padded to ``src_len`` with noise the mask hides."""
    c = model.config
    rng = np.random.default_rng(99)
    b = len(sentences)
    rows = b * beam + 2
    cache = rng.standard_normal((window, rows, c.decoder_layers, c.h, c.d_k)).astype(np.float32)  # noise where masked
    past_key, past_value = cache.copy(), cache[::-1].copy()
    cache_rows = rng.integers(0, rows, (b, beam, window)).astype(np.int32)
    past_mask = np.zeros((b, window), bool)
    src_mask = np.zeros((b, src_len), bool)
    mem_k = [rng.standard_normal((b, c.h, c.d_k, src_len)).astype(np.float32) for _ in range(c.decoder_layers)]
    mem_v = [rng.standard_normal((b, c.h, src_len, c.d_k)).astype(np.float32) for _ in range(c.decoder_layers)]
    for j, (s, t0) in enumerate(zip(sentences, offsets, strict=True)):
        past, src = s["past_k"].shape[0], s["mem_k"][0].shape[-1]
        base = j * beam
        past_key[t0:t0 + past, base:base + beam] = s["past_k"]
        past_value[t0:t0 + past, base:base + beam] = s["past_v"]
        cache_rows[j, :, t0:t0 + past] = base + s["parents"]
        past_mask[j, t0:t0 + past] = True
        src_mask[j, :src] = True
        for i in range(c.decoder_layers):
            mem_k[i][j, ..., :src] = s["mem_k"][i]
            mem_v[i][j, :, :src] = s["mem_v"][i]
    return graphs.decoder_feeds(
        input_ids=np.stack([s["ids"] for s in sentences]), position=np.array([s["position"] for s in sentences], np.int32),
        past_key=past_key, past_value=past_value, cache_rows=cache_rows, past_mask=past_mask,
        memory_keys=mem_k, memory_values=mem_v, src_mask=src_mask)


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_a_decoder_step_gives_the_same_bits_alone_and_in_any_batch(graphs_fp32_int8, precision):
    model = graphs_fp32_int8["model"]
    decoder = graphs_fp32_int8[precision][1]
    names = [t.name for t in graphs.decoder_outputs(graphs.Dims(2, 4, 8, VOCAB))]
    rng = np.random.default_rng(0)
    beam = 4
    checked = 0
    for trial in range(6):
        past, src = int(rng.integers(1, 9)), int(rng.integers(2, 9))
        mine = _sentence(rng, model, past, src, beam)
        alone = dict(zip(names, decoder.run(names, _batch(model, [mine], [0], past, src, beam)), strict=True))
        # In a batch: others before and after it, its past 1..19 steps into the window, its source padded.
        others = [_sentence(rng, model, int(rng.integers(1, 12)), int(rng.integers(2, 14)), beam) for _ in range(3)]
        shift = int(rng.integers(1, 20))
        place = trial % 4
        sentences = others[:place] + [mine] + others[place:]
        offsets = [0] * len(sentences)
        offsets[place] = shift
        window = max(o + s["past_k"].shape[0] for o, s in zip(offsets, sentences, strict=True))
        src_len = max(s["mem_k"][0].shape[-1] for s in sentences) + 3
        together = dict(zip(names, decoder.run(names, _batch(model, sentences, offsets, window, src_len, beam)), strict=True))
        for name in names:
            got = together[name][place]
            if name == graphs.ATTENTION:  # over the batch's padded source: its own positions, then zeros
                assert not got[..., src:].any(), f"{precision}: attention on padding (trial {trial})"
                got = got[..., :src]
            np.testing.assert_array_equal(got, alone[name][0], err_msg=f"{precision} {name} (trial {trial})")
        checked += 1
    assert checked == 6


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_the_encoder_gives_the_same_bits_alone_and_padded_in_a_batch(graphs_fp32_int8, precision):
    encoder = graphs_fp32_int8[precision][0]
    rng = np.random.default_rng(1)
    sentences = [[*rng.integers(3, VOCAB, int(rng.integers(1, 15))).tolist(), 2] for _ in range(9)]
    width = max(map(len, sentences))
    padded = np.zeros((len(sentences), width), np.int32)
    for j, s in enumerate(sentences):
        padded[j, :len(s)] = s
    names = [o.name for o in encoder.get_outputs()]
    together = encoder.run(names, {"src_ids": padded})
    for j, s in enumerate(sentences):
        alone = encoder.run(names, {"src_ids": np.asarray([s], np.int32)})
        for name, a, t in zip(names, alone, together, strict=True):
            real = t[j][..., : len(s)] if "key" in name else t[j][..., : len(s), :]
            np.testing.assert_array_equal(real, a[0], err_msg=f"{precision} {name} sentence {j}")


def test_int8_tables_and_the_tied_projection_share_one_initializer(graphs_fp32_int8, tmp_path):
    """The decoder's vocabulary table is one int8 initializer read by its Gather and its QGemm (the
    tied projection), and the fp32 table is gone."""
    model = _model()
    decoder = build_cpu_decoder(model, tmp_path / "decoder.onnx")
    fp32 = onnx.load(str(decoder))
    assert [n.op_type for n in fp32.graph.node if "tgt_embed.lut.weight" in n.input] == ["Gather", "Gemm"]
    q = onnx.load(str(quantize_int8(decoder, tmp_path / "int8.onnx", tables=(VOCAB,)).path))
    readers = {n.op_type for n in q.graph.node if "tgt_embed.lut.weight.int8_rows" in n.input}
    assert readers == {"Gather", "QGemm"}
    names = {t.name for t in q.graph.initializer}
    assert "tgt_embed.lut.weight" not in names
    table = next(t for t in q.graph.initializer if t.name == "tgt_embed.lut.weight.int8_rows")
    assert table.data_type == onnx.TensorProto.INT8 and list(table.dims) == [VOCAB, 32]


# ---- served: 1,000 held-out sentences alone, in bulk, and concurrently -------------------------------------


def _random_spans(n: int, seed: int = 7) -> list[tuple[int, int]]:
    """[0, n) cut into requests of 1..24 sentences, shuffled (the order concurrent clients send them)."""
    rng = random.Random(seed)
    spans, start = [], 0
    while start < n:
        size = rng.randint(1, 24)
        spans.append((start, min(start + size, n)))
        start += size
    rng.shuffle(spans)
    return spans


def _translate_three_ways(url: str, texts: list[str]) -> dict[str, list[tuple[str, float]]]:
    from nmtserve.client import Translator

    def pairs(results):
        return [(r.text, r.score) for r in results]

    ways = {}
    with Translator(url) as client:
        ways["bulk"] = pairs(client.translate(texts))
        ways["alone"] = [pairs([client.translate(t)])[0] for t in texts]
    # Concurrent clients, each sending requests of random sizes (1..24 sentences) from its own share.
    spans = _random_spans(len(texts))
    results: list = [None] * len(texts)
    errors: list = []

    def client_thread(mine):
        try:
            with Translator(url) as client:
                for a, b in mine:
                    results[a:b] = pairs(client.translate(texts[a:b]))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=client_thread, args=(spans[k::8],)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    ways["concurrent"] = results
    return ways


def _assert_same_everywhere(ways: dict, texts: list[str], precision: str) -> None:
    bulk = ways["bulk"]
    assert len(bulk) == len(texts) and all(t for t, _ in bulk)
    for way in ("alone", "concurrent"):
        differ = [i for i, (a, b) in enumerate(zip(ways[way], bulk, strict=True)) if a != b]
        detail = [(texts[i], ways[way][i], bulk[i]) for i in differ[:3]]
        assert not differ, f"{precision}: {len(differ)} of {len(texts)} sentences differ {way} vs bulk: {detail}"


@pytest.mark.server
def test_served_fp32_translations_do_not_depend_on_the_batch(demo_server, demo_sentences):
    texts = demo_sentences[:1000]
    assert len(texts) == 1000
    _assert_same_everywhere(_translate_three_ways(demo_server.urls.grpc_address, texts), texts, "fp32")


@pytest.mark.server
def test_served_int8_translations_do_not_depend_on_the_batch(demo_int8_repository, demo_sentences):
    from nmtserve.server.launcher import ServerConfig, TritonServer

    texts = demo_sentences[:1000]
    server = TritonServer(ServerConfig.on_free_ports(demo_int8_repository))
    server.start()
    try:
        server.wait_until_ready(120)
        _assert_same_everywhere(_translate_three_ways(server.urls.grpc_address, texts), texts, "int8")
    finally:
        server.stop()


# ---- the GPU: TensorRT plans (fp32 and fp16), the same three ways at the engine --------------------------

HAS_TRT = importlib.util.find_spec("tensorrt") is not None and shutil.which("nvidia-smi") is not None
HAS_CUPY = importlib.util.find_spec("cupy") is not None


@pytest.mark.tensorrt
@pytest.mark.skipif(not (HAS_TRT and HAS_CUPY), reason="needs TensorRT, CuPy and an NVIDIA GPU")
@pytest.mark.parametrize("fp16", [False, True], ids=["fp32", "fp16"])
def test_gpu_translations_do_not_depend_on_the_batch(tmp_path, demo_checkpoint, demo_sentences, fp16):  # pragma: no cover - GPU only
    """The GPU's path (the portable graphs as TensorRT plans, the cache pool on the device): 1,000
    held-out sentences alone, in one bulk call and from 8 threads submitting random sizes give the
    same tokens and scores. (Written for a GPU machine; CPU machines skip it.)"""
    from nmtserve.engine import InflightBatcher
    from nmtserve.export.onnx_export import dims_of, export_decoder, export_encoder
    from nmtserve.export.tensorrt import BuildOptions, build_engine
    from nmtserve.runtime.spec import ModelSpec
    from nmtserve.runtime.tensorrt import TensorRTModel

    model, tokenizer = demo_checkpoint.model, demo_checkpoint.tokenizer
    c, d = model.config, dims_of(model)
    encoder, decoder = export_encoder(model, tmp_path / "encoder.onnx"), export_decoder(model, tmp_path / "decoder.onnx")
    opts = BuildOptions(max_batch=32, max_beam=4, max_source_len=64, max_target_len=64, fp16=fp16)
    plans = (build_engine(encoder, tmp_path / "encoder.plan", graphs.encoder_inputs(), opts),
             build_engine(decoder, tmp_path / "decoder.plan", graphs.decoder_inputs(d), opts))
    spec = ModelSpec(layers=d.layers, heads=d.heads, d_k=d.d_k, vocab=d.vocab, max_positions=c.max_positions,
                     pad_id=c.pad_id, bos_id=c.bos_id, eos_id=c.eos_id, unk_id=c.unk_id, src_vocab=c.src_vocab_size,
                     max_source_len=64, max_target_len=64, max_batch=32, fp16=fp16)
    engine = InflightBatcher(TensorRTModel(*plans, spec), max_sentences=32, max_beam=4).start()
    try:
        sources = [tokenizer.encode(t)[:64] for t in demo_sentences[:1000]]
        search = spec.search_options()

        def best(results):
            return [(tuple(r[0].tokens), r[0].score) for r in results]

        ways = {"bulk": best(engine.translate(sources, search, timeout=600)),
                "alone": [best(engine.translate([s], search, timeout=60))[0] for s in sources]}
        spans = _random_spans(len(sources))
        concurrent: list = [None] * len(sources)

        def submit(mine):
            for a, b in mine:
                concurrent[a:b] = best(engine.translate(sources[a:b], search, timeout=600))

        threads = [threading.Thread(target=submit, args=(spans[k::8],)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        ways["concurrent"] = concurrent
    finally:
        engine.stop()
    for way in ("alone", "concurrent"):
        differ = [i for i, (a, b) in enumerate(zip(ways[way], ways["bulk"], strict=True)) if a != b]
        assert not differ, f"{'fp16' if fp16 else 'fp32'}: {len(differ)} of 1000 differ {way} vs bulk (first: {differ[:5]})"
