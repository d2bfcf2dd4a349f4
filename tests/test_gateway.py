"""The gateway on the demo repository (one model, no language pairs), against a real tritonserver.

Proves: LibreTranslate's routes answer in LibreTranslate's shapes with the demo model's exact
translations (the showcase references), multi-sentence and HTML texts and files go through the
document model and equal what the client gets from it directly; DeepL's routes do the same in
DeepL's shapes; the third-party clients of both APIs (libretranslatepy, DeepL's `deepl`) work
unchanged; with source auto, a text surely in a language the demo does not translate from
(French) is refused naming it, in each API's shape, and short ones are translated as English;
bad input gets each API's error shape and status and the gateway keeps serving; API
keys, rate and character limits hold; with Triton stopped the gateway answers errors at once and
recovers by itself when Triton is back.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import deepl
import pytest
import requests
from gateway_helpers import EXPECTED, running_gateway
from libretranslatepy import LibreTranslateAPI

from nmtserve.alternatives import plausible
from nmtserve.client import Translator
from nmtserve.server.launcher import ServerConfig, TritonServer

pytestmark = pytest.mark.server

ROOT = Path(__file__).resolve().parents[1]
ENGLISH = list(EXPECTED)
ONE, TWO = ENGLISH[0], ENGLISH[2]


@pytest.fixture(scope="module")
def triton(demo_repository):
    server = TritonServer(ServerConfig.on_free_ports(demo_repository))
    server.start()
    try:
        server.wait_until_ready(120)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def gateway(triton, tmp_path_factory):
    with running_gateway(triton.urls.grpc_address, tmp_path_factory.mktemp("gw")) as gw:
        yield gw


@pytest.fixture(scope="module")
def keyed(triton, tmp_path_factory):
    """A second gateway with keys: "slow" 3 requests a minute, "wide" unlimited with its own
    40-character limit, "plain" unlimited with the gateway's 100 characters."""
    directory = tmp_path_factory.mktemp("keyed")
    keys = directory / "keys.txt"
    keys.write_text("# key  requests/min  char limit\nslow 3\nwide 0 40\nplain  # no limits of its own\n", encoding="utf-8")
    with running_gateway(triton.urls.grpc_address, directory, "--api-keys", str(keys), "--char-limit", "100") as gw:
        yield gw


@pytest.fixture(scope="module")
def direct(triton):
    with Translator(triton.urls.grpc_address) as client:
        yield client


def ok(response) -> dict | list:
    assert response.status_code == 200, response.text
    return response.json()


def error(response, status: int, key: str = "error") -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert list(body) == [key] and isinstance(body[key], str), body
    return body[key]


# -- LibreTranslate


def test_translate_json_and_form_give_the_showcase_translations(gateway):
    assert ok(gateway.post("/translate", json={"q": ONE, "source": "en", "target": "fr"})) == {
        "translatedText": EXPECTED[ONE]}
    assert ok(gateway.post("/translate", data={"q": TWO, "source": "en", "target": "fr", "format": "text"})) == {
        "translatedText": EXPECTED[TWO]}
    assert ok(gateway.post("/translate", json={"q": ENGLISH, "source": "en", "target": "fr"})) == {
        "translatedText": [EXPECTED[t] for t in ENGLISH]}


def test_auto_detects_the_served_source_and_alternatives_come_from_the_nbest(gateway, direct):
    got = ok(gateway.post("/translate", json={"q": ONE, "source": "auto", "target": "fr", "alternatives": 2}))
    assert got["translatedText"] == EXPECTED[ONE]
    assert got["detectedLanguage"] == {"confidence": 100.0, "language": "en"}
    assert got["alternatives"] == []  # its lower hypotheses are junk (tests/test_alternatives.py)
    # A question the demo gets wrong: its plausible hypotheses after the best, the right one among them.
    question = "Does he want thirty-one black dogs?"
    got = ok(gateway.post("/translate", json={"q": question, "source": "auto", "target": "fr", "alternatives": 2}))
    nbest = direct.translate([question], num_hypotheses=3, all_hypotheses=True)[0].hypotheses
    texts, scores = [h.text for h in nbest], [h.score for h in nbest]
    want = [texts[i] for i in plausible(texts, scores, question, source_language="en", target_language="fr")[1:]]
    assert got["alternatives"] == want and len(want) == 2
    batch = ok(gateway.post("/translate", json={"q": [ONE, TWO], "source": "auto", "target": "fr"}))
    assert batch["detectedLanguage"] == [{"confidence": 100.0, "language": "en"}] * 2
    assert "alternatives" not in batch


def test_several_sentences_and_html_take_the_document_path(gateway, direct):
    text = f"{ONE} {TWO}\n\n{ENGLISH[3]}\n"
    html = f'<h1 class="t">{ENGLISH[3]}</h1><p translate="no">Acme Inc.</p><p>{ONE}</p>'
    assert ok(gateway.post("/translate", json={"q": text, "source": "en", "target": "fr"}))["translatedText"] == (
        direct.translate_document(text, "plain"))
    assert ok(gateway.post("/translate", json={"q": [html, ONE], "source": "en", "target": "fr", "format": "html"}))[
        "translatedText"] == [direct.translate_document(html, "html"), direct.translate_document(ONE, "html")]
    assert EXPECTED[ONE] in direct.translate_document(text, "plain")


def test_confidence_is_nmtserves_extension_of_libretranslate(gateway, direct):
    """confidence=true: the model's confidence, one per word of translatedText, and the source words
    that may be missing (MISSING_WORDS by the source's own text), as the client gets them."""
    wrong = "I want five ancient cats."  # the demo never learned "ancient": it writes "Je veux cinq sacs."
    texts = [wrong, ONE, f"{ONE} {TWO}\n\n{ENGLISH[3]}"]
    want = direct.translate(texts, confidence=True, alignment=True)
    got = ok(gateway.post("/translate", json={"q": texts, "source": "en", "target": "fr", "confidence": True}))
    plain = ok(gateway.post("/translate", json={"q": texts, "source": "en", "target": "fr"}))
    assert got["translatedText"] == plain["translatedText"] == [t.text for t in want]  # several sentences too
    assert got["confidence"] == [round(t.confidence, 4) for t in want]
    assert got["wordConfidence"] == [[round(c, 2) for c in t.word_confidence] for t in want]
    assert [len(w) for w in got["wordConfidence"]] == [len(t.split()) for t in got["translatedText"]]
    assert got["missingWords"] == [[text.split()[i].strip(".") for i in t.missing_words]
                                   for text, t in zip(texts, want, strict=True)]
    assert got["missingWords"][1:] == [[], []] and got["missingWords"][0]
    assert min(got["wordConfidence"][0]) < 0.1 and "unsure of the word" in got["warnings"][0]
    assert "may be incomplete: it has 2 content words where the source has 3" in got["warnings"][0]
    assert "confidence" not in plain and "wordConfidence" not in plain  # not asked: not there
    one = ok(gateway.post("/translate", data={"q": ONE, "source": "en", "target": "fr", "confidence": "true"}))
    assert one == {"translatedText": EXPECTED[ONE], "confidence": got["confidence"][1],
                   "wordConfidence": got["wordConfidence"][1], "missingWords": []}
    assert error(gateway.post("/translate", json={"q": ONE, "source": "en", "target": "fr", "confidence": "maybe"}),
                 400) == "Invalid request: confidence parameter must be true or false"


def test_languages_detect_settings_and_health(gateway):
    # A repository without pairs: named by --languages, default en-fr (the demo's).
    assert ok(gateway.get("/languages")) == [{"code": "en", "name": "English", "targets": ["fr"]},
                                            {"code": "fr", "name": "French", "targets": []}]
    assert ok(gateway.post("/detect", data={"q": ONE})) == [{"confidence": 100.0, "language": "en"}]
    seen = ok(gateway.post("/detect", data={"q": "Bonjour tout le monde"}))  # not served, still seen
    assert seen[0]["language"] == "fr" and seen[0]["confidence"] > 50, seen
    settings = ok(gateway.get("/frontend/settings"))
    assert settings["language"] == {"source": {"code": "auto", "name": "Auto Detect"},
                                    "target": {"code": "fr", "name": "French"}}
    assert settings["keyRequired"] is False and ".md" in settings["supportedFilesFormat"]
    assert ok(gateway.get("/health")) == {"status": "ok"}
    preflight = requests.options(gateway.url + "/translate", timeout=10, headers={
        "Origin": "moz-extension://abc", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type"})
    assert preflight.status_code == 200 and preflight.headers["access-control-allow-origin"] == "*"
    page = gateway.get("/")
    assert page.status_code == 200 and "/static/app.js" in page.text
    assert "https://" not in page.text + gateway.get("/static/app.js").text + gateway.get("/static/style.css").text
    icon = gateway.get("/favicon.ico")  # browsers ask for it: no 404 in the log
    assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml")


# -- wrong-language input (issue 35): the demo translates from English only


FRENCH = "J'ai trois pommes rouges et le train part à 7 h 45."
NOT_SERVED = "fr is not supported: this looks like French; this server translates from English"


def test_auto_names_a_language_the_server_does_not_translate_from(gateway, tmp_path):
    assert error(gateway.post("/translate", json={"q": FRENCH, "source": "auto", "target": "fr"}), 400).startswith(
        NOT_SERVED)
    seen = ok(gateway.post("/detect", json={"q": FRENCH}))
    assert seen[0]["language"] == "fr" and seen[0]["confidence"] > 90, seen
    batch = gateway.post("/translate", json={"q": [ONE, FRENCH, TWO], "source": "auto", "target": "fr"})
    assert error(batch, 400).startswith(f"q[1]: {NOT_SERVED}")
    upload = gateway.post("/translate_file", files={"file": ("notes.txt", f"{FRENCH}\n".encode())},
                          data={"source": "auto", "target": "fr"})
    assert error(upload, 400).startswith(NOT_SERVED)
    anyway = ok(gateway.post("/translate", json={"q": FRENCH, "source": "en", "target": "fr"}))  # named: translated
    assert isinstance(anyway["translatedText"], str)

    one = gateway.post("/v2/translate", json={"text": [FRENCH], "target_lang": "FR"})
    assert error(one, 400, "message") == ("Value for 'source_lang' not supported: this looks like French; this server "
                                          "translates from English (detected FR; set source_lang to translate it anyway).")
    two = gateway.post("/v2/translate", json={"text": [ONE, FRENCH], "target_lang": "FR"})
    assert error(two, 400, "message").startswith("Value for 'source_lang' not supported: text[1]: this looks like French")
    with pytest.raises(deepl.DeepLException, match="source_lang.*French"):
        deepl.Translator("any-key", server_url=gateway.url).translate_text(FRENCH, target_lang="FR")


@pytest.mark.parametrize("text", ["hello", "twenty", "7:45", "I have 3 apples", "i have 3 apples"])
def test_short_inputs_are_assumed_in_the_served_source(gateway, direct, text):
    got = ok(gateway.post("/translate", json={"q": text, "source": "auto", "target": "fr"}))
    assert got == {"translatedText": direct.translate([text])[0].text,
                   "detectedLanguage": {"confidence": 100.0, "language": "en"}}
    assert ok(gateway.post("/detect", data={"q": text})) == [{"confidence": 100.0, "language": "en"}]
    assert ok(gateway.post("/v2/translate", json={"text": [text], "target_lang": "FR"}))["translations"][0][
        "detected_source_language"] == "EN"


@pytest.mark.parametrize(("name", "fmt", "content"), [
    ("notes.txt", "plain", f"{ONE}\n\n{TWO} {ENGLISH[3]}\n"),
    ("README.md", "markdown", f"# {ENGLISH[3]}\n\n- {ONE}\n- `code` stays\n"),
    ("page.html", "html", f"<h1>{ENGLISH[3]}</h1><p>{ONE}</p>"),
])
def test_translate_file_and_download(gateway, direct, name, fmt, content):
    got = ok(gateway.post("/translate_file", files={"file": (name, content.encode())},
                          data={"source": "en", "target": "fr"}))
    url = got["translatedFileUrl"]
    assert url.startswith(gateway.url + "/download_file/") and url.endswith("." + name)
    download = gateway.get(url[len(gateway.url):])
    assert download.status_code == 200
    assert download.headers["content-disposition"] == f'attachment; filename="{name}"'
    assert download.content.decode() == direct.translate_document(content, fmt)


def readme_curl_examples() -> list[tuple[str, str]]:
    """(command, the output the gateway's page of docs shows under it) of its curl lines."""
    section = (ROOT / "docs" / "gateway.md").read_text(encoding="utf-8")
    lines = "\n".join(re.findall(r"```bash\n(.*?)```", section, re.DOTALL)).replace("\\\n", " ").splitlines()
    # DeepL's document flow needs its letter.docx and the ids it hands out: tests/test_files_served.py
    # runs those lines (test_the_documented_deepl_document_curls_answer_as_shown).
    return [(line, lines[i + 1][2:]) for i, line in enumerate(lines)
            if line.startswith("curl ") and i + 1 < len(lines) and lines[i + 1].startswith("# ")
            and "/v2/document" not in line]


def test_the_readme_curl_examples_answer_as_shown(gateway, tmp_path):
    examples = readme_curl_examples()
    assert len(examples) >= 8
    (tmp_path / "notes.txt").write_text(f"{ENGLISH[9]}\n", encoding="utf-8")
    host = gateway.url.removeprefix("http://")
    for command, shown in examples:
        out = subprocess.run(["bash", "-c", command.replace("localhost:5000", host)], capture_output=True, text=True,
                             timeout=60, cwd=tmp_path)
        assert out.returncode == 0, (command, out.stderr)
        got, want = json.loads(out.stdout), json.loads(shown)
        if "translatedFileUrl" in want:  # a new name each time
            assert list(got) == ["translatedFileUrl"] and got["translatedFileUrl"].endswith(".notes.txt")
        else:
            assert got == want, (command, out.stdout)


# -- DeepL


def test_deepl_translate_json_form_and_languages(gateway):
    want = [EXPECTED[ONE], EXPECTED[TWO]]
    got = ok(gateway.post("/v2/translate", json={"text": [ONE, TWO], "target_lang": "FR"}))
    assert got == {"translations": [{"detected_source_language": "EN", "text": t} for t in want]}
    form = ok(gateway.post("/v2/translate", data=[("text", ONE), ("text", TWO), ("target_lang", "fr"),
                                                  ("source_lang", "EN"), ("show_billed_characters", "1")]))
    assert form == {"translations": [{"detected_source_language": "EN", "text": t, "billed_characters": len(s)}
                                     for t, s in zip(want, [ONE, TWO], strict=True)]}
    assert ok(gateway.get("/v2/languages")) == [{"language": "EN", "name": "English"}]
    assert ok(gateway.get("/v2/languages", params={"type": "target"})) == [
        {"language": "FR", "name": "French", "supports_formality": False}]


@pytest.mark.parametrize(("extra", "status", "message"), [
    ({"split_sentences": 0}, 200, None), ({"split_sentences": 1}, 200, None), ({"split_sentences": "nonewlines"}, 200, None),
    ({"split_sentences": 2}, 400, "Value for 'split_sentences' not supported"),
    ({"formality": "prefer_more"}, 200, None), ({"formality": "default"}, 200, None),
    ({"formality": "more"}, 400, "'formality' is not supported for given 'target_lang'."),
    ({"formality": "very"}, 400, "Value for 'formality' not supported."),
    ({"model_type": "latency_optimized"}, 200, None), ({"model_type": "fastest"}, 400, "Value for 'model_type' not supported."),
    ({"ignore_tags": ["x"]}, 400, "Value for 'ignore_tags' not supported"),
    ({"some_future_parameter": "x"}, 200, None),  # unknown parameters are ignored, as DeepL ignores them
])
def test_deepl_parameters_as_deepl_defines_them(gateway, extra, status, message):
    response = gateway.post("/v2/translate", json={"text": [ONE], "target_lang": "FR", **extra})
    assert response.status_code == status, response.text
    if message is None:
        assert response.json()["translations"][0]["text"] == EXPECTED[ONE]
    else:
        assert message in response.json()["message"]


def test_the_official_clients_of_both_apis(gateway):
    lt = LibreTranslateAPI(gateway.url + "/")
    assert lt.translate(ONE, "en", "fr") == EXPECTED[ONE]
    assert lt.detect(TWO) == [{"confidence": 100.0, "language": "en"}]
    assert [entry["code"] for entry in lt.languages()] == ["en", "fr"]

    translator = deepl.Translator("any-key", server_url=gateway.url)
    results = translator.translate_text([ONE, TWO], target_lang="FR")
    assert [(r.text, r.detected_source_lang) for r in results] == [(EXPECTED[ONE], "EN"), (EXPECTED[TWO], "EN")]
    assert translator.translate_text(ONE, source_lang="EN", target_lang="FR").text == EXPECTED[ONE]
    html = translator.translate_text(f"<p>{ONE}</p>", target_lang="FR", tag_handling="html")
    assert html.text == f"<p>{EXPECTED[ONE]}</p>"
    assert [lang.code for lang in translator.get_source_languages()] == ["EN"]
    assert [lang.code for lang in translator.get_target_languages()] == ["FR"]
    with pytest.raises(deepl.DeepLException, match="Bad request.*target_lang") as info:
        translator.translate_text(ONE, target_lang="DE")
    assert info.value.http_status_code == 400


# -- bad input and faults


@pytest.mark.parametrize(("request_args", "message"), [
    ({"data": "{not json", "headers": {"Content-Type": "application/json"}}, "Invalid JSON format"),
    ({"json": ["a", "list"]}, "Invalid JSON format"),
    ({"json": {"q": "", "source": "en", "target": "fr"}}, "missing q parameter"),
    ({"json": {"q": [], "source": "en", "target": "fr"}}, "missing q parameter"),
    ({"json": {"q": ONE, "target": "fr"}}, "missing source parameter"),
    ({"data": {"q": ONE, "source": "en"}}, "missing target parameter"),
    ({"json": {"q": 5, "source": "en", "target": "fr"}}, "q parameter must be a string or a list of strings"),
    ({"json": {"q": [ONE, 5], "source": "en", "target": "fr"}}, "q parameter must be a string or a list"),
    ({"json": {"q": ONE, "source": 1, "target": "fr"}}, "source parameter must be a string"),
    ({"json": {"q": ONE, "source": "en", "target": "fr", "alternatives": "x"}}, "alternatives parameter is not a number"),
    ({"json": {"q": ONE, "source": "en", "target": "fr", "alternatives": 9}}, "alternatives parameter must be <= 3"),
    ({"json": {"q": ONE, "source": "de", "target": "fr"}}, "de is not supported"),
    ({"json": {"q": ONE, "source": "en", "target": "xx"}}, "xx is not supported"),
    ({"json": {"q": ONE, "source": "fr", "target": "en"}}, "fr is not supported"),
    ({"json": {"q": ONE, "source": "en", "target": "fr", "format": "pdf"}}, "pdf format is not supported"),
    ({"json": {"q": "one" * 400, "source": "en", "target": "fr"}}, "^the text is too long: .* no space to cut it at"),
    ({"json": {"q": [ONE, "one" * 400], "source": "en", "target": "fr"}}, r"q\[1\]: .*too long"),
])
def test_bad_translate_requests_get_400_naming_the_problem(gateway, request_args, message):
    assert re.search(message, error(gateway.post("/translate", **request_args), 400))


def test_bad_files_and_deepl_requests_and_the_gateway_keeps_serving(gateway):
    def upload(name, content, **fields):
        return gateway.post("/translate_file", files={"file": (name, content)},
                            data={"source": "en", "target": "fr", **fields})

    assert "not UTF-8 text" in error(upload("x.txt", bytes(range(256)) * 8), 400)
    assert "binary" in error(upload("x.txt", b"abc\x00def"), 400)
    assert "file format not supported" in error(upload("x.pdf", b"%PDF-1.4"), 400)
    assert "missing file parameter" in error(gateway.post("/translate_file", data={"source": "en", "target": "fr"}), 400)
    assert "es is not supported" in error(upload("x.txt", ONE.encode(), target="es"), 400)
    big = gateway.post("/translate", data="x" * (5 * 1024 * 1024), headers={"Content-Type": "application/json"})
    assert "exceeds the limit" in error(big, 400)
    assert "Invalid filename" in error(gateway.get("/download_file/0123456789abcdef0123456789abcdef.x.txt"), 400)

    assert "'text' not specified" in error(gateway.post("/v2/translate", json={"target_lang": "FR"}), 400, "message")
    assert "'target_lang' not specified" in error(gateway.post("/v2/translate", json={"text": [ONE]}), 400, "message")
    assert "'target_lang' not supported" in error(
        gateway.post("/v2/translate", json={"text": [ONE], "target_lang": "DE"}), 400, "message")
    assert "'source_lang' not supported" in error(
        gateway.post("/v2/translate", json={"text": [ONE], "target_lang": "FR", "source_lang": "JA"}), 400, "message")
    assert "'tag_handling' not supported" in error(
        gateway.post("/v2/translate", json={"text": [ONE], "target_lang": "FR", "tag_handling": "yaml"}), 400, "message")
    assert "'text' not supported" in error(
        gateway.post("/v2/translate", json={"text": [ONE, 3], "target_lang": "FR"}), 400, "message")
    assert ok(gateway.post("/translate", json={"q": ONE, "source": "en", "target": "fr"}))["translatedText"] == (
        EXPECTED[ONE])


def test_api_keys_rate_and_character_limits(keyed):
    body = {"q": ONE, "source": "en", "target": "fr"}
    assert error(keyed.post("/translate", json=body), 403) == "Missing API key"
    assert error(keyed.post("/translate", json={**body, "api_key": "nope"}), 403) == "Invalid API key"
    assert error(keyed.post("/detect", data={"q": ONE}), 403) == "Missing API key"
    assert ok(keyed.get("/languages"))  # listing needs no key, as in LibreTranslate
    settings = ok(keyed.get("/frontend/settings"))
    assert settings["keyRequired"] is True and settings["charLimit"] == 100
    for _ in range(3):
        assert ok(keyed.post("/translate", json={**body, "api_key": "slow"}))["translatedText"] == EXPECTED[ONE]
    assert error(keyed.post("/translate", data={**body, "api_key": "slow"}), 429).startswith("Slowdown: 3 per 1 minute")
    long_text = "one " * 30  # 120 characters
    assert "request (120) exceeds text limit (100)" in error(
        keyed.post("/translate", json={**body, "q": long_text, "api_key": "plain"}), 400)
    assert "exceeds text limit (40)" in error(keyed.post("/translate", json={**body, "q": ONE * 2, "api_key": "wide"}), 400)

    assert error(keyed.post("/v2/translate", json={"text": [ONE], "target_lang": "FR"}), 403, "message")
    auth = {"Authorization": "DeepL-Auth-Key wide"}
    assert ok(keyed.post("/v2/translate", json={"text": [ONE], "target_lang": "FR"}, headers=auth)) == {
        "translations": [{"detected_source_language": "EN", "text": EXPECTED[ONE]}]}
    assert error(keyed.post("/v2/translate", json={"text": [ONE * 2], "target_lang": "FR"}, headers=auth), 413, "message")
    assert deepl.Translator("wide", server_url=keyed.url).translate_text(ONE, target_lang="FR").text == EXPECTED[ONE]
    with pytest.raises(deepl.AuthorizationException):
        deepl.Translator("nope", server_url=keyed.url).translate_text(ONE, target_lang="FR")


def test_triton_stopped_gets_errors_at_once_and_the_gateway_recovers_by_itself(gateway, triton):
    body = {"q": ONE, "source": "en", "target": "fr"}
    assert ok(gateway.post("/translate", json=body))["translatedText"] == EXPECTED[ONE]
    triton.stop()
    try:
        started = time.monotonic()
        message = error(gateway.post("/translate", json=body), 500)
        assert "unavailable" in message and time.monotonic() - started < 15
        assert "unavailable" in error(gateway.post("/v2/translate", json={"text": [ONE], "target_lang": "FR"}),
                                      503, "message")
        assert ok(gateway.get("/languages"))  # the last list read, while the server is away
        assert ok(gateway.get("/health")) == {"status": "ok"}
    finally:
        triton.start()
        triton.wait_until_ready(120)
    deadline = time.monotonic() + 30
    while True:
        response = gateway.post("/translate", json=body)
        if response.status_code == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert ok(response)["translatedText"] == EXPECTED[ONE]
    assert json.loads(gateway.post("/v2/translate", json={"text": [ONE], "target_lang": "FR"}).text)[
        "translations"][0]["text"] == EXPECTED[ONE]


def test_serve_starts_the_gateway_beside_triton_and_stops_it(demo_repository, tmp_path):
    from nmtserve.server.launcher import free_ports

    http, grpc, metrics, port = free_ports(4)
    log = (tmp_path / "serve.log").open("wb")
    serve = subprocess.Popen([sys.executable, "-m", "nmtserve.cli", "serve", "--model-repository", str(demo_repository),
                              "--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics),
                              "--gateway-port", str(port)], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert serve.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                response = requests.post(url + "/translate", json={"q": ONE, "source": "en", "target": "fr"}, timeout=10)
                if response.status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            time.sleep(0.5)
        assert response.json() == {"translatedText": EXPECTED[ONE]}
        assert f"nmtserve gateway: {url}/" in (tmp_path / "serve.log").read_text()
    finally:
        serve.send_signal(signal.SIGINT)
        assert serve.wait(60) == 0
        log.close()
    with pytest.raises(requests.ConnectionError):  # the gateway went with it
        requests.get(url + "/health", timeout=5)
