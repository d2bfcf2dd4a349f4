"""Several language pairs behind one endpoint: two real exports in one repository, one server.

The demo model is exported as en-fr and a small random model (the demo's vocabulary, different
weights, so different outputs) as en-de; each pair's answers must equal its own PyTorch
reference decode, whichever way the request names the pair, and concurrently.
"""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from nmtserve.client import AsyncTranslator, InvalidInputError, Translator
from nmtserve.decoding.search import SearchOptions
from nmtserve.export.pipeline import ExportError, ExportOptions, export
from nmtserve.model.checkpoint import load_checkpoint, save_checkpoint
from nmtserve.model.reference import translate as reference_translate
from nmtserve.model.transformer import Transformer

pytestmark = [pytest.mark.server, pytest.mark.usefixtures("one_torch_thread")]

DEMO = Path(__file__).resolve().parents[1] / "models" / "en-fr-numbers"
DEFAULTS = SearchOptions(beam_size=4, length_penalty=1.0, max_length=128, max_length_a=2.0, max_length_b=10)


@pytest.fixture(scope="module")
def second_checkpoint(tmp_path_factory, demo_checkpoint):
    """A 2+2-layer random model on the demo's sentencepiece model: a second, different model."""
    config = dataclasses.replace(demo_checkpoint.config, d_model=64, h=4, d_ff=128, encoder_layers=2,
                                 decoder_layers=2)
    torch.manual_seed(3)
    model = Transformer(config).eval()
    out = tmp_path_factory.mktemp("en-de")
    save_checkpoint(model, out, DEMO / "source.spm")
    return load_checkpoint(out)


@pytest.fixture(scope="module")
def pairs_server(tmp_path_factory, demo_checkpoint, second_checkpoint):
    from nmtserve.server.launcher import ServerConfig, TritonServer

    repo = tmp_path_factory.mktemp("pairs") / "repository"
    common = dict(repository=repo, skip_parity=True, max_source_len=128, max_target_len=128, max_batch=16)
    export(DEMO, ExportOptions(pair="en-fr", **common))
    export(second_checkpoint.path, ExportOptions(pair="en-de", **common))
    server = TritonServer(ServerConfig.on_free_ports(repo))
    with server:
        yield server, repo


@pytest.fixture(scope="module")
def texts(demo_sentences):
    return demo_sentences[:24]


def _reference(ckpt, texts):
    return [n[0][0] for n in reference_translate(ckpt.model, ckpt.tokenizer, texts, DEFAULTS, batch_size=32)]


def test_each_pair_answers_with_its_own_model(pairs_server, demo_checkpoint, second_checkpoint, texts):
    server, _ = pairs_server
    french, other = _reference(demo_checkpoint, texts), _reference(second_checkpoint, texts)
    assert french != other
    with Translator(server.urls.grpc_address) as client:
        assert client.pairs() == ["en-de", "en-fr"]
        assert [t.text for t in client.translate(texts, source_lang="en", target_lang="fr")] == french
        assert [t.text for t in client.translate(texts, target_lang="de")] == other  # the only pair into de
        with pytest.raises(InvalidInputError, match=r"ambiguous.*en-de, en-fr"):
            client.translate(texts[:1])
        with pytest.raises(InvalidInputError, match=r"no model for the language pair en-es: .*en-de, en-fr"):
            client.translate(texts[:1], source_lang="en", target_lang="es")
        doc = "\n\n".join(texts[:5]) + "\n"
        assert client.translate_document(doc, "plain", target_lang="fr") == "\n\n".join(french[:5]) + "\n"

    async def both():  # the two pairs at once, over HTTP
        async with AsyncTranslator(server.urls.http_address, protocol="http", batch_size=4, concurrency=8) as c:
            fr, de = await asyncio.gather(c.translate(texts, target_lang="fr"), c.translate(texts, target_lang="de"))
            return [t.text for t in fr], [t.text for t in de]

    assert asyncio.run(both()) == (french, other)


def test_cli_lists_pairs_and_routes(pairs_server, demo_checkpoint, texts, tmp_path):
    server, _ = pairs_server
    run = [sys.executable, "-m", "nmtserve.cli"]
    listed = subprocess.run([*run, "pairs", "--url", server.urls.grpc_address], capture_output=True, text=True,
                            timeout=60)
    assert listed.returncode == 0 and listed.stdout == "en-de\nen-fr\n", listed.stderr
    path = tmp_path / "in.txt"
    path.write_text("\n".join(texts[:6]) + "\n", encoding="utf-8")
    out = subprocess.run([*run, "translate", "--url", server.urls.grpc_address, "--target-lang", "fr", str(path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == _reference(demo_checkpoint, texts[:6])


def test_layouts_do_not_mix(pairs_server, demo_repository, tmp_path):
    _, repo = pairs_server
    with pytest.raises(ExportError, match="serves language pairs"):
        export(DEMO, ExportOptions(repository=repo, skip_parity=True))
    with pytest.raises(ExportError, match="without a language pair"):
        export(DEMO, ExportOptions(repository=demo_repository, skip_parity=True, pair="en-fr"))
    with pytest.raises(ExportError, match="SOURCE-TARGET"):
        export(DEMO, ExportOptions(repository=tmp_path / "r", skip_parity=True, pair="english"))


def test_languages_of_a_pair_repository_list_each_source_with_its_targets(pairs_server):
    server, _ = pairs_server
    with Translator(server.urls.grpc_address) as client:
        languages = {lang.code: lang for lang in client.languages()}
    assert set(languages) == {"en", "fr", "de"}
    assert (languages["en"].name, sorted(languages["en"].targets)) == ("English", ["de", "fr"])
    assert languages["fr"].targets == ()


def test_the_router_hands_on_the_outputs_parameter(pairs_server):
    """The pair's ensemble computes what the request names in its ``outputs`` parameter alone, and
    refuses a name that is not one of its outputs, through the router as directly."""
    import numpy as np
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    server, _ = pairs_server
    client = grpcclient.InferenceServerClient(server.urls.grpc_address)
    inputs = []
    for name, value in (("TEXT", "I have 3 cats."), ("TARGET_LANG", "fr")):
        inputs.append(grpcclient.InferInput(name, [1], "BYTES"))
        inputs[-1].set_data_from_numpy(np.array([value.encode()], dtype=np.object_))
    full = client.infer("translate", inputs)
    narrowed = client.infer("translate", inputs, parameters={"outputs": "TRANSLATION,WARNING"})
    assert sorted(o.name for o in narrowed.get_response().outputs) == ["TRANSLATION", "WARNING"]
    assert len(full.get_response().outputs) == 10
    for name in ("TRANSLATION", "WARNING"):
        assert narrowed.as_numpy(name).tolist() == full.as_numpy(name).tolist()
    with pytest.raises(InferenceServerException, match="'outputs' parameter names 'NOPE'"):
        client.infer("translate", inputs, parameters={"outputs": "NOPE"})
    client.close()
