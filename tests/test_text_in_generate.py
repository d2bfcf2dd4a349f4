"""`translate` as one step (the default), `generate` tokenizing and detokenizing in its own
process, against `nmtserve export --three-step-ensemble` (tokenize -> generate -> detokenize;
issue 49: fewer hops for one sentence).

The contract does not change: on the same demo exported both ways, two real
tritonservers answer the same requests with the same outputs, every one of them (translations,
scores, n-best, cuts, WARNING, alignments, confidences, missing words), and refuse the same bad
requests with the same status and message; documents and callers of `generate` with their own
ids still work.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from nmtserve import contract as c

pytestmark = pytest.mark.server

DEMO = Path(__file__).resolve().parents[1] / "models" / "en-fr-numbers"
DEMO_ARGS = ["--max-target-len", "128", "--max-source-len", "128", "--max-batch", "32", "--skip-parity"]


@pytest.fixture(scope="module")
def servers(demo_repository, tmp_path_factory):
    from nmtserve.cli import main
    from nmtserve.server.launcher import ServerConfig, TritonServer

    repo = tmp_path_factory.mktemp("three-step") / "model_repository"
    assert main(["export", str(DEMO), "--repository", str(repo), "--three-step-ensemble", *DEMO_ARGS]) == 0
    config = (demo_repository / "translate" / "config.pbtxt").read_text()
    assert config.count("model_name:") == 1 and 'model_name: "generate"' in config
    assert (repo / "translate" / "config.pbtxt").read_text().count("model_name:") == 3
    fused = TritonServer(ServerConfig.on_free_ports(demo_repository))
    plain = TritonServer(ServerConfig.on_free_ports(repo))
    with fused, plain:
        fused.wait_until_ready(120)
        plain.wait_until_ready(120)
        yield (grpcclient.InferenceServerClient(fused.urls.grpc_address),
               grpcclient.InferenceServerClient(plain.urls.grpc_address))


def _tensor(name: str, value) -> grpcclient.InferInput:
    array = np.asarray(value)
    if array.dtype.kind in "USO":
        array = np.array([v.encode() if isinstance(v, str) else v for v in array.ravel()], dtype=np.object_).reshape(array.shape)
        dtype = "BYTES"
    else:
        dtype = {"b": "BOOL", "i": "INT32", "f": "FP32"}[array.dtype.kind]
        array = array.astype({"BOOL": np.bool_, "INT32": np.int32, "FP32": np.float32}[dtype])
    x = grpcclient.InferInput(name, list(array.shape), dtype)
    x.set_data_from_numpy(array)
    return x


def _answer(client, model: str, inputs: dict):
    try:
        result = client.infer(model, [_tensor(n, v) for n, v in inputs.items()])
    except InferenceServerException as exc:
        return ("error", exc.status(), exc.message())
    response = result.get_response()
    return {o.name: result.as_numpy(o.name).tolist() for o in response.outputs}


REQUESTS = [
    {c.TEXT: ["I have 3 cats.", "The train leaves at 7 o'clock.", "Paul buys twelve apples."]},
    {c.TEXT: ["She reads 41 books a year."], c.ALIGN: [True], c.CONFIDENCE: [True], c.NUM_HYPOTHESES: [2]},
    {c.TEXT: ["I have 3 cats. The dog sleeps.", "Hello."], c.ALIGN: [True]},
    {c.TEXT: ["I have 3 cats. The dog sleeps."], c.SPLIT_SENTENCES: [False], c.BEAM_SIZE: [2]},
    {c.TEXT: ["I have three cats."], c.TERMS: ['[{"source": "cats", "target": "chiens"}]']},
    {c.TEXT: ["I have three cats."], c.TARGET_PREFIX: ["J'ai"], c.CONFIDENCE: [True]},
    {c.TEXT: ["It costs 375 euros."], c.MAX_LENGTH: [3]},  # cut short: WARNING says so
    # refused, each by a different model of the ensemble's: generate, tokenize, tokenize
    {c.TEXT: ["I have 3 cats."], c.BEAM_SIZE: [99]},
    {c.TEXT: ["x" * 100_000]},
    {c.TEXT: ["I have three cats."], c.TERMS: ["not json"]},
]


@pytest.mark.parametrize("index", range(len(REQUESTS)))
def test_the_one_step_ensemble_answers_as_the_three_step_one(servers, index):
    fused, plain = servers
    want = _answer(plain, "translate", REQUESTS[index])
    got = _answer(fused, "translate", REQUESTS[index])
    assert got == want
    if index < 7:
        assert isinstance(got, dict) and got[c.TRANSLATION] and all(got[c.TRANSLATION])


def test_one_step_serves_documents_and_callers_with_their_own_ids(servers):
    fused, plain = servers
    document = {c.DOCUMENT: ["# Cats\n\nI have 3 cats. The dog sleeps.\n"], c.FORMAT: ["markdown"]}
    assert _answer(fused, "translate_document", document) == _answer(plain, "translate_document", document)
    ids = _answer(plain, "tokenize", {c.TEXT: ["I have 3 cats."]})
    own = {c.SRC_IDS: np.array(ids[c.SRC_IDS], np.int32), c.SRC_LEN: np.array(ids[c.SRC_LEN], np.int32)}
    got, want = _answer(fused, "generate", own), _answer(plain, "generate", own)
    assert got == want and got[c.OUT_IDS]
    missing = _answer(fused, "generate", {c.MAX_LENGTH: [8]})  # neither TEXT nor ids
    assert missing[0] == "error" and "SRC_IDS" in missing[2]


NARROWED = [(c.TRANSLATION,), (c.TRANSLATION, c.SCORE, c.WARNING), (c.NBEST_TRANSLATION, c.NBEST_SCORE),
            (c.ALIGNMENT, c.MISSING_WORDS), (c.SENTENCE_CONFIDENCE, c.WORD_CONFIDENCE), (c.CUTS, c.TRANSLATION),
            (c.WARNING,)]


def _narrowed(client, inputs: dict, outputs: tuple[str, ...]):
    result = client.infer("translate", [_tensor(n, v) for n, v in inputs.items()],
                          parameters={c.OUTPUTS_PARAMETER: ",".join(outputs)})
    return {o.name: result.as_numpy(o.name).tolist() for o in result.get_response().outputs}


@pytest.mark.parametrize("index", range(7))
def test_the_outputs_parameter_computes_those_alone_and_the_same(servers, index):
    """What a request names in its ``outputs`` parameter comes back alone (the rest is not
    computed), each output equal to the one of the request without it, on both layouts."""
    for client in servers:
        full = _answer(client, "translate", REQUESTS[index])
        for outputs in NARROWED:
            assert _narrowed(client, REQUESTS[index], outputs) == {name: full[name] for name in outputs}


def test_the_outputs_parameter_names_outputs_of_the_model(servers):
    for client in servers:
        for value, message in (("TRANSLATON", "names 'TRANSLATON': this model's outputs are TRANSLATION, SCORE"),
                               (" , ", "names no output"), (3, "must be a string of comma-separated output names")):
            with pytest.raises(InferenceServerException, match=message) as refused:
                client.infer("translate", [_tensor(c.TEXT, ["I have 3 cats."])], parameters={c.OUTPUTS_PARAMETER: value})
            assert refused.value.status() == "StatusCode.INVALID_ARGUMENT"
