"""bench/compare.py's sizes, rows, scenarios and sentence counts, and the results it gathers."""


from __future__ import annotations

import dataclasses
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    DEFAULT_CHECKPOINT,
    MAX_CAP,
    load_test_set,
    search_options,
)

log = logging.getLogger("bench.compare")


# nmtserve's own rows: the served repositories (fp32, int8, each with EARLY_STOPPING too) and the engine.
NMTSERVE_ROWS = ("served", "served-int8", "served-early", "served-int8-early", "engine")
ROWS = (*NMTSERVE_ROWS, "pytorch", "transformers", "ct2", "ct2-int8")


SCENARIOS = ("bulk", "serving", "latency")


CT2_ROWS = {"ct2": "float32", "ct2-int8": "int8"}


SLOW_ROWS = ("pytorch", "transformers")  # no serving scenario; fewer sentences at base size


MAX_SENTENCES = 64  # the engine's running batch (= the export's max_batch, the server's)


Output = list[int] | str  # generated token ids, or the served translation text


Decoder = Callable[[list], list]  # items (id lists, or texts for `served`) -> outputs


@dataclass(frozen=True)
class Counts:
    """How many sentences each scenario uses (``slow_*``: the pytorch / transformers rows)."""

    bulk: int
    batch: int
    serving: int
    clients: int
    latency: int
    slow_bulk: int
    slow_latency: int
    max_new_tokens: int | None = None  # None: the demo's relative cap

    def need(self) -> int:
        return max(self.bulk, self.serving, self.latency)


# Sized for ~15 minutes on 2 idle cores. At base size CTranslate2 decodes every serving and
# latency sentence alone (~1 s each at beam 4), twice (before / after), fp32 and int8: that is
# most of the time, so base serving is one burst of 32 clients x 1 sentence. The demo's serving
# pass is 1,000 sentences (~16 a client, 2-4 s a row): at 320 (5 a client, under a second) the
# start and the tail were a third of the pass and a row's rounds spread 0.91-1.27x (session 32).
COUNTS = {
    "demo": Counts(bulk=1000, batch=32, serving=1000, clients=64, latency=100, slow_bulk=1000, slow_latency=100),
    "student": Counts(bulk=320, batch=32, serving=160, clients=64, latency=50, slow_bulk=64, slow_latency=16,
                      max_new_tokens=32),
    "base": Counts(bulk=64, batch=16, serving=32, clients=32, latency=8, slow_bulk=16, slow_latency=4,
                   max_new_tokens=32),
}


QUICK_COUNTS = {
    "demo": Counts(bulk=40, batch=32, serving=40, clients=8, latency=10, slow_bulk=40, slow_latency=10),
    "student": Counts(bulk=16, batch=16, serving=16, clients=8, latency=4, slow_bulk=4, slow_latency=2,
                      max_new_tokens=8),
    "base": Counts(bulk=8, batch=8, serving=8, clients=8, latency=4, slow_bulk=4, slow_latency=2,
                   max_new_tokens=8),
}


@dataclass
class Size:
    """One model and its sentences, as every row of that size sees them."""

    name: str
    model_dir: Path  # what `nmtserve export` reads: an nmtserve checkpoint or a Marian directory
    ckpt: object  # nmtserve Checkpoint (PyTorch model + tokenizer)
    texts: list[str]
    counts: Counts
    reference: str  # the row every other row is compared with
    ct2_dir: Path | None = None
    ct2_decoder: Callable | None = None  # (translator, beam) -> Decoder
    not_applicable: dict[str, str] = field(default_factory=dict)
    info: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.sources = [self.ckpt.tokenizer.encode(t) for t in self.texts]

    def options(self, beam: int):
        from nmtserve.decoding.search import SearchOptions

        if self.counts.max_new_tokens is None:
            return dataclasses.replace(search_options(), beam_size=beam)
        return SearchOptions(beam_size=beam, length_penalty=1.0, max_length=self.counts.max_new_tokens)

    def text(self, output: Output) -> str:
        return output if isinstance(output, str) else self.ckpt.tokenizer.decode(output)


def setup_demo(tmp: Path, counts: Counts, wanted: set[str]) -> Size:
    from decode import convert_to_ctranslate2, ct2_decoder

    from nmtserve.model.checkpoint import load_checkpoint

    ckpt = load_checkpoint(DEFAULT_CHECKPOINT)
    texts, _ = load_test_set(DEFAULT_CHECKPOINT, counts.need())
    size = Size("demo", DEFAULT_CHECKPOINT, ckpt, texts, counts, reference="pytorch",
                info={"model": f"{DEFAULT_CHECKPOINT.relative_to(DEFAULT_CHECKPOINT.parents[1])} "
                               f"(d_model {ckpt.config.d_model}, {ckpt.config.encoder_layers}+"
                               f"{ckpt.config.decoder_layers} layers, vocabulary {ckpt.config.tgt_vocab_size})",
                      "max_length": f"min(2 * source tokens + 10, {MAX_CAP})"})
    size.not_applicable["transformers"] = (
        "not applicable: the demo checkpoint uses the paper's interleaved sin/cos position table, which "
        "a Marian checkpoint cannot express (Marian's static table is [sin | cos]), and nmtserve has no "
        "nmtserve -> Marian exporter")
    if wanted & set(CT2_ROWS):
        size.ct2_dir, vocab = convert_to_ctranslate2(ckpt, tmp / "ct2")
        pad_piece = vocab[ckpt.config.pad_id]
        size.ct2_decoder = lambda tr, beam: ct2_decoder(tr, vocab, size.options(beam), pad_piece)
    return size


def _setup_marian(name: str, config: dict, info: str, tmp: Path, counts: Counts, wanted: set[str]) -> Size:
    """A random Marian of ``config`` (bench/_marian_base.py) built and fed to every engine."""
    import _marian_base as mb

    from nmtserve.model.importers.marian import load_marian

    started = time.perf_counter()
    marian = mb.build_marian(tmp / name, config=config)
    log.info("%s: random Marian built in %.0f s", name, time.perf_counter() - started)
    ckpt = load_marian(marian)
    size = Size(name, marian, ckpt, mb.base_sentences(counts.need()), counts, reference="transformers",
                info={"model": info, "max_length": f"{counts.max_new_tokens} new tokens"})
    if wanted & set(CT2_ROWS):
        size.ct2_dir = tmp / f"ct2-{name}"
        vocab = mb.convert_ct2(marian, size.ct2_dir)
        size.ct2_decoder = lambda tr, beam: mb.ct2_decoder(tr, vocab, beam, counts.max_new_tokens)
    return size


def setup_base(tmp: Path, counts: Counts, wanted: set[str]) -> Size:
    import _marian_base as mb

    return _setup_marian("base", mb.BASE_CONFIG, "random opus-mt-base-shaped Marian (bench/_marian_base.py: "
                         "d_model 512, 6+6 layers, 8 heads, FFN 2048, vocabulary 58,101, seeded)", tmp, counts, wanted)


def setup_student(tmp: Path, counts: Counts, wanted: set[str]) -> Size:
    """Bergamot's "tiny" student shape (bench/_marian_base.STUDENT_CONFIG), random weights, built
    and fed to every engine as the base size is."""
    import _marian_base as mb

    return _setup_marian("student", mb.STUDENT_CONFIG, "random Bergamot-tiny-shaped Marian (bench/_marian_base.py: "
                         "d_model 256, 6+2 layers, 8 heads, FFN 1536, vocabulary 32,000, seeded)", tmp, counts, wanted)


@dataclass
class Results:
    entries: list[dict] = field(default_factory=list)
    outputs: list[list] = field(default_factory=list)  # parallel to entries
    errors: list[dict] = field(default_factory=list)
    what: dict[str, dict[str, str]] = field(default_factory=dict)  # size -> row -> what ran

    def add(self, entry: dict, outputs: list) -> None:
        self.entries.append(entry)
        self.outputs.append(outputs)
