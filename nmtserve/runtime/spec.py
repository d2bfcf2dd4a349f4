"""What a runtime needs to know about an exported model (``model.json`` beside the graphs)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path

from .. import defaults, graphs
from ..decoding.search import SearchOptions

SPEC_FILE = "model.json"

# How generate runs the graphs (its ``step_backend`` parameter):
STEP_BACKENDS = {
    "inprocess": "ONNX Runtime in the engine's process, host arrays (the CPU default)",
    "tensorrt": "the encoder/decoder TensorRT plans, cache and memory on the GPU (the GPU default)",
    "onnxruntime-cuda": "ONNX Runtime's CUDA provider with I/O binding, cache and memory on the GPU",
    "bls": "BLS calls to the encoder/decoder models (every step ships the cache window)",
}


@dataclass(frozen=True)
class ModelSpec:
    layers: int  # decoder layers
    heads: int
    d_k: int
    vocab: int
    max_positions: int
    pad_id: int
    bos_id: int
    eos_id: int
    unk_id: int
    src_vocab: int = 0  # source vocabulary size (0: not recorded, by an export before it was)
    max_source_len: int = 256
    max_target_len: int = 256
    max_batch: int = defaults.MAX_BATCH
    # Defaults served when a request does not set them.
    beam_size: int = defaults.BEAM_SIZE
    length_penalty: float = 1.0
    max_length_a: float = 2.0
    max_length_b: int = 10
    # The toolkit whose beam search a request gets (SearchOptions.rule: an imported model decodes
    # as its toolkit did) and the fewest tokens generated before EOS may end a hypothesis.
    beam_rule: str = "transformers"
    min_length: int = 0
    # The runaway-loop cut served to every request (SearchOptions.loop_repeats; 0: off): a
    # hypothesis whose tokens end with a block of up to loop_ngram tokens written loop_repeats
    # times in a row is ended there. A deployment turns it on in model.json (docs/contract.md).
    loop_repeats: int = 0
    loop_ngram: int = 8
    # The graphs' precision: "fp32", or "int8" (weights quantized for the CPU by the export).
    precision: str = "fp32"
    # TensorRT build choices of the export (nmtserve.export.engines reads them at container start).
    fp16: bool = False
    max_beam: int = graphs.DEFAULT_MAX_BEAM  # widest beam the server accepts; the decoder profile's beam axis covers it
    # The model's usual target / source length in characters on the export's held-out sentences
    # (nmtserve.coverage.usual_length_ratio; 0: not measured): a much shorter translation is flagged.
    length_ratio: float = 0.0
    # Below this score (length-normalised log-probability) a translation is flagged "may be wrong":
    # SCORE_FLOOR_FACTOR times the 1st percentile of the held-out sentences' scores (0: not measured).
    score_floor: float = 0.0
    tokenizer: dict = field(default_factory=dict)  # file names relative to the spec's folder
    hashes: dict = field(default_factory=dict)  # sha256 of the graphs, for stale-engine checks

    def search_options(self, *, disable_unk: bool = False, **given) -> SearchOptions:
        """The search a request gets with the options it does not set: this export's beam, length
        penalty, maximum length (``min(max_target_len, max_length_a * source + max_length_b)``),
        minimum length, beam-search rule and loop cut. ``disable_unk``: ``unk_id`` is suppressed."""
        served = dict(beam_size=self.beam_size, length_penalty=self.length_penalty, max_length=self.max_target_len,
                      max_length_a=self.max_length_a, max_length_b=self.max_length_b, rule=self.beam_rule,
                      min_length=self.min_length, loop_repeats=self.loop_repeats, loop_ngram=self.loop_ngram)
        if disable_unk:
            given["suppress_sequences"] = (*given.get("suppress_sequences", ()), (self.unk_id,))
        return SearchOptions(**{**served, **given})

    @property
    def dims(self) -> graphs.Dims:
        return graphs.Dims(layers=self.layers, heads=self.heads, d_k=self.d_k, vocab=self.vocab, max_beam=self.max_beam)

    def save(self, path: Path) -> None:
        Path(path).write_text(json.dumps(asdict(self), indent=2, sort_keys=True) + "\n")

    @classmethod
    def from_dict(cls, data: dict) -> ModelSpec:
        """A ``model.json``'s fields. Unknown keys (a newer nmtserve's) are ignored; an export from
        before ``max_beam`` was recorded served max(DEFAULT_MAX_BEAM, beam_size). A missing
        required field raises ValueError naming it."""
        names = {f.name for f in fields(cls)}
        known = {k: v for k, v in data.items() if k in names}
        known.setdefault("max_beam", max(graphs.DEFAULT_MAX_BEAM, int(known.get("beam_size", defaults.BEAM_SIZE))))
        missing = [f.name for f in fields(cls)
                   if f.default is MISSING and f.default_factory is MISSING and f.name not in known]
        if missing:
            raise ValueError(f"{SPEC_FILE} lacks {', '.join(missing)}; re-export the model with this nmtserve")
        return cls(**known)

    @classmethod
    def load(cls, path: Path) -> ModelSpec:
        return cls.from_dict(json.loads(Path(path).read_text()))


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def graph_sha256(graph: Path, data_files: Sequence[Path] | None = None) -> str:
    """sha256 of an ONNX graph with its external weights: ``data_files`` (every file it reads, its
    own and a shared one: ``nmtserve.export.weights.graph_files``), or by default ``<graph>.data``
    when it has one. A re-export that changed only the weights changes it too."""
    if data_files is None:
        own = Path(graph).with_name(Path(graph).name + ".data")
        data_files = [own] if own.is_file() else []
    if not data_files:
        return file_sha256(graph)
    return hashlib.sha256("".join(map(file_sha256, [graph, *data_files])).encode()).hexdigest()
