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


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def test_example_files_are_the_generators_pairs():
    assert _lines(ROOT / "examples" / "sentences.en") == [s for s, _ in EXAMPLES]
    assert _lines(ROOT / "examples" / "sentences.fr") == [t for _, t in EXAMPLES]


def _readme_inputs() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    # The sentences of the `translate` curl examples (documents are checked in test_document_server.py).
    inputs = [s for data in re.findall(r'"name":"TEXT"[^}]*?"data":(\[[^\]]*\])', readme) for s in json.loads(data)]
    inputs += re.findall(r'\.translate\("([^"]+)"\)', readme)
    return inputs


def test_every_readme_example_is_in_the_showcase():
    from nmtserve.server.protocol import sentences_of

    # A line of several sentences is translated sentence by sentence: each must be in the showcase.
    inputs = [sentence for text in _readme_inputs() for sentence in sentences_of(text)[0]]
    assert len(inputs) >= 3, "the README's examples were not found: update _readme_inputs"
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
