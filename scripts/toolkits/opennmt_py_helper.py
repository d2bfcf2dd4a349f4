"""The Python half of scripts/toolkits/opennmt_py.sh; runs inside its throwaway venv (OpenNMT-py
3.5.1, ctranslate2, sentencepiece, torch CPU), never in nmtserve's own.

    python opennmt_py_helper.py translate SIDECAR.json -- ONMT_TRANSLATE_ARGS...
        onmt_translate in this process (onmt.bin.translate.translate's steps, unchanged) with
        Translator.translate_batch wrapped to record, per source line: the raw predicted ids (EOS
        included when there is one), the full-precision score, the batch's max_length and the
        source length. (3.5.1's own -with_score crashes on beam search scores, which are floats.)
    python opennmt_py_helper.py expected OUT.json --checkpoint CK --source SRC --spm SPM
            --beam4 SIDECAR OUTPUT LOG CMD --beam1 SIDECAR OUTPUT LOG CMD
        checks the sidecar against the CLI run (same text, -verbose's PRED pieces and PRED SCORE)
        and writes expected.json's OpenNMT-py part.
    python opennmt_py_helper.py ctranslate2 EXPECTED.json --checkpoint CK --spm SPM --work DIR
        converts the checkpoint with CTranslate2's OpenNMT-py converter while `import onmt` is made
        to fail (so it is proven to run without OpenNMT-py), decodes the same sources at beams 4
        and 1 and adds the outputs and the agreement counts to EXPECTED.json under "ctranslate2".
    python opennmt_py_helper.py strip IN.pt OUT.pt
        the checkpoint as OpenNMT-py saved it less its "optim" key (re-saved with torch.save).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")


def _dump(path: str, data: dict) -> None:
    """indented, but each list item (one sentence) on one line"""
    def item(v):
        return json.dumps(v, ensure_ascii=False)
    lines = ["{"]
    keys = list(data)
    for n, k in enumerate(keys):
        v = data[k]
        end = "," if n < len(keys) - 1 else ""
        if isinstance(v, list):
            body = ",\n".join("  " + item(x) for x in v)
            lines.append(f" {item(k)}: [\n{body}\n ]{end}")
        elif isinstance(v, dict) and any(isinstance(x, list) for x in v.values()):
            inner = []
            for m, (k2, v2) in enumerate(v.items()):
                e2 = "," if m < len(v) - 1 else ""
                if isinstance(v2, list):
                    body = ",\n".join("   " + item(x) for x in v2)
                    inner.append(f"  {item(k2)}: [\n{body}\n  ]{e2}")
                else:
                    inner.append(f"  {item(k2)}: {item(v2)}{e2}")
            lines.append(f" {item(k)}: {{\n" + "\n".join(inner) + f"\n }}{end}")
        else:
            lines.append(f" {item(k)}: {item(v)}{end}")
    lines.append("}")
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert json.loads(Path(path).read_text(encoding="utf-8")) == data


def _load(path: str) -> dict:
    import argparse as ap

    import torch

    with torch.serialization.safe_globals([ap.Namespace]):
        return torch.load(path, map_location="cpu", weights_only=True)


def cmd_translate(sidecar: str, argv: list[str]) -> int:
    import torch

    torch.set_num_threads(1)
    from onmt.bin.translate import _get_parser, translate
    from onmt.translate.translator import Translator

    records: dict[int, dict] = {}
    original = Translator.translate_batch

    def recording(self, batch, attn_debug):
        out = original(self, batch, attn_debug)
        width = batch["src"].size(1)
        cap = int(min(self.max_length, width * self.max_length_ratio + 5)) if self.max_length_ratio > 0 \
            else self.max_length
        for b, ind in enumerate(batch["ind_in_bucket"]):
            records[int(ind)] = {
                "ids": [int(t) for t in out["predictions"][b][0].tolist()],
                "score": float(out["scores"][b][0]),
                "max_length": cap,
                "batch_width": int(width),
                "source_length": int(batch["srclen"][b]),
            }
        return out

    Translator.translate_batch = recording
    opt = _get_parser().parse_args(argv)
    translate(opt)
    rows = [records[i] for i in range(len(records))]
    Path(sidecar).write_text(json.dumps(rows), encoding="utf-8")
    return 0


def _verbose_log(path: str) -> tuple[list[list[str]], list[float]]:
    pieces, scores = [], []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        m = re.match(r"^PRED (\d+): ?(.*)$", line)
        if m:
            pieces.append(m.group(2).split(" ") if m.group(2) else [])
        m = re.match(r"^PRED SCORE: (-?[0-9.]+)$", line)
        if m:
            scores.append(float(m.group(1)))
    return pieces, scores


def _side(ck: dict, sidecar: str, output: str, log: str) -> list[dict]:
    tgt = ck["vocab"]["tgt"]
    eos = tgt.index("</s>")
    rows = json.loads(Path(sidecar).read_text(encoding="utf-8"))
    texts = Path(output).read_text(encoding="utf-8").split("\n")[:-1]
    log_pieces, log_scores = _verbose_log(log)
    assert len(rows) == len(texts) == len(log_pieces) == len(log_scores), \
        (len(rows), len(texts), len(log_pieces), len(log_scores))
    items = []
    for row, text, lp, ls in zip(rows, texts, log_pieces, log_scores, strict=True):
        raw = row["ids"]
        ended = bool(raw) and raw[-1] == eos
        ids = raw[:-1] if ended else raw
        pieces = [tgt[i] for i in ids]
        assert pieces == lp, (pieces, lp)
        assert abs(round(row["score"], 4) - ls) < 1e-9, (row["score"], ls)
        items.append({"pieces": pieces, "ids": ids, "text": text, "score": row["score"],
                      "ended_with_eos": ended, "max_length": row["max_length"]})
    return items


def cmd_expected(a) -> int:
    import ctranslate2
    import torch

    ck = _load(a.checkpoint)
    vocab = ck["vocab"]
    out = {
        "toolkit": "OpenNMT-py 3.5.1",
        "torch": torch.__version__,
        "checkpoint": Path(a.checkpoint).name,
        "commands": {"beam4": a.beam4[3], "beam1": a.beam1[3]},
        "defaults": {
            "length_penalty": "avg", "alpha": 1.0, "coverage_penalty": "none", "beta": 0.0,
            "min_length": 0, "max_length": 250, "max_length_ratio": 1.25, "ratio": 0.0,
            "block_ngram_repeat": 0, "ban_unk_token": False, "random_sampling_topk": 0,
            "batch_size": 30, "batch_type": "sents",
        },
        "score": "the hypothesis's summed log-softmax of every generated token (EOS included) divided by "
                 "(generated tokens incl. EOS + 1)**alpha, alpha 1 ('avg'); -verbose prints it rounded to 4 "
                 "decimals ('PRED SCORE'), recorded here at full precision",
        "max_length": "per batch of 30 length-sorted sources: int(min(250, widest source in pieces * 1.25 + 5)) "
                      "generated tokens, EOS included; each item's own cap is in its max_length",
        "special_ids": {"unk": vocab["tgt"].index("<unk>"), "pad": vocab["tgt"].index("<blank>"),
                        "bos": vocab["tgt"].index("<s>"), "eos": vocab["tgt"].index("</s>")},
        "ctranslate2_version": ctranslate2.__version__,
    }
    for key, (sidecar, output, log, _cmd) in (("beam4", a.beam4), ("beam1", a.beam1)):
        out[key] = _side(ck, sidecar, output, log)
    _dump(a.out, out)
    for key in ("beam4", "beam1"):
        items = out[key]
        print(f"{key}: {sum(i['ended_with_eos'] for i in items)}/{len(items)} end with EOS; longest "
              f"{max(len(i['ids']) for i in items)} pieces; closest to its cap "
              f"{min(i['max_length'] - len(i['ids']) for i in items)} tokens", file=sys.stderr)
    return 0


def cmd_ctranslate2(a) -> int:
    import sentencepiece as spm

    sys.modules["onmt"] = None  # any `import onmt` now raises ImportError
    import argparse as ap

    import torch

    torch.serialization.add_safe_globals([ap.Namespace])
    import ctranslate2
    from ctranslate2.converters import OpenNMTPyConverter

    model_dir = Path(a.work) / "ct2"
    OpenNMTPyConverter(a.checkpoint).convert(str(model_dir), force=True)
    assert not any(m == "onmt" or m.startswith("onmt.") for m in sys.modules if sys.modules[m] is not None)
    expected = json.loads(Path(a.expected).read_text(encoding="utf-8"))
    sp = spm.SentencePieceProcessor(model_file=a.spm)
    sources = Path(a.source).read_text(encoding="utf-8").splitlines()
    pieces = [sp.encode(" ".join(s.split(" ")), out_type=str) for s in sources]
    translator = ctranslate2.Translator(str(model_dir), device="cpu", inter_threads=1, intra_threads=1)
    options = {"length_penalty": 1.0, "min_decoding_length": 0, "return_scores": True}
    result = {"version": ctranslate2.__version__,
              "converter": "ctranslate2.converters.OpenNMTPyConverter(path).convert(dir) with "
                           "torch.serialization.add_safe_globals([argparse.Namespace]) (the CLI: "
                           "ct2-opennmt-py-converter --model_path P --output_dir D --unsafe_deserialization); "
                           "runs with `import onmt` failing",
              "options": {**options, "max_decoding_length": "each item's OpenNMT-py max_length",
                          "source": "sentencepiece pieces of the line, no BOS/EOS added"}}
    for key, beam in (("beam4", 4), ("beam1", 1)):
        want = expected[key]
        got = [None] * len(sources)
        by_cap: dict[int, list[int]] = {}
        for i, w in enumerate(want):
            by_cap.setdefault(w["max_length"], []).append(i)
        for cap, rows in by_cap.items():
            res = translator.translate_batch([pieces[i] for i in rows], beam_size=beam, max_decoding_length=cap,
                                             **options)
            for i, r in zip(rows, res, strict=True):
                got[i] = {"pieces": r.hypotheses[0], "text": sp.decode(r.hypotheses[0]), "score": r.scores[0]}
        same = sum(g["pieces"] == w["pieces"] for g, w in zip(got, want, strict=True))
        result[key] = got
        result[f"{key}_same_as_opennmt_py"] = same
        print(f"ctranslate2 {key}: {same}/{len(want)} token for token as OpenNMT-py", file=sys.stderr)
    expected["ctranslate2"] = result
    _dump(a.expected, expected)
    return 0


def cmd_strip(src: str, dst: str) -> int:
    import torch

    ck = torch.load(src, map_location="cpu", weights_only=False)  # our own, just trained
    ck.pop("optim", None)
    torch.save(ck, dst)
    return 0


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "translate":
        rest = sys.argv[3:]
        return cmd_translate(sys.argv[2], rest[1:] if rest[:1] == ["--"] else rest)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("expected")
    e.add_argument("out")
    e.add_argument("--checkpoint", required=True)
    e.add_argument("--beam4", nargs=4, required=True, metavar=("SIDECAR", "OUTPUT", "LOG", "CMD"))
    e.add_argument("--beam1", nargs=4, required=True, metavar=("SIDECAR", "OUTPUT", "LOG", "CMD"))
    c = sub.add_parser("ctranslate2")
    c.add_argument("expected")
    c.add_argument("--checkpoint", required=True)
    c.add_argument("--spm", required=True)
    c.add_argument("--source", required=True)
    c.add_argument("--work", required=True)
    s = sub.add_parser("strip")
    s.add_argument("src")
    s.add_argument("dst")
    a = p.parse_args()
    if a.cmd == "expected":
        return cmd_expected(a)
    if a.cmd == "ctranslate2":
        return cmd_ctranslate2(a)
    return cmd_strip(a.src, a.dst)


if __name__ == "__main__":
    raise SystemExit(main())
