"""The nmtserve client and CLI against the real demo model, checked against the reference decode."""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys

import pytest

from nmtserve.client import AsyncTranslator, Translator
from nmtserve.decoding.search import SearchOptions
from nmtserve.model.reference import translate as reference_translate

pytestmark = pytest.mark.server

DEFAULTS = SearchOptions(beam_size=4, length_penalty=1.0, max_length=128, max_length_a=2.0, max_length_b=10)


@pytest.fixture(scope="module")
def unique(demo_checkpoint, demo_sentences):
    """200 held-out sentences and their reference translations."""
    texts = demo_sentences[100:300]
    out = reference_translate(demo_checkpoint.model, demo_checkpoint.tokenizer, texts, DEFAULTS, batch_size=64)
    return dict(zip(texts, (n[0][0] for n in out), strict=True))


def test_ten_thousand_lines_through_the_cli_keep_count_order_and_content(demo_server, unique, tmp_path):
    rng = random.Random(7)
    sources = list(unique)
    lines = [rng.choice(sources) if rng.random() > 0.02 else "" for _ in range(10_000)]
    path = tmp_path / "in.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "nmtserve.cli", "translate", "--url", demo_server.urls.grpc_address, str(path)],
        capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout.split("\n")
    assert out[-1] == "" and len(out) - 1 == len(lines)
    assert out[:-1] == [unique[line] if line else "" for line in lines]


def test_sync_async_grpc_and_http_clients_agree_with_the_reference(demo_server, unique):
    texts = list(unique)[:40]
    want = [unique[t] for t in texts]
    with Translator(demo_server.urls.grpc_address) as grpc_client:
        assert [t.text for t in grpc_client.translate(texts)] == want
    with Translator(demo_server.urls.http_address, protocol="http", batch_size=7) as http_client:
        assert [t.text for t in http_client.translate(texts)] == want

    async def run():
        async with AsyncTranslator(demo_server.urls.grpc_address, concurrency=8, batch_size=5) as client:
            return await client.translate(texts)

    assert [t.text for t in asyncio.run(run())] == want


def test_single_string_and_nbest(demo_server, unique):
    text = next(iter(unique))
    with Translator(demo_server.urls.grpc_address) as client:
        one = client.translate(text)
        assert one.text == unique[text] and one.score is not None
        nbest = client.translate([text], num_hypotheses=3, all_hypotheses=True)[0]
        assert [h.text for h in nbest.hypotheses][0] == unique[text] and len(nbest.hypotheses) == 3
        plausible = client.translate([text], num_hypotheses=3)[0].hypotheses  # nmtserve.alternatives
        assert plausible[0] == nbest.hypotheses[0] and all(h in nbest.hypotheses for h in plausible)


def test_alignments_through_the_library_and_the_cli(demo_server):
    """``alignment=True`` / ``--json --align``: each translation's word pairs with its input (the
    served ALIGNMENT), a blank line's empty; ``--align`` alone is a usage error naming --json."""
    import json

    with Translator(demo_server.urls.grpc_address) as client:
        done = client.translate(["I have three red apples.", ""], alignment=True)
        plain = client.translate("I have three red apples.")
    assert done[0].text == "J'ai trois pommes rouges."
    assert done[0].alignment == [(0, 0), (1, 0), (2, 1), (4, 2), (3, 3)]
    assert done[1].alignment == []
    assert plain.alignment is None
    command = [sys.executable, "-m", "nmtserve.cli", "translate", "--url", demo_server.urls.grpc_address]
    proc = subprocess.run([*command, "--json", "--align"], input="I have three red apples.\n", capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["alignment"] == [[0, 0], [1, 0], [2, 1], [4, 2], [3, 3]]
    proc = subprocess.run([*command, "--align"], input="I have three red apples.\n", capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and "--json" in proc.stderr
