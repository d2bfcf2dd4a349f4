"""Writes one fairseq fixture's expected.json (tests/fixtures/toolkits/fairseq/): run by
scripts/toolkits/fairseq.sh with the throwaway fairseq venv's python, after fairseq-interactive
has translated the fixture's source.en at beam 4 and beam 1.

    python fairseq_fixture.py VARIANT_DIR --beam4 OUT4 --beam1 OUT1 --commands CMDS
        [--ct2 CT2_MODEL_DIR --ct2-convert CMD] [--work DIR] [--data DIR] [--sp-source TEST_SP_EN]

OUT4 / OUT1 are fairseq-interactive's stdout (S-/W-/H-/D-/P- lines). fairseq prints every score
in base 2 (interactive.py: `score = hypo["score"] / math.log(2)`); each item keeps the printed
value as `score_log2` and its natural-log equivalent as `score` (= score_log2 * ln 2). The
score is length-normalized: sum of the natural-log probabilities of the output tokens including
the final </s>, divided by (number of tokens including </s>) ** lenpen (lenpen 1.0).

With --ct2 the CTranslate2 conversion of the same checkpoint translates the same source pieces
with the options in CT2_OPTIONS, and the results and their agreement counts are recorded under
"ctranslate2".
"""

from __future__ import annotations

import argparse
import json
import math
import re
from pathlib import Path

import torch
from fairseq.data import Dictionary
from fairseq.dataclass.configs import GenerationConfig

CT2_OPTIONS = {"length_penalty": 1.0, "max_decoding_length": 200, "min_decoding_length": 1,
               "max_input_length": 1024, "return_scores": True}
CT2_NOTES = (
    "translate_batch(source pieces without </s>, beam_size=4 or 1, **options), device cpu, "
    "1 thread. The converter imports fairseq (fairseq.tasks.setup_task + models.build_model) "
    "and needs --unsafe_deserialization (its torch.load(weights_only=True) rejects "
    "argparse.Namespace); the converted config has add_source_eos=true and "
    "decoder_start_token </s>. CT2's score is the same length-normalized natural-log score "
    "(</s> included). max_decoding_length 200 = fairseq's max_len_b, but at the limit fairseq "
    "forces </s> and scores it, CT2 stops without it: never reached here.")
# cfg["model"] keys worth repeating in expected.json: what an importer must honour
ARCH_KEYS = ("arch", "encoder_embed_dim", "decoder_embed_dim", "encoder_ffn_embed_dim",
             "decoder_ffn_embed_dim", "encoder_layers", "decoder_layers",
             "encoder_attention_heads", "decoder_attention_heads", "encoder_normalize_before",
             "decoder_normalize_before", "activation_fn", "share_all_embeddings",
             "share_decoder_input_output_embed", "layernorm_embedding", "no_scale_embedding",
             "encoder_learned_pos", "decoder_learned_pos", "no_token_positional_embeddings")


def parse_interactive(path: Path) -> dict[int, dict]:
    rows: dict[int, dict] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^([SHDP])-(\d+)\t(.*)$", line)
        if not m:
            continue
        kind, i, rest = m.group(1), int(m.group(2)), m.group(3)
        row = rows.setdefault(i, {})
        if kind == "S":
            row["source_pieces"] = rest.split()
        elif kind == "H":
            score, _, hyp = rest.partition("\t")
            row["score_log2"] = float(score)
            row["pieces"] = hyp.split()
        elif kind == "D":
            row["text"] = rest.partition("\t")[2]
        elif kind == "P":
            row["positional_scores_log2"] = [float(x) for x in rest.split()]
    return rows


def items(rows: dict[int, dict], tgt: Dictionary, n: int) -> list[dict]:
    out = []
    assert sorted(rows) == list(range(n)), f"expected {n} hypotheses, got {len(rows)}"
    for i in range(n):
        r = rows[i]
        ids = [tgt.index(p) for p in r["pieces"]]
        assert tgt.unk() not in ids, (i, r["pieces"])
        # one positional score per output token plus the final </s>: nothing was hidden by
        # Dictionary.string (which drops <s> and </s>)
        assert len(r["positional_scores_log2"]) == len(ids) + 1, (i, r)
        mean = sum(r["positional_scores_log2"]) / len(r["positional_scores_log2"])
        assert abs(mean - r["score_log2"]) < 1e-3, (i, mean, r["score_log2"])
        out.append({"pieces": r["pieces"], "ids": ids, "text": r["text"],
                    "score": r["score_log2"] * math.log(2), "score_log2": r["score_log2"],
                    "positional_scores_log2": r["positional_scores_log2"]})
    return out


def ct2_results(model_dir: Path, sources: list[list[str]], beam: int) -> list[dict]:
    import ctranslate2

    translator = ctranslate2.Translator(str(model_dir), device="cpu", inter_threads=1,
                                        intra_threads=1)
    res = translator.translate_batch(sources, beam_size=beam, **CT2_OPTIONS)
    return [{"pieces": r.hypotheses[0], "score": r.scores[0]} for r in res]


def dump(obj: dict) -> str:
    """JSON with one line per list item (readable diffs, small file)."""
    def enc(value, indent: str) -> str:
        if isinstance(value, dict) and any(isinstance(v, (dict, list)) for v in value.values()):
            inner = indent + " "
            return "{\n" + ",\n".join(f"{inner}{json.dumps(k)}: {enc(v, inner)}"
                                       for k, v in value.items()) + "\n" + indent + "}"
        if isinstance(value, list) and value and isinstance(value[0], dict):
            inner = indent + " "
            return "[\n" + ",\n".join(inner + json.dumps(v, ensure_ascii=False)
                                       for v in value) + "\n" + indent + "]"
        return json.dumps(value, ensure_ascii=False)
    return enc(obj, "") + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("variant", type=Path)
    ap.add_argument("--beam4", type=Path, required=True)
    ap.add_argument("--beam1", type=Path, required=True)
    ap.add_argument("--commands", type=Path, required=True,
                    help="lines NAME<TAB>COMMAND")
    ap.add_argument("--work", help="written as $WORK in the recorded commands")
    ap.add_argument("--data", help="written as $DATA in the recorded commands")
    ap.add_argument("--ct2", type=Path)
    ap.add_argument("--ct2-convert", default=None, help="the conversion command, recorded")
    ap.add_argument("--sp-source", type=Path, help="test.sp.en: the S- lines must match it")
    args = ap.parse_args()
    variant: Path = args.variant
    src = Dictionary.load(str(variant / "dict.en.txt"))
    tgt = Dictionary.load(str(variant / "dict.fr.txt"))
    rows4, rows1 = parse_interactive(args.beam4), parse_interactive(args.beam1)
    n = len(rows4)
    source_text = (variant / "source.en").read_text(encoding="utf-8").splitlines() \
        if (variant / "source.en").exists() else \
        (variant.parent / "source.en").read_text(encoding="utf-8").splitlines()
    assert len(source_text) == n
    sources = [rows4[i]["source_pieces"] for i in range(n)]
    if args.sp_source:
        sp_lines = args.sp_source.read_text(encoding="utf-8").splitlines()[:n]
        assert [line.split() for line in sp_lines] == sources, "fairseq's spm encoding differs"

    def placeholders(cmd: str) -> str:
        for path, var in ((args.data, "$DATA"), (args.work, "$WORK")):
            cmd = cmd.replace(path, var) if path else cmd
        return cmd

    commands = {}
    for line in args.commands.read_text(encoding="utf-8").splitlines():
        name, _, cmd = line.partition("\t")
        commands[name] = placeholders(cmd)

    with torch.serialization.safe_globals([argparse.Namespace]):
        ckpt = torch.load(variant / "checkpoint_best.pt", map_location="cpu", weights_only=True)
    model_cfg = vars(ckpt["cfg"]["model"])
    g = GenerationConfig()
    beam4, beam1 = items(rows4, tgt, n), items(rows1, tgt, n)
    expected: dict = {
        "toolkit": "fairseq-fixed 0.12.3.1",
        "torch": torch.__version__,
        "model": {k: model_cfg.get(k) for k in ARCH_KEYS},
        "generation": {
            "decoder": "fairseq-interactive (fairseq.sequence_generator.SequenceGenerator, "
                       "search.BeamSearch), one sentence per batch, --cpu",
            "lenpen": g.lenpen, "max_len_a": g.max_len_a, "max_len_b": g.max_len_b,
            "min_len": g.min_len, "unkpen": g.unkpen, "unnormalized": g.unnormalized,
            "nbest": 1,
            "score": "score = natural log, length-normalized: sum of ln p over the output "
                     "tokens and the final </s>, / (len(ids) + 1) ** lenpen; score_log2 and "
                     "positional_scores_log2 are fairseq's printed base-2 values "
                     "(positional: per token, last one is </s>, printed with 4 decimals)",
        },
        "commands": commands,
        "source": [{"text": source_text[i], "pieces": sources[i],
                    "ids": [src.index(p) for p in sources[i]] + [src.eos()]}
                   for i in range(n)],
        "beam4": beam4,
        "beam1": beam1,
    }
    assert all(src.unk() not in s["ids"] for s in expected["source"])
    if args.ct2:
        import ctranslate2

        ct = {"version": ctranslate2.__version__, "convert": placeholders(args.ct2_convert or ""),
              "options": dict(CT2_OPTIONS), "notes": CT2_NOTES}
        for name, beam, ref in (("beam4", 4, beam4), ("beam1", 1, beam1)):
            res = ct2_results(args.ct2, sources, beam)
            ct[name] = res
            ct[f"{name}_agree"] = sum(r["pieces"] == e["pieces"] for r, e in zip(res, ref, strict=False))
            ct[f"{name}_max_score_diff"] = max(
                abs(r["score"] - e["score"]) for r, e in zip(res, ref, strict=False) if r["pieces"] == e["pieces"])
        expected["ctranslate2"] = ct
        print(f"{variant}: ctranslate2 agrees on beam4 {ct['beam4_agree']}/{n}, "
              f"beam1 {ct['beam1_agree']}/{n}; max |score diff| "
              f"{ct['beam4_max_score_diff']:.2e} / {ct['beam1_max_score_diff']:.2e}")
    (variant / "expected.json").write_text(dump(expected), encoding="utf-8")
    longest = max(len(x["ids"]) for x in beam4 + beam1)
    print(f"{variant}: {n} inputs, longest output {longest} pieces (max_len_b {g.max_len_b})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
