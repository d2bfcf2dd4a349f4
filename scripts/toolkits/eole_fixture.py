"""Trains the eole fixtures of tests/fixtures/toolkits/eole/ and records eole's and CTranslate2's
outputs; scripts/toolkits/eole.sh runs it with the Python of a throwaway venv that holds
eole 0.6.4 and ctranslate2 (never with the project's venv).

    python scripts/toolkits/eole_fixture.py --data DATA_DIR --work WORK_DIR --out FIXTURE_DIR

DATA_DIR is what scripts/toolkits/data.py wrote. FIXTURE_DIR gets three eole model directories,
each as eole's trainer saved it (config.json, model.00.safetensors, vocab.json and the spm.model
that eole's sentencepiece transform copies in), without optimizer.pt and the step_N/ folder:

* FIXTURE_DIR itself: hidden 64, 2+2 layers, 4 heads, ff 256, sinusoidal (interleaved) positions,
  separate vocabularies and embeddings, pre-norm (eole's defaults otherwise); --steps (600).
* FIXTURE_DIR/shared/: the same with share_vocab, share_embeddings, share_decoder_embeddings (the
  output projection tied to the decoder embeddings) and a post-norm encoder; --shared-steps.
* FIXTURE_DIR/relative/: Shaw et al. relative positions (position_encoding_type Relative,
  n_positions 8), hidden 16, 1+1 layers, saved after 5 steps: for a "refused by name" test.

FIXTURE_DIR and FIXTURE_DIR/shared/ also get source.en (the first 100 test sentences) and
expected.json: `eole predict` at beam 4 and beam 1 (eole's other decoding defaults), and
CTranslate2's outputs on the same inputs from ctranslate2's eole converter.

The sinusoid tables src_emb.pe.pe / tgt_emb.pe.pe (float32 [5000, 1, 64], 1.3 MB each, buffers
that eole writes but rebuilds at load) are dropped from the fixtures' model.00.safetensors after
checking them against the formula, unless --keep-pe; expected.json lists what was dropped. The
outputs are eole's on the fixture directory as written (eole loads it without those keys).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

warnings.filterwarnings("ignore", category=RuntimeWarning, module="eole")  # no C++/flash ops

import torch  # noqa: E402
import yaml  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

torch.set_num_threads(1)

BIN = Path(sys.executable).parent
N_SOURCES = 100
INFER_BATCH = 30  # eole's default inference batch_size (sentences)
DEFAULTS = {  # eole 0.6.4 eole/config/inference.py DecodingConfig, what the outputs were made with
    "beam_size": 5, "n_best": 1, "length_penalty": "avg", "alpha": 1.0, "coverage_penalty": "none",
    "beta": 0.0, "ratio": 0.0, "min_length": 0, "max_length": 250, "max_length_ratio": 2.0,
    "block_ngram_repeat": 0, "ban_unk_token": False, "top_k": 0, "top_p": 0.0,
    "temperature": 1.0, "batch_size": 30, "batch_type": "sents",
}
SCORE_RULE = (
    "eole's printed score (-with_score): sum of the natural-log probabilities of the pieces and "
    "of EOS, divided by (len(pieces) + 2) ** alpha, alpha=1 (length_penalty 'avg'; the divisor "
    "counts EOS and the start token). A hypothesis cut at max_length has no EOS and divides by "
    "len(pieces) + 1. 'logprob' is that sum, recomputed here by teacher forcing eole's model."
)


def log(msg: str) -> None:
    print(f"[eole_fixture] {msg}", flush=True)


def run(cmd: list[str], logfile: Path) -> None:
    """Runs an eole command, its output to logfile; on failure shows the log's end and stops."""
    with logfile.open("w") as f:
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=os.environ.copy())
    if proc.returncode != 0:
        sys.stderr.write(logfile.read_text()[-4000:])
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}")


def eole(*args: str) -> list[str]:
    return [str(BIN / "eole"), *args]


def shown(cmd: list[str], work: Path) -> str:
    """A command as recorded in expected.json: paths relative to the work folder."""
    return " ".join(cmd).replace(str(BIN / "eole"), "eole").replace(str(work) + "/", "")


def data_config(data: Path, work: Path, name: str, share_vocab: bool) -> dict:
    return {
        "save_data": str(work / name / "samples"),
        "src_vocab": str(work / name / ("vocab.shared" if share_vocab else "vocab.src")),
        "tgt_vocab": None if share_vocab else str(work / name / "vocab.tgt"),
        "share_vocab": share_vocab,
        "overwrite": True,
        "seed": 1234,
        "report_every": 100,
        "transforms": ["sentencepiece"],
        "transforms_configs": {"sentencepiece": {
            "src_subword_model": str(data / "spm.model"),
            "tgt_subword_model": str(data / "spm.model"),
        }},
        "data": {
            "corpus_1": {"path_src": str(data / "train.en"), "path_tgt": str(data / "train.fr")},
            "valid": {"path_src": str(data / "valid.en"), "path_tgt": str(data / "valid.fr")},
        },
    }


def training_config(model_dir: Path, steps: int) -> dict:
    return {
        "model_path": str(model_dir), "save_format": "safetensors", "train_steps": steps,
        "valid_steps": 1_000_000, "save_checkpoint_steps": 1_000_000, "keep_checkpoint": 1,
        "world_size": 1, "gpu_ranks": [], "num_workers": 0,
        "batch_type": "tokens", "batch_size": 2048, "valid_batch_size": 256, "bucket_size": 32768,
        "optim": "adam", "learning_rate": 0.002, "adam_beta2": 0.98, "decay_method": "none",
        "param_init_method": "xavier_uniform", "max_grad_norm": 1.0,
        "dropout": [0.1], "attention_dropout": [0.1], "label_smoothing": 0.1,
    }


def train(data: Path, work: Path, name: str, model: dict, steps: int, share_vocab: bool,
          commands: dict) -> Path:
    """eole build_vocab + eole train; returns eole's model directory."""
    folder = work / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    config = data_config(data, work, name, share_vocab)
    config["model"] = model
    config["training"] = training_config(folder / "model", steps)
    (folder / "train.yaml").write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True))
    vocab = eole("build_vocab", "-config", str(folder / "train.yaml"), "-n_sample", "-1",
                 "-num_threads", "1")
    start = time.time()
    run(vocab, folder / "build_vocab.log")
    train_cmd = eole("train", "-config", str(folder / "train.yaml"))
    run(train_cmd, folder / "train.log")
    log(f"{name}: built the vocabulary and trained {steps} steps in {time.time() - start:.0f} s")
    commands["build_vocab"] = shown(vocab, work)
    commands["train"] = shown(train_cmd, work)
    commands["train_yaml"] = config
    return folder / "model"


def sinusoid_interleaved(max_len: int, dim: int) -> torch.Tensor:
    """eole.modules.embeddings.PositionalEncoding, SinusoidalInterleaved."""
    pe = torch.zeros(max_len, dim)
    position = torch.arange(0, max_len).unsqueeze(1).float()
    div_term = torch.exp(torch.arange(0, dim, 2, dtype=torch.float) * -(math.log(10000.0) / dim))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


def export(model_dir: Path, out: Path, keep_pe: bool) -> list[dict]:
    """Copies eole's model directory (symlinks resolved) into out; drops the sinusoid tables."""
    out.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "vocab.json", "spm.model"):
        shutil.copyfile((model_dir / name).resolve(), out / name)
    weights = (model_dir / "model.00.safetensors").resolve()
    dropped = []
    tensors = load_file(str(weights))
    for key in [k for k in tensors if k.endswith(".pe.pe")]:
        table = tensors[key]
        expected = sinusoid_interleaved(table.shape[0], table.shape[-1]).unsqueeze(1)
        assert torch.equal(table, expected), f"{key} is not eole's interleaved sinusoid"
        if not keep_pe:
            dropped.append({"name": key, "shape": list(table.shape), "dtype": "float32",
                            "equals": "sinusoid_interleaved (see docs/notes/toolkit-eole.md)"})
            del tensors[key]
    if dropped:
        save_file(tensors, str(out / "model.00.safetensors"))
    else:
        shutil.copyfile(weights, out / "model.00.safetensors")
    return dropped


def eole_max_lengths(src: list[list[str]]) -> list[int]:
    """eole's per-sentence max_length: the input sorted by source length (stable), batches of
    INFER_BATCH, min(max_length, batch_width * max_length_ratio + 5) (predict/translator.py)."""
    order = sorted(range(len(src)), key=lambda i: len(src[i]))
    result = [0] * len(src)
    for start in range(0, len(order), INFER_BATCH):
        batch = order[start:start + INFER_BATCH]
        width = max(len(src[i]) for i in batch)
        for i in batch:
            result[i] = int(min(DEFAULTS["max_length"], width * DEFAULTS["max_length_ratio"] + 5))
    return result


def load_eole(model_dir: Path):
    from eole.config.run import PredictConfig
    from eole.models.model import get_model_class

    config = PredictConfig(model_path=str(model_dir), src="dummy")
    model, vocabs, _ = get_model_class(config.model).for_inference(config)
    model.eval()
    return model, vocabs


def teacher_forced(model, vocabs, src: list[str], ids: list[int], eos: bool) -> float:
    """Sum of eole's log-probs of ids (+ EOS) after <s>, source unpadded (batch of one)."""
    sv, tv = vocabs["src"], vocabs["tgt"]
    bos = tv.lookup_token(vocabs["specials"]["bos_token"])
    eos_id = tv.lookup_token(vocabs["specials"]["eos_token"])
    target = ids + ([eos_id] if eos else [])
    s = torch.tensor([[sv.lookup_token(p) for p in src]])
    t = torch.tensor([[bos, *target, eos_id]])  # the last input is dropped by the model
    with torch.no_grad():
        out = model(s, t, torch.tensor([s.size(1)]))
        logp = torch.log_softmax(model.generator(out.dec_out).float(), dim=-1)[0]
    return float(sum(logp[i, tok].item() for i, tok in enumerate(target)))


def predict(fixture: Path, work: Path, name: str, src_text: Path, src_pieces: Path,
            commands: dict) -> dict:
    """eole predict at beam 4 and 1: once on raw text (text and score as eole writes them), once
    on the sentencepiece pieces with the transforms off (the pieces)."""
    import sentencepiece as spm

    vocab = json.loads((fixture / "vocab.json").read_text())
    tgt_index = {piece: i for i, piece in enumerate(vocab["tgt"])}
    sp = spm.SentencePieceProcessor(model_file=str(fixture / "spm.model"))
    src = [line.split() for line in src_pieces.read_text().splitlines()]
    max_lengths = eole_max_lengths(src)
    model, vocabs = load_eole(fixture)
    results: dict = {}
    for beam in (4, 1):
        text_out = work / name / f"pred_beam{beam}.txt"
        cmd = eole("predict", "-model_path", str(fixture), "-src", str(src_text), "-output",
                   str(text_out), "-beam_size", str(beam), "-n_best", "1", "-with_score")
        start = time.time()
        run(cmd, work / name / f"predict_beam{beam}.log")
        log(f"{name}: eole predict beam {beam} in {time.time() - start:.0f} s")
        commands[f"predict_beam{beam}"] = shown(cmd, work).replace(str(fixture), "FIXTURE_DIR")
        piece_cfg = work / name / f"pieces_beam{beam}.yaml"
        piece_out = work / name / f"pred_beam{beam}.sp.txt"
        piece_cfg.write_text(yaml.safe_dump({
            "model_path": str(fixture), "src": str(src_pieces), "output": str(piece_out),
            "beam_size": beam, "n_best": 1, "with_score": True, "transforms": [],
        }))
        run(eole("predict", "-config", str(piece_cfg)), work / name / f"pieces_beam{beam}.log")
        commands[f"predict_beam{beam}_pieces"] = (
            "eole predict -config Y where Y = {model_path: FIXTURE_DIR, src: <first 100 lines of "
            f"test.sp.en>, beam_size: {beam}, n_best: 1, with_score: true, transforms: []}}")
        items = []
        texts = [line.split("\t") for line in text_out.read_text().splitlines()]
        pieces = [line.split("\t") for line in piece_out.read_text().splitlines()]
        assert len(texts) == len(pieces) == len(src)
        for k, ((text, score, _), (joined, piece_score, _)) in enumerate(zip(texts, pieces, strict=True)):
            toks = joined.split(" ") if joined else []
            assert sp.decode(toks) == text, (k, toks, text)
            assert abs(float(score) - float(piece_score)) < 1e-5, (k, score, piece_score)
            ids = [tgt_index[t] for t in toks]
            eos = len(toks) < max_lengths[k]
            logprob = teacher_forced(model, vocabs, src[k], ids, eos)
            normalized = logprob / (len(ids) + (2 if eos else 1))
            assert abs(normalized - float(score)) < 1e-3, (k, normalized, score)
            items.append({"pieces": toks, "ids": ids, "text": text, "score": float(score),
                          "logprob": round(logprob, 6), "eos": eos,
                          "max_length": max_lengths[k]})
        results[f"beam{beam}"] = items
        ended = sum(i["eos"] for i in items)
        margin = min(i["max_length"] - len(i["ids"]) for i in items if i["eos"])
        log(f"{name}: beam {beam}: {ended}/{len(items)} ended with EOS (those at least {margin} "
            "tokens below their max_length)")
    return results


def ctranslate2_oracle(fixture: Path, work: Path, name: str, src_pieces: Path,
                       eole_results: dict) -> dict:
    """ctranslate2's eole converter, then translate_batch on the pieces, compared with eole."""
    import ctranslate2

    out = work / name / "ct2"
    cmd = [sys.executable, "-m", "ctranslate2.converters.eole_ct2", "--model_path", str(fixture),
           "--output_dir", str(out), "--force"]
    record: dict = {"version": ctranslate2.__version__,
                    "convert": "python -m ctranslate2.converters.eole_ct2 --model_path "
                               "FIXTURE_DIR --output_dir CT2_DIR (no console script; the "
                               "module imports eole at its top)"}
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        record["refused"] = lines[-1] if lines else f"exit {proc.returncode}"
        log(f"{name}: ctranslate2's converter failed: {record['refused']}")
        return record
    record["converted_config"] = json.loads((out / "config.json").read_text())
    log(f"{name}: ctranslate2's converter accepted it")
    if not eole_results:
        return record
    src = [line.split() for line in src_pieces.read_text().splitlines()]
    translator = ctranslate2.Translator(str(out), device="cpu", intra_threads=1)
    patched = work / name / "ct2_eps1e-5"
    shutil.rmtree(patched, ignore_errors=True)
    shutil.copytree(out, patched)
    config = json.loads((patched / "config.json").read_text())
    config["layer_norm_epsilon"] = 1e-5
    (patched / "config.json").write_text(json.dumps(config))
    eps_translator = ctranslate2.Translator(str(patched), device="cpu", intra_threads=1)
    for beam in (4, 1):
        ref = [i["pieces"] for i in eole_results[f"beam{beam}"]]
        plain = translator.translate_batch(src, beam_size=beam, return_scores=True)
        hyps = [r.hypotheses[0] for r in plain]
        record[f"beam{beam}"] = [{"pieces": h, "score": r.scores[0]} for h, r in zip(hyps, plain, strict=True)]
        record[f"beam{beam}_equal"] = sum(h == e for h, e in zip(hyps, ref, strict=True))
        eps = eps_translator.translate_batch(src, beam_size=beam)
        record[f"beam{beam}_equal_eps1e-5"] = sum(r.hypotheses[0] == e for r, e in zip(eps, ref, strict=True))
        # eole's length normalization, which CT2 cannot do: raw sums, all hypotheses, re-ranked
        raw = translator.translate_batch(src, beam_size=beam, length_penalty=0.0,
                                         num_hypotheses=beam, return_scores=True)
        best = [max(zip(r.scores, r.hypotheses, strict=True), key=lambda t: t[0] / (len(t[1]) + 2))[1]
                for r in raw]
        record[f"beam{beam}_equal_lp0_reranked"] = sum(b == e for b, e in zip(best, ref, strict=True))
        log(f"{name}: ctranslate2 beam {beam}: {record[f'beam{beam}_equal']}/{len(src)} equal "
            f"to eole (defaults), {record[f'beam{beam}_equal_lp0_reranked']} with "
            "length_penalty=0 + re-ranking by sum/(len+2)")
    record["options"] = {
        "beam{N}": "translate_batch(source_pieces, beam_size=N, return_scores=True); CT2's "
                   "defaults otherwise (length_penalty=1 divides by len(pieces)+1, "
                   "min_decoding_length=1, max_decoding_length=256, patience=1)",
        "beam{N}_equal_lp0_reranked": "translate_batch(..., length_penalty=0, num_hypotheses=N),"
                                      " best of sum/(len(pieces)+2)",
        "beam{N}_equal_eps1e-5": "as beam{N} after setting layer_norm_epsilon to eole's 1e-5 in "
                                 "the converted config.json (the converter writes 1e-6: it "
                                 "reads norm_eps from the predict config, which has none)",
    }
    return record


def dumps(value, indent: str = "") -> str:
    """JSON with one line per output item: nested dicts indented, lists of dicts one per line."""
    inner = indent + " "
    if isinstance(value, dict) and value:
        rows = [f"{inner}{json.dumps(k)}: {dumps(v, inner)}" for k, v in value.items()]
        return "{\n" + ",\n".join(rows) + "\n" + indent + "}"
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        rows = [inner + json.dumps(v, ensure_ascii=False) for v in value]
        return "[\n" + ",\n".join(rows) + "\n" + indent + "]"
    return json.dumps(value, ensure_ascii=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=600, help="training steps of the main model")
    parser.add_argument("--shared-steps", type=int, default=1000,
                        help="training steps of shared/ (its post-norm encoder learns slower)")
    parser.add_argument("--keep-pe", action="store_true")
    args = parser.parse_args()
    data, work, out = args.data.resolve(), args.work.resolve(), args.out.resolve()
    work.mkdir(parents=True, exist_ok=True)
    src_text, src_pieces = work / "source.en", work / "source.sp.en"
    src_text.write_text("".join((data / "test.en").read_text().splitlines(True)[:N_SOURCES]))
    src_pieces.write_text("".join((data / "test.sp.en").read_text().splitlines(True)[:N_SOURCES]))
    import eole

    base = {"architecture": "transformer", "hidden_size": 64, "layers": 2, "heads": 4,
            "transformer_ff": 256,
            "embeddings": {"word_vec_size": 64, "position_encoding_type": "SinusoidalInterleaved"}}
    shared = {**json.loads(json.dumps(base)), "share_embeddings": True,
              "share_decoder_embeddings": True, "encoder": {"encoder_layer_style": "postnorm"}}
    relative = {"architecture": "transformer", "hidden_size": 16, "layers": 1, "heads": 2,
                "transformer_ff": 32,
                "embeddings": {"word_vec_size": 16, "position_encoding_type": "Relative",
                               "n_positions": 8}}
    variants = [("main", out, base, args.steps, False, True),
                ("shared", out / "shared", shared, args.shared_steps, True, True),
                ("relative", out / "relative", relative, 5, False, False)]
    for name, fixture, model, steps, share_vocab, outputs in variants:
        commands: dict = {}
        model_dir = train(data, work, name, model, steps, share_vocab, commands)
        for stale in ("config.json", "model.00.safetensors", "vocab.json", "spm.model",
                      "source.en", "expected.json"):
            (fixture / stale).unlink(missing_ok=True)
        dropped = export(model_dir, fixture, args.keep_pe)
        if not outputs:
            record = {"toolkit": f"eole {eole.__version__}", "torch": torch.__version__,
                      "commands": commands, "dropped_from_safetensors": dropped,
                      "ctranslate2": ctranslate2_oracle(fixture, work, name, src_pieces, {})}
            (work / name / "record.json").write_text(json.dumps(record, indent=1))
            continue
        shutil.copyfile(src_text, fixture / "source.en")
        results = predict(fixture, work, name, src_text, src_pieces, commands)
        expected = {
            "toolkit": f"eole {eole.__version__}",
            "torch": torch.__version__,
            "commands": commands,
            "decoding_defaults": DEFAULTS,
            "score": SCORE_RULE,
            "dropped_from_safetensors": dropped,
            **results,
            "ctranslate2": ctranslate2_oracle(fixture, work, name, src_pieces, results),
        }
        text = dumps(expected) + "\n"
        text = text.replace(str(work) + "/", "WORK/").replace(str(data) + "/", "DATA/")
        (fixture / "expected.json").write_text(text, encoding="utf-8")
        log(f"{name}: wrote {fixture}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
