"""The quality gate: reduced-precision graphs are served only if they translate (almost) as well.

A *gate set* is a list of held-out source sentences, with reference translations when there are
any (the checkpoint's ``test.en``/``test.fr``, or files the user names). Both the fp32 graphs and
the reduced ones (int8 on CPU at export, fp16 TensorRT plans at container start) translate it
with the serving engine (``InflightBatcher``, the served default search options), and
``compare`` reports corpus BLEU (sacrebleu) of each against the references, the BLEU drop, exact
match, the share of identical outputs, token agreement and the worst sentences. The reduced
precision passes when the drop is at most ``max_bleu_drop``. Without references the fp32
translations are the references (fp32 BLEU is then 100, and the drop is 100 - BLEU(reduced vs
fp32): a stricter measure).

The export ships the gate set with its fp32 translations (``GATE_FILE``) in the repository, so
the GPU container can gate its fp16 plans against them without torch or the checkpoint, and
writes every report into ``REPORT_FILE`` (``{"fp32": ..., "int8": ...}``), next to ``model.json``.
Torch-free: the GPU image runs it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

GATE_FILE = "quality_gate.json"
REPORT_FILE = "quality.json"
DEFAULT_MAX_BLEU_DROP = 0.3
DEFAULT_GATE_SENTENCES = 500
WORST = 5  # examples kept in a report


class GateError(ValueError):
    """The gate set cannot be read (missing file, mismatched lines); the message names the file."""


@dataclass
class GateSet:
    sources: list[str]
    references: list[str] | None
    origin: str  # where the sentences come from, for the report
    max_bleu_drop: float = DEFAULT_MAX_BLEU_DROP  # the export's limit, which the GPU's fp16 gate applies
    # The fp32 graphs' translations (texts and token ids), filled at export and shipped.
    fp32: list[str] | None = None
    fp32_tokens: list[list[int]] | None = None
    fp32_scores: list[float] | None = None  # their scores (length-normalised log-probabilities)
    # A multilingual model's languages for the set (its own codes, "eng_Latn"); None otherwise.
    source_lang: str | None = None
    target_lang: str | None = None

    def save(self, path: Path) -> None:
        Path(path).write_text(json.dumps(asdict(self), ensure_ascii=False) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> GateSet:
        try:
            return cls(**json.loads(Path(path).read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError) as exc:
            raise GateError(f"{path}: not a quality gate set written by `nmtserve export` ({exc})") from exc


def _lines(path: Path) -> list[str]:
    try:
        return Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise GateError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise GateError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc


def read_gate_set(sources: Path, references: Path | None = None, limit: int = DEFAULT_GATE_SENTENCES) -> GateSet:
    """Up to ``limit`` non-empty lines of ``sources`` (and the same lines of ``references``)."""
    src = _lines(sources)
    ref = _lines(references) if references is not None else None
    if ref is not None and len(ref) != len(src):
        raise GateError(f"{sources} has {len(src)} lines but {references} has {len(ref)}: the gate needs one "
                        "reference per source line")
    keep = [i for i, line in enumerate(src) if line.strip()][:limit]
    if not keep:
        raise GateError(f"{sources} has no non-empty line to check quality on")
    origin = str(sources) + (f" / {references}" if references is not None else " (no references)")
    return GateSet([src[i] for i in keep], [ref[i] for i in keep] if ref is not None else None, origin)


def checkpoint_gate_set(checkpoint: Path, limit: int = DEFAULT_GATE_SENTENCES) -> GateSet | None:
    """The checkpoint's held-out ``test.<src>`` / ``test.<tgt>`` pair (the demo's test.en / test.fr)."""
    src = Path(checkpoint) / "test.en"
    refs = [p for p in sorted(Path(checkpoint).glob("test.*")) if p != src]
    if not src.is_file() or len(refs) != 1:
        return None
    return read_gate_set(src, refs[0], limit)


def encode_sources(tokenizer, texts: Sequence[str], spec, source_lang: str | None = None) -> list[list[int]]:
    """The gate sentences as source ids (``[source_lang] X </s>`` for a multilingual model), a
    sentence longer than the export's max_source_len cut to it (EOS kept): a check measures
    translations, it does not refuse its own inputs."""
    sources = [tokenizer.encode(t, source_lang) if source_lang else tokenizer.encode(t) for t in texts]
    return [s if len(s) <= spec.max_source_len else [*s[: spec.max_source_len - 1], spec.eos_id] for s in sources]


def translate(runtime, tokenizer, gate: GateSet, options, max_sentences: int | None = None,
              scores: list[float] | None = None) -> tuple[list[list[int]], float]:
    """Best hypothesis' tokens for every gate sentence (into ``gate.target_lang`` for a
    multilingual model, forced as the server forces it), decoded by the serving engine on
    ``runtime`` (at most the export's max batch at once: a TensorRT profile ends there); seconds.
    ``scores``, when given, receives each best hypothesis' score."""
    from ..decoding.search import TargetPrefix  # noqa: PLC0415 - keeps this module light to import
    from ..engine import InflightBatcher  # noqa: PLC0415

    spec = runtime.spec
    sources = encode_sources(tokenizer, gate.sources, spec, gate.source_lang)
    prefixes = None
    if gate.target_lang:
        prefixes = [TargetPrefix((tokenizer.language_id(gate.target_lang),))] * len(sources)
    running = min(max_sentences or spec.max_batch, spec.max_batch)
    engine = InflightBatcher(runtime, max_sentences=running, max_beam=max(spec.max_beam, options.beam_size)).start()
    try:
        started = time.perf_counter()
        results = engine.translate(sources, options, prefixes=prefixes)
        seconds = time.perf_counter() - started
    finally:
        engine.stop()
    if scores is not None:
        scores.extend(float(r[0].score) for r in results)
    return [list(r[0].tokens) for r in results], seconds


@dataclass
class QualityReport:
    precision: str
    sentences: int
    origin: str
    references: str  # "reference translations" or "fp32 translations"
    bleu_fp32: float
    bleu: float
    bleu_drop: float
    max_bleu_drop: float
    exact_match_fp32: float | None  # share equal to the references (None without references)
    exact_match: float | None
    identical: float  # share of sentences translated exactly as fp32 does
    token_agreement: float  # tokens equal to fp32's at the same position / the longer output's tokens
    seconds_fp32: float | None = None
    seconds: float | None = None
    worst: list[dict] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.bleu_drop <= self.max_bleu_drop

    def summary(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        speed = ""
        if self.seconds and self.seconds_fp32:
            speed = f"; decoded {self.seconds_fp32 / self.seconds:.2f}x the fp32 speed"
        em = ""
        if self.exact_match is not None and self.exact_match_fp32 is not None:
            em = f", exact match {100 * self.exact_match_fp32:.1f}% -> {100 * self.exact_match:.1f}%"
        return (f"quality gate {self.precision} {verdict}: BLEU {self.bleu_fp32:.2f} (fp32) -> {self.bleu:.2f} "
                f"({self.precision}), drop {self.bleu_drop:.2f} (max {self.max_bleu_drop:g}) on {self.sentences} "
                f"sentences of {self.origin} against {self.references}{em}; {100 * self.identical:.1f}% identical "
                f"to fp32, token agreement {100 * self.token_agreement:.1f}%{speed}")

    def to_dict(self) -> dict:
        return {**asdict(self), "passed": self.passed}


def _agreement(a: Sequence[Sequence[int]], b: Sequence[Sequence[int]]) -> float:
    same = sum(sum(x == y for x, y in zip(p, q, strict=False)) for p, q in zip(a, b, strict=True))
    total = sum(max(len(p), len(q)) for p, q in zip(a, b, strict=True))
    return same / total if total else 1.0


def compare(gate: GateSet, hypotheses: Sequence[str], tokens: Sequence[Sequence[int]], precision: str,
            max_bleu_drop: float = DEFAULT_MAX_BLEU_DROP, seconds: float | None = None,
            seconds_fp32: float | None = None) -> QualityReport:
    """The reduced precision's translations against the gate set's fp32 ones (and references)."""
    import sacrebleu  # noqa: PLC0415

    if gate.fp32 is None or gate.fp32_tokens is None:
        raise GateError("the gate set has no fp32 translations to compare with")
    if not (len(hypotheses) == len(tokens) == len(gate.sources) == len(gate.fp32)):
        raise GateError(f"{len(hypotheses)} translations for {len(gate.sources)} gate sentences")
    refs = gate.references if gate.references is not None else gate.fp32
    bleu_fp32 = sacrebleu.corpus_bleu(gate.fp32, [refs]).score
    bleu = sacrebleu.corpus_bleu(list(hypotheses), [refs]).score
    worst: list[tuple[float, dict]] = []
    for i, (hyp, base) in enumerate(zip(hypotheses, gate.fp32, strict=True)):
        if hyp == base:
            continue
        loss = sacrebleu.sentence_bleu(base, [refs[i]]).score - sacrebleu.sentence_bleu(hyp, [refs[i]]).score
        worst.append((-loss, {"index": i, "source": gate.sources[i], "fp32": base, precision: hyp,
                              **({"reference": refs[i]} if gate.references is not None else {}),
                              "sentence_bleu_loss": round(loss, 2)}))
    worst.sort(key=lambda w: w[0])
    em = (lambda outs: sum(o == r for o, r in zip(outs, refs, strict=True)) / len(refs)) if gate.references else None
    return QualityReport(
        precision=precision, sentences=len(gate.sources), origin=gate.origin,
        references="reference translations" if gate.references is not None else "fp32 translations",
        bleu_fp32=round(bleu_fp32, 2), bleu=round(bleu, 2), bleu_drop=round(bleu_fp32 - bleu, 2),
        max_bleu_drop=max_bleu_drop,
        exact_match_fp32=em(gate.fp32) if em else None, exact_match=em(hypotheses) if em else None,
        identical=sum(h == b for h, b in zip(hypotheses, gate.fp32, strict=True)) / len(hypotheses),
        token_agreement=_agreement(tokens, gate.fp32_tokens), seconds=seconds, seconds_fp32=seconds_fp32,
        worst=[w for _, w in worst[:WORST]],
    )


def baseline(gate: GateSet, runtime, tokenizer, options, max_sentences: int | None = None) -> dict:
    """Translate the gate set with the fp32 graphs (filling ``gate.fp32``); the fp32 report entry."""
    import sacrebleu  # noqa: PLC0415

    gate.fp32_scores = []
    tokens, seconds = translate(runtime, tokenizer, gate, options, max_sentences, scores=gate.fp32_scores)
    gate.fp32_tokens = tokens
    gate.fp32 = [tokenizer.decode(t) for t in tokens]
    entry: dict = {"sentences": len(gate.sources), "origin": gate.origin, "seconds": round(seconds, 2)}
    if gate.references is not None:
        entry["bleu"] = round(sacrebleu.corpus_bleu(gate.fp32, [gate.references]).score, 2)
        entry["exact_match"] = sum(h == r for h, r in zip(gate.fp32, gate.references, strict=True)) / len(gate.fp32)
    return entry


def check(gate: GateSet, runtime, tokenizer, options, precision: str, max_bleu_drop: float,
          seconds_fp32: float | None = None, max_sentences: int | None = None) -> QualityReport:
    """Translate the gate set with the reduced-precision ``runtime`` and compare with fp32."""
    tokens, seconds = translate(runtime, tokenizer, gate, options, max_sentences)
    hyps = [tokenizer.decode(t) for t in tokens]
    report = compare(gate, hyps, tokens, precision, max_bleu_drop, seconds=round(seconds, 2),
                     seconds_fp32=seconds_fp32)
    log.info("%s", report.summary())
    return report


def read_reports(folder: Path) -> dict:
    path = Path(folder) / REPORT_FILE
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        return {}


def write_report(folder: Path, key: str, entry: dict) -> dict:
    """Set ``key`` in ``folder``'s report file (other entries kept); the whole report."""
    reports = read_reports(folder)
    reports[key] = entry
    (Path(folder) / REPORT_FILE).write_text(json.dumps(reports, indent=2, ensure_ascii=False, sort_keys=True) + "\n",
                                           encoding="utf-8")
    return reports
