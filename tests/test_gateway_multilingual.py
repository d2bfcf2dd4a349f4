"""The gateway on a multilingual model (a tiny random NLLB-200, built as tests/test_multilingual.py
builds it, served by a real tritonserver): its 202 languages are listed under the ISO codes
LibreTranslate's and DeepL's clients send (``fr`` for ``fra_Latn``), and a request in those codes
gets what the nmtserve client gets from the model's own codes."""

from __future__ import annotations

import pytest
from gateway_helpers import running_gateway

pytest.importorskip("transformers")
pytestmark = [pytest.mark.server, pytest.mark.usefixtures("one_torch_thread")]

from test_multilingual import TEXTS, build_checkpoint  # noqa: E402

from nmtserve.client import Translator  # noqa: E402
from nmtserve.export.pipeline import ExportOptions, export  # noqa: E402
from nmtserve.server.launcher import ServerConfig, TritonServer  # noqa: E402


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    directory = tmp_path_factory.mktemp("nllb")
    build_checkpoint("nllb", directory / "checkpoint")
    repo = directory / "repository"
    export(directory / "checkpoint", ExportOptions(repository=repo, max_source_len=48, max_target_len=48,
                                                   max_batch=16, skip_parity=True))
    with TritonServer(ServerConfig.on_free_ports(repo)) as server:
        with running_gateway(server.urls.grpc_address, directory) as gateway:
            yield server, gateway


def test_languages_are_listed_under_iso_codes_and_requests_reach_the_models_codes(served):
    server, gateway = served
    listed = {entry["code"]: entry for entry in gateway.get("/languages").json()}
    assert len(listed) == 202 and listed["fr"]["name"] == "French" and "en" in listed["fr"]["targets"]
    assert "fra_Latn" not in listed
    with Translator(server.urls.grpc_address) as client:
        done = client.translate(TEXTS[:3], source_lang="eng_Latn", target_lang="fra_Latn")
    want, warnings = [t.text for t in done], [t.warning for t in done]
    got = gateway.post("/translate", json={"q": TEXTS[:3], "source": "en", "target": "fr"}).json()
    # a random model's output: the server's check may well warn about it, as the client sees it
    assert got == {"translatedText": want, **({"warnings": warnings} if any(warnings) else {})}
    deepl = gateway.post("/v2/translate", json={"text": TEXTS[:3], "source_lang": "EN", "target_lang": "FR"}).json()
    assert [t["text"] for t in deepl["translations"]] == want
    targets = {entry["language"] for entry in gateway.get("/v2/languages", params={"type": "target"}).json()}
    assert {"FR", "EN-GB", "EN-US", "DE"} <= targets
    auto = gateway.post("/translate", json={"q": TEXTS[0], "source": "auto", "target": "fr"}).json()
    assert auto["detectedLanguage"]["language"] in listed  # among 202 (Lingua's 75): low accuracy


def test_detection_among_the_languages_named_for_it(served, tmp_path):
    server, _ = served
    with running_gateway(server.urls.grpc_address, tmp_path, "--detect-languages", "en,fr,de") as gateway:
        for text, language in (("the red car costs thirty euros", "en"), ("le chien bleu", "fr"),
                               ("das Haus über Öl", "de")):
            detected = gateway.post("/detect", data={"q": text}).json()
            assert detected[0]["language"] == language, (text, detected)
            assert {d["language"] for d in detected} <= {"en", "fr", "de"}
