"""The sentences users see first (README, examples/, scripts/demo.sh) come back exactly right.

References are rendered by the corpus generator (nmtserve/demo/showcase.py), not by a model, so
a weaker demo model cannot ship unnoticed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from nmtserve.demo.showcase import EXAMPLES, SHOWCASE

ROOT = Path(__file__).resolve().parents[1]
WRONG_ON_PURPOSE = {"I want five ancient cats."}  # the demo never learned "ancient"


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def test_example_files_are_the_generators_pairs():
    assert _lines(ROOT / "examples" / "sentences.en") == [s for s, _ in EXAMPLES]
    assert _lines(ROOT / "examples" / "sentences.fr") == [t for _, t in EXAMPLES]


def _readme_inputs() -> list[str]:
    # The README and the pages of docs/ it links (their examples are tests/test_readme.py's).
    pages = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "ARCHITECTURE.md")]
    readme = "\n".join(page.read_text(encoding="utf-8") for page in pages)
    # The sentences of the `translate` curl examples (documents are checked in test_document_server.py).
    inputs = [s for data in re.findall(r'"name":"TEXT"[^}]*?"data":(\[[^\]]*\])', readme) for s in json.loads(data)]
    inputs += re.findall(r'\.translate\("([^"]+)"\)', readme)
    return inputs


def test_every_readme_example_is_in_the_showcase():
    from nmtserve.server.protocol import sentences_of

    # A line of several sentences is translated sentence by sentence: each must be in the showcase.
    inputs = [sentence for text in _readme_inputs() for sentence in sentences_of(text)[0]]
    assert len(inputs) >= 3, "the README's examples were not found: update _readme_inputs"
    # What the demo gets wrong on purpose, to show WARNING and confidence (docs/contract.md; the
    # served answer is pinned by tests/test_readme.py like every other).
    assert WRONG_ON_PURPOSE <= set(inputs) and not WRONG_ON_PURPOSE & {s for s, _ in SHOWCASE}
    inputs = [s for s in inputs if s not in WRONG_ON_PURPOSE]
    assert set(inputs) <= {s for s, _ in SHOWCASE}, set(inputs) - {s for s, _ in SHOWCASE}


def test_demo_script_compares_with_the_references():
    script = (ROOT / "scripts" / "demo.sh").read_text(encoding="utf-8")
    assert "examples/sentences.en" in script and "examples/sentences.fr" in script
    assert "as expected" in script


@pytest.mark.server
def test_served_demo_model_translates_the_showcase_exactly(demo_server):
    from nmtserve.client import Translator

    with Translator(demo_server.urls.grpc_address) as client:
        got = [t.text for t in client.translate([s for s, _ in SHOWCASE])]
    wrong = [f"{s!r}: got {g!r}, expected {w!r}" for (s, w), g in zip(SHOWCASE, got, strict=True) if g != w]
    assert not wrong, "the shipped demo model mistranslates its showcase:\n" + "\n".join(wrong)


# An input no model of this size translates whole: 100 clauses, cut to fit the model's limit.
RUN_AWAY = "I have three red apples and " * 100


@pytest.mark.server
def test_what_a_person_types_first_comes_back_right_or_warned(demo_server):
    from nmtserve.client import Translator
    from nmtserve.demo.showcase import FIRST_CONTACT

    with Translator(demo_server.urls.grpc_address) as client:
        got = client.translate([s for s, _ in FIRST_CONTACT] + [RUN_AWAY])
    # Right and unflagged, or flagged: never a wrong translation that nothing marks.
    silent = [f"{s!r}: got {g.text!r}, expected {w!r}, and no warning"
              for (s, w), g in zip(FIRST_CONTACT, got, strict=False) if g.text != w and not g.warning]
    assert not silent, "\n".join(silent)
    right = [s for (s, w), g in zip(FIRST_CONTACT, got, strict=False) if g.text == w]
    assert all(not g.warning for (s, w), g in zip(FIRST_CONTACT, got, strict=False) if g.text == w)
    # "Twelve" is held out (typed.en): the demo writes "Salut" for it, flagged "may be wrong"
    assert len(right) >= len(FIRST_CONTACT) - 1, right
    assert got[-1].warning.startswith("may be incomplete: "), got[-1]


@pytest.mark.server
def test_the_cli_names_a_translation_that_may_be_incomplete_and_exits_4(demo_server, tmp_path):
    import subprocess
    import sys

    from nmtserve.exitcodes import EXIT_INCOMPLETE

    path = tmp_path / "in.txt"
    path.write_text(f"I have three red apples.\n{RUN_AWAY}\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "nmtserve.cli", "translate", "--url", demo_server.urls.grpc_address,
                           "--json", str(path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == EXIT_INCOMPLETE, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    assert records[0]["translation"] == "J'ai trois pommes rouges." and "warning" not in records[0]
    assert records[1]["warning"].startswith("may be incomplete: ")
    assert f"{path}:2: may be incomplete: " in proc.stderr
    assert "1 of 2 translations may be incomplete or wrong" in proc.stderr
