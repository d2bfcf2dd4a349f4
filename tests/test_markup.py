"""The export's markup probe (nmtserve/export/markup.py): marking, judging, and the demo's verdict."""

from __future__ import annotations

from nmtserve.export import markup


def test_the_middle_word_of_letters_is_marked():
    assert markup.mark("I have three red apples.") == "I have <g1>three</g1> red apples."
    assert markup.mark("The train leaves at 7:45.") == "The train <g1>leaves</g1> at 7:45."
    assert markup.mark("the first") is None and markup.mark("1 2 3") is None


def test_a_translation_keeps_markup_only_with_both_markers_and_the_same_text():
    plain = "J'ai trois pommes rouges."
    assert markup.kept("J'ai <g1>trois</g1> pommes rouges.", plain)
    assert markup.kept("J'ai <g1>trois pommes</g1>  rouges.", plain)
    assert not markup.kept("J'ai <g1>trente</g1> pommes rouges.", plain)  # the number changed
    assert not markup.kept("J'ai trois pommes rouges.", plain)  # markers lost
    assert not markup.kept("J'ai </g1>trois<g1> pommes rouges.", plain)  # out of order
    assert not markup.kept("J'ai <g1>trois</g1> <g1>pommes</g1> rouges.", plain)


def test_the_verdict_needs_the_keep_rate():
    assert markup.MarkupProbe(50, 48).mode == markup.KEEP
    assert markup.MarkupProbe(50, 47).mode == markup.DROP
    assert markup.MarkupProbe(0, 0).mode == markup.DROP and "no held-out sentences" in markup.MarkupProbe(0, 0).summary()


def test_the_demo_model_is_measured_and_drops_placeholders(demo_checkpoint):
    from nmtserve.export import quality
    from nmtserve.model.reference import TorchRuntime

    gate = quality.checkpoint_gate_set(demo_checkpoint.path, 2 * markup.PROBE_SENTENCES)
    runtime = TorchRuntime(demo_checkpoint.model)
    result = markup.probe(gate, runtime, demo_checkpoint.tokenizer, runtime.spec.search_options())
    assert result.sentences == markup.PROBE_SENTENCES
    assert result.mode == markup.DROP and result.kept < markup.KEEP_RATE * result.sentences
    assert f"{result.kept}/{result.sentences} held-out sentences" in result.summary()
