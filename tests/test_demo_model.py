"""The shipped demo model on its two held-out sets, decoded here: the tidy test set of the corpus
(test.en) and inputs as people type them (typed.en, nmtserve/demo/typed.py). The figures must be
the ones eval.json (and so the README) states, and no non-empty input may get an empty translation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DEMO = Path(__file__).resolve().parents[1] / "models" / "en-fr-numbers"


@pytest.fixture(scope="module")
def evaluated(demo_checkpoint, one_torch_thread):
    from nmtserve.model.evaluate import evaluate_checkpoint

    return evaluate_checkpoint(DEMO)


def test_the_figures_are_the_ones_recorded(evaluated):
    recorded = json.loads((DEMO / "eval.json").read_text())
    for entry in (evaluated, evaluated["typed"]):
        entry.pop("decode_seconds")
    for entry in (recorded, recorded["typed"]):
        entry.pop("decode_seconds")
    assert evaluated == recorded


def test_no_input_gets_an_empty_translation(evaluated):
    assert evaluated["empty"] == 0 and evaluated["typed"]["empty"] == 0


def test_the_held_out_sets_are_large_enough_and_the_tidy_one_stays_exact(evaluated):
    assert evaluated["sentences"] >= 1000 and evaluated["typed"]["sentences"] >= 500
    assert evaluated["exact_match"] >= 0.995
