"""The short CI version of bench/load.py: 64 concurrent one-sentence clients for 10 s against the
real tritonserver; no crash, no error, every answer its own sentence's reference translation,
bounded memory (the full 256-client, 2-minute run is `python bench/load.py`)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

pytestmark = pytest.mark.server


def test_sixty_four_clients_for_ten_seconds_all_answered_correctly(demo_server, demo_checkpoint, demo_sentences):
    from helpers import DEFAULTS
    from load import run_load

    from nmtserve.model.reference import translate as reference_translate

    texts = demo_sentences[400:464]
    references = [n[0][0] for n in reference_translate(demo_checkpoint.model, demo_checkpoint.tokenizer, texts,
                                                       DEFAULTS)]
    result = run_load(demo_server, texts, references, clients=64, seconds=10)
    summary = result.summary()
    print(summary)
    assert result.server_alive and result.answered > 64
    assert result.wrong == 0 and not result.errors, summary
    assert summary["rss_mb_end"] < 1.5 * summary["rss_mb_start"] + 200, summary  # no growth with the load
