"""Checkpoints trained by the toolkits themselves (OpenNMT-py, eole, fairseq, PyTorch's
nn.Transformer tutorial) imported, exported and served, checked against each toolkit's own
decoder: its beam-4 and beam-1 outputs recorded beside the checkpoint by the scripts in
scripts/toolkits/ (each trains in a throwaway environment with the toolkit installed; the tests
do not need the toolkits). Where CTranslate2 converts a checkpoint without its toolkit, its
conversion is a second, live oracle.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.usefixtures("one_torch_thread")

from nmtserve.model.importers import detect, load_any  # noqa: E402
from nmtserve.model.reference import reference_decode  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures" / "toolkits"


@dataclass(frozen=True)
class Toolkit:
    path: str  # what `nmtserve export` is given, under FIXTURES
    format: str  # the registry's name for it
    expected: str  # the toolkit's own outputs
    beams: dict[int, str]  # beam width -> the expected.json key holding the toolkit's outputs
    max_length: int = 256  # the cap the toolkit's recording ran under (generated tokens, EOS included)
    tokenizer: str | None = None  # --tokenizer, where the checkpoint's folder lacks its sentencepiece model

    @property
    def options(self):
        from nmtserve.model.importers.base import ImportOptions

        return ImportOptions(tokenizer=FIXTURES / self.tokenizer if self.tokenizer else None)


BEAMS = {4: "beam4", 1: "beam1"}
TOOLKITS = {
    "opennmt_py": Toolkit("opennmt_py/model.pt", "opennmt-py", "opennmt_py/expected.json", BEAMS),
    "opennmt_py_shared": Toolkit("opennmt_py/shared.pt", "opennmt-py", "opennmt_py/expected_shared.json", BEAMS),
    "eole": Toolkit("eole", "eole", "eole/expected.json", BEAMS),
    "eole_shared": Toolkit("eole/shared", "eole", "eole/shared/expected.json", BEAMS),
    "fairseq": Toolkit("fairseq/checkpoint_best.pt", "fairseq", "fairseq/expected.json", BEAMS),
    # These two folders hold no sentencepiece model: given with --tokenizer.
    "fairseq_shared": Toolkit("fairseq/shared/checkpoint_best.pt", "fairseq", "fairseq/shared/expected.json", BEAMS,
                              tokenizer="fairseq/spm.model"),
    "fairseq_lnemb": Toolkit("fairseq/lnemb/checkpoint_best.pt", "fairseq", "fairseq/lnemb/expected.json", BEAMS,
                             tokenizer="fairseq/spm.model"),
    "torch_tutorial": Toolkit("torch_tutorial", "torch.nn.Transformer", "torch_tutorial/expected.json", {1: "greedy"}),
}
TOOLKITS = {name: t for name, t in TOOLKITS.items() if (FIXTURES / t.expected).is_file()}


def _expected(toolkit: Toolkit) -> dict:
    return json.loads((FIXTURES / toolkit.expected).read_text(encoding="utf-8"))


def _sources(toolkit: Toolkit) -> list[str]:
    folder = (FIXTURES / toolkit.path)
    folder = folder if folder.is_dir() else folder.parent
    while not (folder / "source.en").is_file():  # a variant's folder shares its toolkit's inputs
        folder = folder.parent
    return (folder / "source.en").read_text(encoding="utf-8").splitlines()


@pytest.fixture(scope="module")
def imported():
    cache = {}

    def get(name: str):
        if name not in cache:
            cache[name] = load_any(FIXTURES / TOOLKITS[name].path, TOOLKITS[name].options)
        return cache[name]

    return get


def _decode(ckpt, texts, beam: int, max_lengths: list[int]):
    """The reference decode with the checkpoint's decoding defaults; each sentence capped at its
    own maximum length (the toolkits' depends on the batch they cut: recorded per sentence)."""
    ids = [ckpt.tokenizer.encode(t) for t in texts]
    out: list = [None] * len(texts)
    for cap in sorted(set(max_lengths)):
        rows = [i for i, m in enumerate(max_lengths) if m == cap]
        options = ckpt.decoding.search_options(max_length=cap, beam_size=beam, max_length_b=None)
        for i, r in zip(rows, reference_decode(ckpt.model, [ids[i] for i in rows], options), strict=True):
            out[i] = r[0]
    return out


def _max_lengths(ckpt, toolkit: Toolkit, want: list[dict], texts: list[str]) -> list[int]:
    if all("max_length" in w for w in want):
        return [int(w["max_length"]) for w in want]
    options = ckpt.decoding.search_options(max_length=toolkit.max_length)
    return [options.max_length_for(len(ckpt.tokenizer.encode(t))) for t in texts]


def _cases():
    return [(name, beam) for name, t in TOOLKITS.items() for beam in t.beams]


@pytest.mark.parametrize("name", TOOLKITS)
def test_the_registry_detects_each_toolkit(name):
    fmt, _, _ = detect(FIXTURES / TOOLKITS[name].path)
    assert fmt.name == TOOLKITS[name].format


@pytest.mark.parametrize(("name", "beam"), _cases())
def test_the_import_decodes_as_the_toolkit_did(imported, name, beam):
    """PyTorch reference decode of the imported model (the toolkit's beam search rule and
    defaults) against the toolkit's own output: every sentence, token for token."""
    toolkit = TOOLKITS[name]
    ckpt = imported(name)
    want = _expected(toolkit)[toolkit.beams[beam]]
    texts = _sources(toolkit)
    got = _decode(ckpt, texts, beam, _max_lengths(ckpt, toolkit, want, texts))
    eos = ckpt.config.eos_id
    same = [[t for t in h.tokens if t != eos] == w["ids"] for h, w in zip(got, want, strict=True)]
    first = next((i for i, ok in enumerate(same) if not ok), None)
    assert all(same), (f"{sum(same)}/{len(same)} identical; first difference, sentence {first}: "
                       f"{got[first].tokens} vs {want[first]['ids']}")
    assert [ckpt.tokenizer.decode(h.tokens) for h in got] == [w["text"] for w in want]
    scored = [(h.score, w["score"]) for h, w in zip(got, want, strict=True) if "score" in w]
    assert all(abs(ours - theirs) < 1e-4 for ours, theirs in scored), "the scores differ from the toolkit's"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """Each toolkit's checkpoint exported (CPU, fp32; the export's parity check on) and served by a
    real tritonserver, one at a time."""
    from nmtserve.export.pipeline import ExportOptions, export
    from nmtserve.server.launcher import ServerConfig, TritonServer

    running: dict[str, tuple] = {}

    def get(name: str):
        if name not in running:
            for other in list(running):  # one server at a time
                running.pop(other)[0].__exit__(None, None, None)
            repo = tmp_path_factory.mktemp(name) / "repository"
            report = export(FIXTURES / TOOLKITS[name].path, ExportOptions(repository=repo, parity_sentences=20,
                                                                          tokenizer=TOOLKITS[name].options.tokenizer))
            assert report.parity is not None and report.parity.passed
            server = TritonServer(ServerConfig.on_free_ports(repo))
            server.__enter__()
            server.wait_until_ready(120)
            running[name] = (server, report)
        return running[name][0]

    yield get
    for server, _ in running.values():
        server.__exit__(None, None, None)


@pytest.mark.server
@pytest.mark.parametrize(("name", "beam"), _cases())
def test_served_translations_equal_the_toolkits(served, name, beam):
    from nmtserve.client import Translator

    toolkit = TOOLKITS[name]
    server = served(name)
    recorded = _expected(toolkit)[toolkit.beams[beam]]
    want = [w["text"] for w in recorded]
    texts = _sources(toolkit)
    got: list = [None] * len(texts)
    with Translator(server.urls.grpc_address) as client:
        if all("max_length" in w for w in recorded):
            # OpenNMT-py and eole cap a sentence by the widest source of the batch they cut; the
            # server caps each by its own length (batch-independent). Sent with the toolkit's caps.
            for cap in sorted({w["max_length"] for w in recorded}):
                rows = [i for i, w in enumerate(recorded) if w["max_length"] == cap]
                done = client.translate([texts[i] for i in rows], beam_size=beam, max_length=cap,
                                        split_sentences=False)
                for i, t in zip(rows, done, strict=True):
                    got[i] = t.text
        else:
            got = [t.text for t in client.translate(texts, beam_size=beam, split_sentences=False)]
    same = sum(g == w for g, w in zip(got, want, strict=True))
    assert got == want, f"{same}/{len(want)} identical"


def _ctranslate2_translator(name: str, folder: Path):
    """CTranslate2's own conversion of the checkpoint (its OpenNMT-py converter needs no OpenNMT-py)."""
    import argparse

    import torch

    ctranslate2 = pytest.importorskip("ctranslate2")
    with torch.serialization.safe_globals([argparse.Namespace]):
        ctranslate2.converters.OpenNMTPyConverter(str(FIXTURES / TOOLKITS[name].path)).convert(str(folder), force=True)
    return ctranslate2.Translator(str(folder), device="cpu", inter_threads=1, intra_threads=1)


@pytest.mark.parametrize("name", [n for n in ("opennmt_py", "opennmt_py_shared") if n in TOOLKITS])
def test_ctranslate2s_conversion_agrees_with_the_import(imported, name, tmp_path):
    """A second, live oracle: CTranslate2 converts the same checkpoint itself. Greedy decodes are
    identical; every beam-4 translation of ours that ends with EOS gets the same log-probability
    from CTranslate2's model; and its beam search, close to OpenNMT-py's but not the same, picks
    the same translation for nearly every sentence."""
    toolkit, ckpt = TOOLKITS[name], imported(name)
    translator = _ctranslate2_translator(name, tmp_path / "ct2")
    texts = _sources(toolkit)
    caps = _max_lengths(ckpt, toolkit, _expected(toolkit)["beam1"], texts)
    pieces = [ckpt.tokenizer.source.encode(t, out_type=str) for t in texts]
    eos = ckpt.config.eos_id

    def theirs(beam: int) -> list[list[str]]:
        out: list = [None] * len(texts)
        for cap in sorted(set(caps)):
            rows = [i for i, c in enumerate(caps) if c == cap]
            done = translator.translate_batch([pieces[i] for i in rows], beam_size=beam, length_penalty=1.0,
                                              max_decoding_length=cap, min_decoding_length=0)
            for i, r in zip(rows, done, strict=True):
                out[i] = r.hypotheses[0]
        return out

    def ours(beam: int):
        return _decode(ckpt, texts, beam, caps)

    greedy = [ckpt.tokenizer.target_pieces([t for t in h.tokens if t != eos]) for h in ours(1)]
    assert greedy == theirs(1)
    beam4 = ours(4)
    ended = [i for i, h in enumerate(beam4) if h.tokens[-1] == eos]
    targets = [ckpt.tokenizer.target_pieces(beam4[i].tokens[:-1]) for i in ended]
    scored = translator.score_batch([pieces[i] for i in ended], targets)
    for i, s in zip(ended, scored, strict=True):
        assert abs(sum(s.log_probs) - beam4[i].sum_logprobs) < 1e-3, f"sentence {i}"
    same = sum(ckpt.tokenizer.target_pieces([t for t in h.tokens if t != eos]) == t
               for h, t in zip(beam4, theirs(4), strict=True))
    assert same >= 0.95 * len(texts), f"beam 4: {same}/{len(texts)} identical to CTranslate2's"


# ---- what is refused ---------------------------------------------------------------------
REFUSED = {
    "opennmt_py/rnn.pt": ("encoder_type='rnn'", "decoder_type='rnn'"),
    "opennmt_py/relative.pt": ("max_relative_positions=",),
    "fairseq/lstm.pt": ("arch='lstm'",),
    "eole/relative": ("position_encoding_type='Relative'",),
}


@pytest.mark.parametrize("path", [p for p in REFUSED if (FIXTURES / p).exists()])
def test_a_checkpoint_nmtserve_cannot_serve_is_refused_naming_every_reason(path, tmp_path):
    """Not a Transformer encoder-decoder, or options nmtserve does not support: one error naming
    every such option, exit status 2, nothing written."""
    repo = tmp_path / "repository"
    done = subprocess.run([sys.executable, "-m", "nmtserve.cli", "export", str(FIXTURES / path), "-r", str(repo)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    for reason in REFUSED[path]:
        assert reason in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert not repo.exists()


def test_a_path_of_no_known_format_names_the_formats(tmp_path):
    (tmp_path / "weights.pt").write_bytes(b"not a checkpoint")
    done = subprocess.run([sys.executable, "-m", "nmtserve.cli", "export", str(tmp_path / "weights.pt"), "-r",
                           str(tmp_path / "repository")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert "OpenNMT-py" in done.stderr and "fairseq" in done.stderr and "eole" in done.stderr, done.stderr


def test_a_missing_tokenizer_is_named_with_the_flag_that_gives_it(tmp_path):
    shutil.copy(FIXTURES / "opennmt_py" / "model.pt", tmp_path / "model.pt")
    done = subprocess.run([sys.executable, "-m", "nmtserve.cli", "export", str(tmp_path / "model.pt"), "-r",
                           str(tmp_path / "repository")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "--tokenizer" in done.stderr, done.stderr


def test_the_documented_declaration_is_the_fixtures():
    """docs/importers.md's worked example is the declaration the tutorial's fixture is imported with."""
    import re

    page = (Path(__file__).parents[1] / "docs" / "importers.md").read_text(encoding="utf-8")
    documented = json.loads(re.search(r"```json\n(.*?)```", page, re.DOTALL)[1])
    fixture = json.loads((FIXTURES / "torch_tutorial" / "declaration.json").read_text(encoding="utf-8"))
    fixture.pop("comment")
    assert documented == fixture


@pytest.mark.server
def test_fairseqs_forced_eos_at_the_length_limit_is_served(imported, served):
    """fairseq forces EOS at the last step whatever its rank: the served engine fetches that step's
    full log-probs (its candidates need not hold EOS) and ends as the reference decode does."""
    from nmtserve.client import Translator

    name = "fairseq"
    if name not in TOOLKITS:
        pytest.skip("no fairseq fixture")
    ckpt, texts = imported(name), _sources(TOOLKITS[name])[:40]
    cap = 6  # shorter than every translation: each one ends at the cap
    reference = _decode(ckpt, texts, 4, [cap] * len(texts))
    want = [ckpt.tokenizer.decode(h.tokens) for h in reference]
    assert all(h.tokens[-1] == ckpt.config.eos_id for h in reference)
    with Translator(served(name).urls.grpc_address) as client:
        got = [t.text for t in client.translate(texts, beam_size=4, max_length=cap, split_sentences=False)]
    assert got == want


def test_a_folder_is_read_as_the_checkpoint_it_holds(tmp_path):
    """PATH may be the checkpoint's folder: fairseq's checkpoint_best.pt, a folder with one .pt,
    the declaration of a state dict; a folder of several .pt files is named as ambiguous."""
    from nmtserve.model.importers import UnknownFormat

    assert detect(FIXTURES / "fairseq")[0].name == "fairseq"
    assert detect(FIXTURES / "torch_tutorial")[0].name == "torch.nn.Transformer"
    one = tmp_path / "run"
    one.mkdir()
    shutil.copy(FIXTURES / "opennmt_py" / "model.pt", one / "model_step_2000.pt")
    assert detect(one)[0].name == "opennmt-py"
    with pytest.raises(UnknownFormat, match="several checkpoints .*model.pt.*give the file"):
        detect(FIXTURES / "opennmt_py")  # four .pt files: which one is not guessed
