"""The shared beam search, checked against exhaustive search and a slow reference."""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest

from nmtserve.decoding.search import Candidates, SearchOptions, TargetPrefix, beam_search

BOS, EOS = 1, 2


class PrefixModel:
    """A fake model whose log-probs are a fixed random function of (sentence, prefix).

    It rebuilds every hypothesis' prefix from the search's parents / batch_index, so a search
    that mis-tracks beams gets different log-probs and fails the comparisons below.
    """

    def __init__(self, n_sentences: int, vocab: int, seed: int = 0, eos_boost: float = 0.0):
        self.vocab, self.seed, self.eos_boost = vocab, seed, eos_boost
        self.sentences = list(range(n_sentences))
        self.prefixes: list[list[tuple[int, ...]]] | None = None
        self.calls = 0

    def log_probs(self, sentence: int, prefix: tuple[int, ...]) -> np.ndarray:
        key = zlib.crc32(repr((self.seed, sentence, prefix)).encode())
        logits = np.random.default_rng(key).normal(size=self.vocab) * 2.0
        logits[0] = -np.inf  # pad is never generated, like the real models
        logits[EOS] += self.eos_boost * len(prefix)
        logits -= logits[np.isfinite(logits)].max()
        return logits - np.log(np.exp(logits).sum())

    def step(self, tokens, parents, batch_index):
        self.calls += 1
        if self.prefixes is None:
            self.prefixes = [[() for _ in range(tokens.shape[1])] for _ in self.sentences]
        else:
            self.sentences = [self.sentences[i] for i in batch_index]
            old = [self.prefixes[i] for i in batch_index]
            self.prefixes = [
                [old[b][parents[b, k]] + (int(tokens[b, k]),) for k in range(tokens.shape[1])]
                for b in range(tokens.shape[0])
            ]
        return np.stack([
            np.stack([self.log_probs(s, p) for p in hyps]) for s, hyps in zip(self.sentences, self.prefixes, strict=True)
        ])


def exhaustive(model: PrefixModel, sentence: int, max_len: int, length_penalty: float = 0.0):
    """Every complete sequence (ended by EOS, or cut at max_len) with its normalised score."""
    out = []

    def walk(prefix: tuple[int, ...], total: float):
        lp = model.log_probs(sentence, prefix)
        for tok in range(model.vocab):
            if not np.isfinite(lp[tok]):
                continue
            seq, score = (*prefix, tok), total + lp[tok]
            if tok == EOS or len(seq) == max_len:
                out.append((list(seq), score / len(seq) ** length_penalty))
            else:
                walk(seq, score)

    walk((), 0.0)
    return sorted(out, key=lambda x: -x[1])


def slow_reference(model: PrefixModel, sentence: int, opts: SearchOptions, max_len: int,
                   prompt: tuple[int, ...] = (), forced: tuple[int, ...] = ()):
    """The documented rules, one sentence, plain Python lists: obviously correct, slow.

    As transformers' generate: ``prompt`` = decoder_input_ids after the start token (lengths
    count after it), ``forced`` = tokens forced one per step adding 0 (forced_bos_token_id)."""
    k, lp = opts.beam_size, opts.length_penalty
    running = [(prompt, 0.0)] + [(prompt, -1e9)] * (k - 1)
    finished: list[tuple[list[int], float]] = []
    cap = opts.n_finished
    for t in range(max_len):
        cands = []
        for b, (prefix, score) in enumerate(running):
            if t < len(forced):
                cands.append((score, b, forced[t]))
                continue
            lps = model.log_probs(sentence, prefix)
            if t < opts.min_length:
                lps = lps.copy()
                lps[EOS] = -np.inf
            for tok in range(model.vocab):
                cands.append((score + lps[tok], b, tok))
        cands.sort(key=lambda c: (-c[0], c[1], c[2]))
        cands = cands[: 2 * k]
        gen_len = t + 1
        new_running = []
        for rank, (score, b, tok) in enumerate(cands):
            seq = (*running[b][0], tok)
            if tok == EOS or gen_len == max_len:
                if rank < k and score > -math.inf:
                    norm = score / gen_len**lp
                    if len(finished) < cap or norm > min(f[1] for f in finished):
                        finished.append((list(seq), norm))
                        finished.sort(key=lambda f: -f[1])
                        finished = finished[:cap]
                if tok == EOS:
                    continue
            if len(new_running) < k:
                new_running.append((seq, score))
        if gen_len == max_len:
            break
        running = new_running
        if len(finished) >= cap:
            if opts.early_stopping is True:
                break
            denom = max_len if (opts.early_stopping == "never" and lp > 0) else gen_len
            if running[0][1] / denom**lp <= min(f[1] for f in finished):
                break
    return finished[: opts.num_hypotheses]


def run(model, n, opts, source_lengths=None, prefixes=None):
    lengths = source_lengths if source_lengths is not None else [5] * n
    return beam_search(model, n, lengths, opts, bos_id=BOS, eos_id=EOS, prefixes=prefixes)


@pytest.mark.parametrize("seed", range(6))
def test_wide_beam_with_no_length_penalty_equals_exhaustive_search(seed):
    vocab, max_len = 5, 3  # small enough to enumerate; K=64 exceeds every step's candidates
    opts = SearchOptions(beam_size=64, length_penalty=0.0, max_length=max_len, num_hypotheses=5)
    model = PrefixModel(1, vocab, seed=seed)
    got = run(model, 1, opts)[0]
    want = exhaustive(PrefixModel(1, vocab, seed=seed), 0, max_len)[:5]
    assert [h.tokens for h in got] == [s for s, _ in want]
    assert np.allclose([h.score for h in got], [s for _, s in want])


@pytest.mark.parametrize("seed", range(4))
def test_greedy_equals_argmax_chain(seed):
    model = PrefixModel(1, 7, seed=seed)
    got = run(model, 1, SearchOptions(beam_size=1, max_length=6))[0][0].tokens
    prefix: tuple[int, ...] = ()
    for _ in range(6):
        tok = int(np.argmax(model.log_probs(0, prefix)))
        prefix = (*prefix, tok)
        if tok == EOS:
            break
    assert got == list(prefix)


CASES = [
    dict(beam_size=2),
    dict(beam_size=3, length_penalty=0.6),
    dict(beam_size=4, length_penalty=1.0, num_hypotheses=3),
    dict(beam_size=4, length_penalty=2.0, min_length=3),
    dict(beam_size=3, early_stopping=True),
    dict(beam_size=3, early_stopping="never", length_penalty=1.0),
    dict(beam_size=2, patience=2.0, num_hypotheses=2),
    dict(beam_size=5, length_penalty=-0.5),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
@pytest.mark.parametrize("seed", range(5))
def test_narrow_beams_equal_slow_reference(case, seed):
    max_len = 9
    opts = SearchOptions(max_length=max_len, **case)
    model = PrefixModel(3, 11, seed=seed, eos_boost=0.6)
    got = run(model, 3, opts)
    for s in range(3):
        want = slow_reference(PrefixModel(3, 11, seed=seed, eos_boost=0.6), s, opts, max_len)
        assert [h.tokens for h in got[s]] == [w[0] for w in want], f"sentence {s}"
        assert np.allclose([h.score for h in got[s]], [w[1] for w in want])


@pytest.mark.parametrize("seed", range(4))
def test_batch_result_equals_each_sentence_alone(seed):
    lengths = [2, 9, 4, 1, 6]  # per-sentence max lengths differ through a * len + b
    opts = SearchOptions(beam_size=3, max_length=20, max_length_a=1.0, max_length_b=2, num_hypotheses=2)
    batched = run(PrefixModel(5, 13, seed=seed, eos_boost=0.3), 5, opts, lengths)
    for s in range(5):
        alone_model = PrefixModel(5, 13, seed=seed, eos_boost=0.3)
        alone_model.sentences = [s]
        alone = beam_search(alone_model, 1, [lengths[s]], opts, bos_id=BOS, eos_id=EOS)[0]
        assert [(h.tokens, h.score) for h in batched[s]] == [(h.tokens, h.score) for h in alone]


def test_finished_sentences_leave_the_running_batch():
    seen_rows = []

    class Recorder(PrefixModel):
        def step(self, tokens, parents, batch_index):
            seen_rows.append(tokens.shape[0])
            return super().step(tokens, parents, batch_index)

    lengths = [1, 1, 8]
    opts = SearchOptions(beam_size=2, max_length=30, max_length_a=1.0, max_length_b=1)
    run(Recorder(3, 9, seed=1), 3, opts, lengths)
    assert seen_rows[0] == 3 and seen_rows[-1] == 1


def test_every_sentence_gets_exactly_num_hypotheses():
    opts = SearchOptions(beam_size=4, num_hypotheses=4, max_length=5)
    out = run(PrefixModel(4, 8, seed=3), 4, opts)
    assert [len(h) for h in out] == [4, 4, 4, 4]
    for hyps in out:
        assert all(len(h.tokens) <= 5 for h in hyps)
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)


def test_min_length_forbids_early_eos():
    opts = SearchOptions(beam_size=2, min_length=4, max_length=8)
    model = PrefixModel(2, 6, seed=2, eos_boost=5.0)  # EOS would win at once without min_length
    for hyps in run(model, 2, opts):
        assert all(len(h.tokens) > 4 or h.tokens[-1] != EOS for h in hyps)


@pytest.mark.parametrize(
    "bad", [dict(beam_size=0), dict(num_hypotheses=5, beam_size=4), dict(max_length=0), dict(patience=0),
            dict(min_length=10, max_length=5), dict(early_stopping="sometimes")],
)
def test_bad_options_are_rejected_with_the_reason(bad):
    with pytest.raises(ValueError, match="|".join(bad)):
        SearchOptions(**bad)


def test_max_length_rule():
    opts = SearchOptions(max_length=50, max_length_a=1.5, max_length_b=10)
    assert opts.max_length_for(4) == 16
    assert opts.max_length_for(100) == 50
    assert SearchOptions(max_length=7).max_length_for(1000) == 7


def test_exhaustive_helper_is_complete():
    # sanity of the oracle itself: probabilities of all complete sequences sum to 1
    model = PrefixModel(1, 4, seed=0)
    seqs = exhaustive(model, 0, 3)
    assert math.isclose(sum(math.exp(s) for _, s in seqs), 1.0, rel_tol=1e-9)
    assert len({tuple(s) for s, _ in seqs}) == len(seqs)


# ---- candidates (the served search reads each hypothesis' top 2K+1, not V) ----------------------

def preselect(log_probs, m: int):
    """Top ``m`` tokens per hypothesis of ``log_probs`` (b, K, V), unsorted (argpartition): a
    candidate source other than the graphs' sorted TopK, for the search's generic path. Returns
    ``(values, tokens, ambiguous)``; ``ambiguous`` is set when some row has more entries equal to
    its m-th value than fit, so which were kept is arbitrary: then use the full log-probs.
    None when ``m`` does not leave out any token."""
    vocab = log_probs.shape[-1]
    if m >= vocab:
        return None
    tokens = np.argpartition(-log_probs, m - 1, axis=-1)[..., :m]
    values = np.take_along_axis(log_probs, tokens, axis=-1)
    cut = values.min(axis=-1, keepdims=True)
    # Ties among -inf (pad, masked tokens) cannot matter: such candidates never enter a beam alive.
    ambiguous = ((log_probs >= cut).sum(axis=-1) > m) & np.isfinite(cut[..., 0])
    return values, tokens, ambiguous.any()


class Dense32(PrefixModel):
    """The prefix model's log-probs as float32 (what the graphs return), optionally rounded to
    multiples of ``quantize`` so that exact ties are common."""

    def __init__(self, *args, quantize: float | None = None, **kw):
        super().__init__(*args, **kw)
        self.quantize = quantize

    def log_probs(self, sentence, prefix):
        lp = super().log_probs(sentence, prefix)
        return np.round(lp / self.quantize) * self.quantize if self.quantize else lp

    def step(self, tokens, parents, batch_index):
        return super().step(tokens, parents, batch_index).astype(np.float32)


class Preselecting(Dense32):
    """Hands the search ``Candidates`` (top 2K+1 per hypothesis) instead of the full log-probs,
    as the in-flight batcher does, falling back to the full array when ``preselect`` declines."""

    def __init__(self, *args, beam: int, **kw):
        super().__init__(*args, **kw)
        self.m = 2 * beam + 1
        self.used = self.declined = 0

    def step(self, tokens, parents, batch_index):
        log_probs = super().step(tokens, parents, batch_index)
        picked = preselect(log_probs, self.m)
        if picked is None or picked[2]:
            self.declined += 1
            return log_probs
        self.used += 1
        return Candidates(picked[0], picked[1], self.vocab)


PRESELECT_CASES = [
    dict(beam_size=4, num_hypotheses=2),
    dict(beam_size=3, min_length=4),
    dict(beam_size=2, length_penalty=0.0, early_stopping="never"),
    dict(beam_size=1),
    dict(beam_size=5, patience=2.0, length_penalty=1.3),
]


@pytest.mark.parametrize("case", PRESELECT_CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
@pytest.mark.parametrize("seed", range(4))
def test_preselected_candidates_give_the_same_search(case, seed):
    lengths = [3, 7, 1, 5]
    opts = SearchOptions(max_length=16, max_length_a=1.5, max_length_b=3, **case)
    model = Preselecting(4, 40, seed=seed, eos_boost=0.4, beam=opts.beam_size)
    got = run(model, 4, opts, lengths)
    want = run(Dense32(4, 40, seed=seed, eos_boost=0.4), 4, opts, lengths)
    assert [[(h.tokens, h.score) for h in r] for r in got] == [[(h.tokens, h.score) for h in r] for r in want]
    assert model.used > 0 and model.declined == 0


@pytest.mark.parametrize("seed", range(4))
def test_ties_at_the_cut_off_fall_back_to_the_full_log_probs(seed):
    opts = SearchOptions(beam_size=3, max_length=10, num_hypotheses=3)
    model = Preselecting(3, 30, seed=seed, eos_boost=0.3, beam=3, quantize=0.5)  # many exact ties
    got = run(model, 3, opts)
    want = run(Dense32(3, 30, seed=seed, eos_boost=0.3, quantize=0.5), 3, opts)
    assert [[(h.tokens, h.score) for h in r] for r in got] == [[(h.tokens, h.score) for h in r] for r in want]
    assert model.declined > 0


def test_preselect_flags_a_tie_it_had_to_cut_through():
    log_probs = np.array([[[np.log(0.4), np.log(0.2), np.log(0.2), np.log(0.2), -np.inf]]], dtype=np.float32)
    values, tokens, ambiguous = preselect(log_probs, 2)
    assert bool(ambiguous) and 0 in tokens[0, 0]  # three tied 2nd places, one kept
    values, tokens, ambiguous = preselect(log_probs, 4)  # the whole tie fits; the -inf entry is out
    assert not bool(ambiguous) and sorted(tokens[0, 0].tolist()) == [0, 1, 2, 3]
    assert preselect(log_probs, 5) is None  # nothing left out: use the log-probs themselves


# A target prefix: a forced language token (transformers' forced_bos_token_id: a generated token
# adding 0), or a decoder prompt (decoder_input_ids: not counted in any length), mixed per sentence.
PREFIX_CASES = [
    ((), ()),
    ((), (7,)),
    ((7, 3, 5), ()),
    ((4,), ()),
]


@pytest.mark.parametrize("case", CASES[:5], ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
@pytest.mark.parametrize("seed", range(3))
def test_target_prefixes_equal_slow_reference(case, seed):
    max_len = 8
    opts = SearchOptions(max_length=max_len, **case)
    n = len(PREFIX_CASES)
    prefixes = [TargetPrefix((*prompt, *forced), prompt=len(prompt)) for prompt, forced in PREFIX_CASES]
    got = run(PrefixModel(n, 11, seed=seed, eos_boost=0.6), n, opts, prefixes=prefixes)
    for s, (prompt, forced) in enumerate(PREFIX_CASES):
        want = slow_reference(PrefixModel(n, 11, seed=seed, eos_boost=0.6), s, opts, max_len, prompt, forced)
        assert [h.tokens for h in got[s]] == [[*prompt, *w[0][len(prompt):]] for w in want], f"sentence {s}"
        assert np.allclose([h.score for h in got[s]], [w[1] for w in want])
        assert all(h.tokens[: len(prompt) + len(forced)] == [*prompt, *forced] for h in got[s])


def test_a_forced_token_counts_in_the_length_a_prompt_does_not():
    opts = SearchOptions(beam_size=2, max_length=3)
    model = PrefixModel(2, 9, seed=1)
    forced, prompted = run(model, 2, opts, prefixes=[TargetPrefix((5,)), TargetPrefix((5,), prompt=1)])
    assert max(len(h.tokens) for h in forced) <= 3
    assert all(h.tokens[0] == 5 for h in forced + prompted)
    assert len(prompted[0].tokens) <= 4  # the prompt, then up to max_length generated


def test_a_prefix_holding_eos_is_refused():
    with pytest.raises(ValueError, match="end-of-sentence"):
        run(PrefixModel(1, 9), 1, SearchOptions(beam_size=2, max_length=4), prefixes=[TargetPrefix((3, EOS))])


def random_candidates(rng, b: int, k: int, m: int, ids: np.ndarray, eos: int) -> tuple[np.ndarray, np.ndarray]:
    """A step's ``Candidates`` arrays (b, K, m) for the step-by-step comparisons: log-probs with
    exact ties (across beams and tokens, and equal to a finished hypothesis' score) and -inf
    entries, each hypothesis' ``m`` distinct tokens drawn from ``ids``, EOS often best."""
    values = rng.standard_normal((b, k, m)).astype(np.float32) * 2 - 1
    if rng.random() < 0.7:
        values = np.round(values * 2) / 2 if rng.random() < 0.5 else np.minimum(np.round(values), 0)
    values[rng.random(values.shape) < 0.05] = -np.inf
    tokens = np.stack([rng.permutation(ids)[:m] for _ in range(b * k)]).reshape(b, k, m)
    values[(tokens == eos) & (rng.random(values.shape) < 0.5)] = 0.0  # pools fill up
    return values, tokens


@pytest.mark.parametrize("seed", range(24))
def test_a_few_rows_step_row_by_row_equals_the_vectorized_step(seed):
    """``BeamBatch._advance_few`` (rows in Python, what one sentence at a time runs) against the
    vectorized step on the same candidates: the whole state after every step, with mixed options,
    target prefixes (forced and prompt), exact ties, -inf candidates, sentences joining and leaving."""
    from nmtserve.decoding.search import _ROW_ARRAYS, BeamBatch

    rng = np.random.default_rng(seed)
    k, vocab, eos = int(rng.integers(1, 6)), 19, 2
    m = min(vocab, 2 * k + 1)
    few, vec = (BeamBatch(k, bos_id=1, eos_id=eos, capacity=1, max_steps=4) for _ in range(2))
    few.few_rows, vec.few_rows = 8, 0
    few.native = vec.native = False  # the two Python steps (tests/test_native_search.py: the compiled one)

    def join() -> None:
        n = int(rng.integers(0, 3))
        prefix = TargetPrefix(tuple(int(x) for x in rng.integers(3, vocab, n)), int(rng.integers(0, n + 1)))
        options = SearchOptions(beam_size=k, length_penalty=float(rng.choice([0.0, 0.6, 1.0, 1.3])),
                                early_stopping=[False, True, "never"][int(rng.integers(0, 3))],
                                min_length=int(rng.integers(0, 3)), max_length=int(rng.integers(3, 16)),
                                num_hypotheses=int(rng.integers(1, k + 1)), patience=float(rng.choice([1.0, 1.5])),
                                alignment=bool(rng.random() < 0.5))
        for batch in (few, vec):
            batch.add(options, 5, prefix)

    for _ in range(int(rng.integers(1, 6))):
        join()
    steps = 0
    while few.size and steps < 40:
        b = few.size
        values, tokens = random_candidates(rng, b, k, m, np.arange(vocab), eos)
        attention = rng.integers(0, 5, (b, k)) if few.wants_attention else None  # each beam's source position
        few.advance(Candidates(values, tokens, vocab), attention)
        vec.advance(Candidates(values, tokens, vocab), attention)
        for name in _ROW_ARRAYS:
            np.testing.assert_array_equal(getattr(few, name)[:b], getattr(vec, name)[:b], err_msg=f"{name}, step {steps}")
        assert [[(h.tokens, h.score, h.sum_logprobs, h.alignment) for h in p.hyps] for p in few.pools] == \
               [[(h.tokens, h.score, h.sum_logprobs, h.alignment) for h in p.hyps] for p in vec.pools]
        for opts, pool in zip(few.options, few.pools, strict=True):  # one source position per token, when asked
            assert all((h.alignment is None) != opts.alignment and len(h.alignment or h.tokens) == len(h.tokens)
                       for h in pool.hyps)
        keep = np.flatnonzero(~few.done[:b])
        for batch in (few, vec):
            batch.reorder(keep)
        if rng.random() < 0.2:
            join()
        steps += 1
    assert steps > 2
