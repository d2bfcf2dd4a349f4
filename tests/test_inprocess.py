"""`generate` on nmtserve's own Triton backend (`export --generate-backend nmtserve`:
native/triton/backend.cpp embeds this environment's interpreter in the server, no stub process)
against the same demo on the Python backend.

Two real tritonservers answer the same requests with the same outputs, every one of them, and
refuse the same bad requests with the same status and message; concurrent clients get their
own answers; a stop answers what decodes and does not wait out Triton's exit timeout; the
engine's metrics reach /metrics; a repository that asks for the backend where it is not installed is refused with a message that
says what to do. Skipped where nmtserve_native was built without libpython (no backend).
"""

from __future__ import annotations

import re
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from test_text_in_generate import NARROWED, REQUESTS, _answer, _narrowed, _tensor
from tritonclient.utils import InferenceServerException

from nmtserve import contract as c
from nmtserve.server.install import nmtserve_backend_library

pytestmark = [pytest.mark.server,
              pytest.mark.skipif(nmtserve_backend_library() is None,
                                 reason="nmtserve_native was built without libpython: no nmtserve backend")]

DEMO = Path(__file__).resolve().parents[1] / "models" / "en-fr-numbers"
DEMO_ARGS = ["--max-target-len", "128", "--max-source-len", "128", "--max-batch", "32", "--skip-parity"]


@pytest.fixture(scope="module")
def servers(demo_repository, tmp_path_factory):
    """(in-process server, Python-backend server): the demo exported both ways (the in-process
    one is the CPU target's default, as the session's demo repository was exported)."""
    from nmtserve.cli import main
    from nmtserve.server.launcher import ServerConfig, TritonServer

    repo = tmp_path_factory.mktemp("python") / "model_repository"
    assert main(["export", str(DEMO), "--repository", str(repo), "--generate-backend", "python", *DEMO_ARGS]) == 0
    assert 'backend: "python"' in (repo / "generate" / "config.pbtxt").read_text()
    assert 'backend: "nmtserve"' in (demo_repository / "generate" / "config.pbtxt").read_text()
    inprocess = TritonServer(ServerConfig.on_free_ports(demo_repository))
    python = TritonServer(ServerConfig.on_free_ports(repo))
    with inprocess, python:
        inprocess.wait_until_ready(120)
        python.wait_until_ready(120)
        yield inprocess, python


def _clients(servers):
    return tuple(grpcclient.InferenceServerClient(s.urls.grpc_address) for s in servers)


@pytest.mark.parametrize("index", range(len(REQUESTS)))
def test_the_nmtserve_backend_answers_as_the_python_backend(servers, index):
    inprocess, python = _clients(servers)
    got, want = _answer(inprocess, "translate", REQUESTS[index]), _answer(python, "translate", REQUESTS[index])
    assert got == want
    if index < 7:
        assert isinstance(got, dict) and all(got[c.TRANSLATION])
        for outputs in NARROWED:
            assert _narrowed(inprocess, REQUESTS[index], outputs) == {name: want[name] for name in outputs}


def test_documents_ids_and_refusals_as_the_python_backend(servers):
    inprocess, python = _clients(servers)
    document = {c.DOCUMENT: ["# Cats\n\nI have 3 cats. The dog sleeps.\n"], c.FORMAT: ["markdown"]}
    assert _answer(inprocess, "translate_document", document) == _answer(python, "translate_document", document)
    ids = _answer(python, "tokenize", {c.TEXT: ["I have 3 cats."]})
    own = {c.SRC_IDS: np.array(ids[c.SRC_IDS], np.int32), c.SRC_LEN: np.array(ids[c.SRC_LEN], np.int32)}
    got = _answer(inprocess, "generate", own)
    assert got == _answer(python, "generate", own) and got[c.OUT_IDS]
    for bad in ({c.MAX_LENGTH: [8]}, {c.TEXT: [""]}, {c.TEXT: ["I have 3 cats."], c.BEAM_SIZE: [0]}):
        refused = _answer(inprocess, "translate", bad) if c.TEXT in bad else _answer(inprocess, "generate", bad)
        assert refused[0] == "error" and refused[1] == "StatusCode.INVALID_ARGUMENT", refused
        assert refused == (_answer(python, "translate", bad) if c.TEXT in bad else _answer(python, "generate", bad))
    with pytest.raises(InferenceServerException, match="'outputs' parameter names 'NOPE'"):
        inprocess.infer("translate", [_tensor(c.TEXT, ["I have 3 cats."])], parameters={c.OUTPUTS_PARAMETER: "NOPE"})


def test_concurrent_clients_each_get_their_own_answer(servers, demo_sentences):
    inprocess, python = _clients(servers)
    texts = demo_sentences[:96]
    want = [_answer(python, "translate", {c.TEXT: [t]})[c.TRANSLATION] for t in texts]
    local = threading.local()

    def one(text: str):
        if not hasattr(local, "client"):
            local.client = grpcclient.InferenceServerClient(servers[0].urls.grpc_address)
        result = local.client.infer("translate", [_tensor(c.TEXT, [text])], parameters={c.OUTPUTS_PARAMETER: "TRANSLATION"})
        return result.as_numpy(c.TRANSLATION).tolist()

    with ThreadPoolExecutor(32) as pool:
        assert list(pool.map(one, texts)) == want


def _metric(server, name: str) -> float:
    text = urllib.request.urlopen(server.urls.metrics, timeout=10).read().decode()
    found = re.search(rf'^{name}{{model="generate"}} (\S+)$', text, re.M)
    assert found, f"{name} is not on /metrics"
    return float(found.group(1))


def test_the_backend_says_which_nmtserve_it_imported(servers):
    """The embedded interpreter is this environment's (PYTHONPATH first: bench/served_ab.py's
    sides); its log line names the nmtserve package and the nmtserve_native module it imported."""
    import nmtserve_native

    import nmtserve
    from nmtserve.server.inprocess import LOADED_FROM

    inprocess, _ = servers
    want = LOADED_FROM.format(model="generate", package=Path(nmtserve.__file__).parent, native=nmtserve_native.__file__)
    assert want in inprocess.log_path.read_text(encoding="utf-8", errors="replace")


def test_the_engine_metrics_reach_the_metrics_endpoint(servers):
    server = servers[0]
    client = grpcclient.InferenceServerClient(server.urls.grpc_address)
    assert _metric(server, "nmtserve_compiled_search_step") in (0.0, 1.0)
    time.sleep(1.2)  # the engine's figures are reported every 0.5 s: earlier tests' requests are in
    answered = _metric(server, "nmtserve_requests_total")
    client.infer("translate", [_tensor(c.TEXT, ["I have 3 cats."])])
    time.sleep(1.2)  # the engine's figures are reported every 0.5 s
    assert _metric(server, "nmtserve_requests_total") == answered + 1


def test_a_stop_answers_what_decodes_and_unloads_at_once(servers, demo_sentences, tmp_path):
    """A stop while a request decodes answers it UNAVAILABLE; a stop after requests were answered
    does not wait out Triton's exit timeout (a response factory kept would hold the model)."""
    from nmtserve.server.launcher import ServerConfig, TritonServer

    repo = Path(servers[0].config.model_repository)
    for during in (False, True):
        log = tmp_path / f"server-{during}.log"
        server = TritonServer(ServerConfig.on_free_ports(repo, log_file=log))
        server.start()
        server.wait_until_ready(120)
        client = grpcclient.InferenceServerClient(server.urls.grpc_address)
        texts = (demo_sentences * 3)[:1000]
        outcome: dict = {}
        if during:
            def long_request(client=client, texts=texts, outcome=outcome):
                try:
                    client.infer("translate", [_tensor(c.TEXT, texts)], client_timeout=60)
                except InferenceServerException as exc:
                    outcome["error"] = exc
            thread = threading.Thread(target=long_request)
            thread.start()
            time.sleep(0.8)
        else:
            client.infer("translate", [_tensor(c.TEXT, texts[:200])])
        started = time.monotonic()
        server.stop()
        assert time.monotonic() - started < 5, "the server waited out its exit timeout"
        text = log.read_text(errors="replace")
        assert "Exit timeout expired" not in text and "Signal (6)" not in text
        if during:
            thread.join(30)
            assert "UNAVAILABLE" in str(outcome.get("error")), outcome


def test_a_repository_for_the_backend_is_refused_where_it_is_missing(servers, tmp_path):
    from nmtserve.server.launcher import ServerError, check_backends

    repo = Path(servers[0].config.model_repository)
    with pytest.raises(ServerError, match=r"generate in .* run on the nmtserve backend .* lacks: install nmtserve_native"):
        check_backends(repo, ["generate", "translate"], tmp_path)
    check_backends(repo, ["translate"], tmp_path)  # nothing there asks for it


@pytest.mark.parametrize("other", [["--three-step-ensemble"], ["--target", "gpu"]])
def test_the_nmtserve_backend_is_refused_where_it_does_not_apply(tmp_path, capsys, other):
    from nmtserve.cli import main

    assert main(["export", str(DEMO), "--repository", str(tmp_path / "r"), "--generate-backend", "nmtserve",
                 *other, *DEMO_ARGS]) != 0
    assert "the nmtserve backend serves" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("backend", [0, 1], ids=["nmtserve", "python"])
def test_a_request_past_its_timeout_stops_decoding(servers, demo_sentences, backend):
    """Triton does not tell an ensemble's step that its client went away: generate drops a request
    once its timeout (Triton's, which the nmtserve client sends) has passed, on both backends."""
    server = servers[backend]
    client = grpcclient.InferenceServerClient(server.urls.grpc_address)
    texts = (demo_sentences * 3)[:1000]  # 2-4 s of decoding on 2 cores
    time.sleep(0.6)
    before = _metric(server, "nmtserve_sentences_total")
    with pytest.raises(InferenceServerException, match="Deadline Exceeded"):
        client.infer("translate", [_tensor(c.TEXT, texts)], timeout=300_000, client_timeout=0.3)
    started = time.monotonic()
    while (_metric(server, "nmtserve_sentences_running") + _metric(server, "nmtserve_sentences_queued") > 0
           or time.monotonic() - started < 0.6):
        assert time.monotonic() - started < 5, "the request decodes on after its timeout"
        time.sleep(0.1)
    assert _metric(server, "nmtserve_sentences_total") - before < 900  # dropped, not decoded to the end
    answer = client.infer("translate", [_tensor(c.TEXT, ["I have 3 cats."])], timeout=5_000_000)
    assert answer.as_numpy(c.TRANSLATION).tolist() == [b"J'ai 3 chats."]
