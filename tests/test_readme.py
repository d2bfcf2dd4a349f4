"""The README's examples are tests, and so are those of the pages in docs/: each command, curl and
Python block runs against the served demo model and answers what the page shows under it.

Every fenced block of README.md and of every docs/*.md page (but ARCHITECTURE.md, whose blocks are
diagrams of the code) is accounted for: run here (``RUN``, wherever the block is), or named with
the test that runs it or why it cannot run in CI (``ELSEWHERE``). A new block that is neither fails
``test_every_readme_block_is_run_or_accounted_for``. Every relative link of those pages leads to a
file (and heading) that exists, and the README links every page.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
# docs/ pages whose blocks are not examples (diagrams of the code, kept by hand).
NOT_EXAMPLES = {"ARCHITECTURE.md"}

# First line of a block -> what runs it, where not here.
ELSEWHERE = {
    "bash scripts/demo.sh": "test_demo_script_serves_and_translates_as_expected (below)",
    "checkpoint ──nmtserve export──>": "a diagram",
    "nmtserve export models/en-fr --repository model_repository --pair en-fr": "tests/test_pairs.py (two pairs served; "
                                                                             "opus-mt-en-de cannot be downloaded in CI)",
    "nmtserve export ./nllb-200-distilled-600M": "tests/test_multilingual.py (a tiny NLLB-200; the 600M checkpoint "
                                                 "cannot be downloaded in CI)",
    'with Translator("localhost:8001") as t:': "tests/test_multilingual.py (languages(), per-sentence targets, prefixes)",
    "nmtserve serve --model-repository model_repository --gateway-port 5000": "tests/test_gateway_parts.py",
    "curl -s localhost:5000/translate": "tests/test_gateway.py::test_the_readme_curl_examples_answer_as_shown "
                                        "(docs/gateway.md)",
    "import deepl": "tests/test_gateway.py::test_the_official_clients_of_both_apis",
    "curl -s localhost:5000/v2/glossaries": "tests/test_gateway_glossaries.py::"
                                            "test_the_glossary_curl_examples_answer_as_shown (docs/gateway.md)",
    "nmtserve export CHECKPOINT_DIR --repository": "every served test exports through the CLI (conftest.demo_repository)",
    "nmtserve export CHECKPOINT_DIR --precision int8": "tests/test_quality.py",
    "nmtserve export CHECKPOINT --repository REPO --precision int8 --restrict-vocabulary": (
        "tests/test_vocabulary.py (the option's bilingual and multilingual forms, through the export's options)"),
    "bash scripts/bench.sh": "a benchmark of ~15 minutes (bench/, not a test)",
    "docker build -f docker/Dockerfile.cpu": "tests/test_containers.py (built and run under podman: "
                                             "scripts/container-check.sh)",
    "docker compose -f docker-compose.cpu.yml up": "tests/test_containers.py (podman-compose, the same file)",
    "kubectl apply -k deploy/kubernetes/overlays/cpu": "tests/test_kubernetes.py (kustomize build, strict validation; "
                                                       "no cluster in CI)",
    "nmtserve export models/en-fr-numbers --repository model_repository --target gpu": "tests/test_gpu_deploy.py "
                                                                                       "(compose validated; no GPU)",
    "docker compose run --rm triton nmtserve gpu-check": "tests/test_gpucheck.py (no GPU in CI)",
    "TEXT         I have three red apples.": "tests/test_alignment.py::test_alignment_is_served_in_the_pharaoh_format "
                                             "(a table of tensors, not a command)",
    "nmtserve export path/to/checkpoint --repository model_repository --target gpu": "tests/test_gpu_deploy.py",
    "nmtserve export run/model_step_20000.pt": "tests/test_toolkits.py (OpenNMT-py checkpoints it trained, exported "
                                               "and served)",
    "nmtserve export run/model --repository": "tests/test_toolkits.py (eole directories)",
    "nmtserve export checkpoints/checkpoint_best.pt": "tests/test_toolkits.py (fairseq checkpoints, --tokenizer)",
    "nmtserve export: error: load: rnn.pt": "tests/test_toolkits.py::"
                                            "test_a_checkpoint_nmtserve_cannot_serve_is_refused_naming_every_reason",
    "curl -s localhost:5000/v2/translate -H 'Authorization: DeepL-Auth-Key KEY'": (
        "tests/test_gateway_weblate.py::test_the_weblate_curl_examples_answer_as_shown (docs/gateway.md)"),
    "from nmtserve.documents import XmlRules, segment": (
        "tests/test_documents_xml.py::test_the_documented_example_prints_what_docs_documents_md_shows"),
    "nmtserve translate --url localhost:8001 --document letter.docx": (
        "tests/test_files_served.py::test_the_cli_writes_the_translated_file"),
    'data = open("letter.docx", "rb").read()': (
        "tests/test_files_served.py::test_the_client_translates_each_file_format_whole"),
    "curl -s localhost:5000/v2/document": (
        "tests/test_files_served.py::test_the_gateway_translates_files_for_libretranslate_and_deepl_clients"),
    # docs/importers.md's declaration: the only block of the pages that opens with a brace
    "{": "tests/test_toolkits.py::test_the_documented_declaration_is_the_fixtures",
}
RUN = (
    "curl -s localhost:8000/v2/models/translate/infer",
    "from nmtserve.client import Translator",
    "nmtserve translate --url localhost:8001 < examples/sentences.en",
    "curl -s localhost:8000/v2/models/translate_document/infer",
    'with Translator("localhost:8001") as tr:',
    "nmtserve translate --url localhost:8001 --document --format markdown README.md",
)
FENCED = re.compile(r"^ *```\w*\n(.*?)^ *```", re.MULTILINE | re.DOTALL)


def pages() -> list[Path]:
    """README.md and the pages of docs/ (not docs/notes/) whose blocks are examples."""
    return [README, *sorted(p for p in DOCS.glob("*.md") if p.name not in NOT_EXAMPLES)]


def blocks() -> list[tuple[str, str]]:
    """(page, block) of every fenced block of every page."""
    return [(page.relative_to(ROOT).as_posix(), textwrap.dedent(b).strip("\n"))
            for page in pages() for b in FENCED.findall(page.read_text(encoding="utf-8"))]


def blocks_starting(first_line: str) -> list[str]:
    found = [b for _, b in blocks() if b.startswith(first_line)]
    assert found, f"no page has a block starting {first_line!r}"
    return found


def block(first_line: str) -> str:
    found = blocks_starting(first_line)
    assert len(found) == 1, f"the pages have {len(found)} blocks starting {first_line!r}"
    return found[0]


def test_every_readme_block_is_run_or_accounted_for():
    for page, b in blocks():
        head = b.splitlines()[0]
        assert any(head.startswith(k) for k in (*RUN, *ELSEWHERE)), f"a block nobody runs in {page}: {head!r}"
    for key in (*RUN, *ELSEWHERE):
        assert any(b.startswith(key) for _, b in blocks()), f"no page has a block starting {key!r} any more"


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_link_leads_somewhere_and_the_readme_links_every_page():
    linked = set()
    for page in pages():
        text = FENCED.sub("", page.read_text(encoding="utf-8"))
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            assert resolved.exists(), f"{page.name}: {target} leads nowhere"
            if anchor and resolved.suffix == ".md":
                headings = re.findall(r"^#+ (.+)$", FENCED.sub("", resolved.read_text(encoding="utf-8")), re.MULTILINE)
                assert anchor in {_slug(h) for h in headings}, f"{page.name}: {target} names no heading"
            if page == README:
                linked.add(resolved)
    assert not set(pages()[1:]) - linked, f"pages the README does not link: {set(pages()[1:]) - linked}"


_SHOWN = re.compile(r"# ([A-Z_]+): (\[.*\])$")


def _shown(code: str) -> list[tuple[str, dict[str, list]]]:
    """(a curl command, each output the page shows under it: ``# TRANSLATION: [...]``, and any
    other ``# NAME: [...]`` line after it)."""
    lines = code.replace("\\\n", " ").splitlines()
    out: list[tuple[str, dict[str, list]]] = []
    command = None
    for line in lines:
        shown = _SHOWN.match(line)
        if line.startswith("curl "):
            command = line
        elif shown and command is not None and shown.group(1) == "TRANSLATION":
            out.append((command, {"TRANSLATION": json.loads(shown.group(2))}))
            command = None
        elif shown and out and command is None:
            out[-1][1][shown.group(1)] = json.loads(shown.group(2))
        elif command is not None:
            command += "\n" + line
    return out


def _shown_outputs(code: str) -> list[tuple[str, list[str]]]:
    """(a curl command, the TRANSLATION the page shows under it)."""
    return [(command, shown["TRANSLATION"]) for command, shown in _shown(code)]


def _environment(server) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def _here(code: str, server) -> str:
    http = server.urls.http_address.removeprefix("http://")
    return code.replace("localhost:8000", http).replace("localhost:8001", server.urls.grpc_address)


def _run(command: str, cwd: Path, server, timeout: float = 120) -> subprocess.CompletedProcess:
    done = subprocess.run(["bash", "-c", _here(command, server)], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout, env=_environment(server))
    assert done.returncode == 0, f"{command}\n{done.stderr}"
    return done


@pytest.mark.server
@pytest.mark.parametrize("first_line", ["curl -s localhost:8000/v2/models/translate/infer",
                                        "curl -s localhost:8000/v2/models/translate_document/infer"])
def test_the_curl_examples_answer_what_the_readme_shows(demo_server, tmp_path, first_line):
    for code in blocks_starting(first_line):  # wherever they are: the README or a page of docs/
        examples = _shown(code)
        assert examples, f"no output shown under {first_line}"
        for command, shown in examples:
            answer = json.loads(_run(command, tmp_path, demo_server).stdout)
            outputs = {o["name"]: o["data"] for o in answer["outputs"]}
            for name, data in shown.items():
                assert outputs[name] == data, f"{name} of {command}"


def _example_files(directory: Path) -> None:
    """What the examples read, where they run (the repository root)."""
    (directory / "examples").mkdir()
    shutil.copy(ROOT / "examples" / "sentences.en", directory / "examples" / "sentences.en")
    shutil.copy(README, directory / "README.md")
    (directory / "page.html").write_text('<h1 class="t">the first day</h1><p translate="no">Acme Inc.</p>',
                                         encoding="utf-8")


def _comment_after(code: str, marker: str) -> str:
    line = next(line for line in code.splitlines() if marker in line)
    return line.split("# ", 1)[1].strip()


@pytest.mark.server
def test_the_client_examples_print_what_the_readme_says(demo_server, tmp_path):
    _example_files(tmp_path)
    code = block("from nmtserve.client import Translator")
    out = subprocess.run([sys.executable, "-c", _here(code, demo_server)], capture_output=True, text=True,
                         cwd=tmp_path, timeout=120, env=_environment(demo_server))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == _comment_after(code, "print(tr.translate(")
    references = (ROOT / "examples" / "sentences.fr").read_text(encoding="utf-8").splitlines()
    assert [line.rsplit(" ", 1)[0] for line in lines[1:]] == references
    assert all(float(line.rsplit(" ", 1)[1]) <= 0 for line in lines[1:])

    page = block('with Translator("localhost:8001") as tr:')
    out = subprocess.run([sys.executable, "-c", "from nmtserve.client import Translator\n" + _here(page, demo_server)],
                         capture_output=True, text=True, cwd=tmp_path, timeout=120, env=_environment(demo_server))
    assert out.returncode == 0, out.stderr
    documents = _shown_outputs(next(b for p, b in blocks() if p == "docs/documents.md"
                                    and b.startswith("curl -s localhost:8000/v2/models/translate_document/infer")))
    assert out.stdout.rstrip("\n") == documents[2][1][0]  # the HTML example's translation


@pytest.mark.server
def test_the_cli_examples_write_what_the_readme_says(demo_server, tmp_path):
    _example_files(tmp_path)
    _run(block("nmtserve translate --url localhost:8001 < examples/sentences.en").split("#")[0], tmp_path, demo_server)
    assert (tmp_path / "output.txt").read_text(encoding="utf-8") == (ROOT / "examples" / "sentences.fr").read_text(
        encoding="utf-8")
    done = _run(block("nmtserve translate --url localhost:8001 --document --format markdown README.md"), tmp_path,
                demo_server, timeout=600)
    french = (tmp_path / "README.fr.md").read_text(encoding="utf-8")
    english = README.read_text(encoding="utf-8")
    # The README itself translates: every fenced block and table row count stays, code is untouched.
    assert french.count("```") == english.count("```") and french.count("\n|") == english.count("\n|")
    for code in re.findall(r"^ *```\w*\n.*?^ *```", english, re.MULTILINE | re.DOTALL):
        assert code in french, code
    assert "error" not in done.stderr.lower(), done.stderr


@pytest.mark.server
@pytest.mark.slow
def test_demo_script_serves_and_translates_as_expected(tmp_path):
    from nmtserve.server.launcher import free_port

    env = dict(os.environ)
    env.update(HTTP_PORT=str(free_port()), GRPC_PORT=str(free_port()), METRICS_PORT=str(free_port()),
               GATEWAY_PORT=str(free_port()))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run(["bash", str(ROOT / "scripts" / "demo.sh")], capture_output=True, text=True, timeout=900,
                          env=env, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    expected = len((ROOT / "examples" / "sentences.en").read_text(encoding="utf-8").splitlines())
    assert f"{expected}/{expected} as expected" in done.stdout
