"""The training recipe that produced the shipped demo model (``nmtserve train``).

Everything is generated locally (no downloads): a synthetic English->French corpus
(``corpus.py``), a joint sentencepiece vocabulary, then the paper's recipe scaled down for a
2-core CPU: Adam(0.9, 0.98), inverse-square-root warm-up, label smoothing 0.1, token-bucketed
batches, a wall-clock budget. Writes a checkpoint directory plus its held-out test set.
"""

from __future__ import annotations

import io
import json
import logging
import math
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import sentencepiece as spm
import torch
import torch.nn.functional as F
from tqdm import tqdm

from .. import defaults
from ..decoding.search import SearchOptions
from ..graphs import pad_batch
from ..model.checkpoint import load_checkpoint, save_checkpoint
from ..model.config import TransformerConfig
from ..model.reference import translate
from ..model.tokenizer import Tokenizer
from ..model.transformer import Transformer
from .corpus import build_splits
from .joined import JOINED_KINDS, LEXICON, joined_examples, short_examples
from .typed import typed_examples

log = logging.getLogger(__name__)


@dataclass
class TrainOptions:
    output: Path
    train_size: int = 400_000
    valid_size: int = 500
    test_size: int = 1000
    # Pairs as people type them (typed.py): lower case, no stop, numbers spelled otherwise or in
    # digits, fragments. Added to the training data; a held-out set of them is written beside
    # the checkpoint (typed.en / typed.fr) and some join the validation set.
    typed_train_size: int = 150_000
    typed_valid_size: int = 300
    typed_test_size: int = 1000
    # Pairs as people join them (joined.py): clauses with "and", lists of counted things, dates
    # as "12 march", run-on lines, and the greetings and questions people type first. Held out:
    # a "joined" set (joined.en / joined.fr) and a "first words" set (first.en / first.fr).
    joined_train_size: int = 150_000
    joined_valid_size: int = 200
    joined_test_size: int = 1000
    first_test_size: int = 300
    # Short inputs repeated (joined.short_examples): greetings, questions and numbers alone, the
    # lexicon a person types first; unique sources alone would show each of them about once.
    short_train_size: int = 40_000
    vocab_size: int = 800  # an upper bound: the corpus supports fewer pieces
    # Sized for a 2-core CPU and a ~60 minute budget (~0.4 s a step): d_model 256 trains ~2.5x
    # slower per token, and more steps of the smaller model paid more.
    d_model: int = 192
    h: int = 4
    d_ff: int = 768
    encoder_layers: int = 3
    decoder_layers: int = 3
    # The corpus is systematic and every pair is unique: a few epochs do not overfit, and
    # dropout only slowed convergence (the previous demo, dropout 0.1: 95.9 % exact match).
    dropout: float = 0.0
    batch_tokens: int = 3072  # padded source + target tokens per batch
    lr: float = 1.5e-3  # peak learning rate after warm-up
    warmup_steps: int = 400
    # After warm-up the rate follows a cosine from lr down to min_lr_ratio * lr at max_steps:
    # a fixed budget ends on a low rate instead of the inverse square root's long tail.
    min_lr_ratio: float = 0.02
    label_smoothing: float = 0.1
    # An exponential moving average of the weights over the second half of training; the
    # saved checkpoint is whichever of the raw and averaged weights matches more of the
    # validation set.
    ema_decay: float = 0.998
    max_steps: int = 9000
    # A guard for slower or busy machines, where fewer steps mean a weaker model (resume
    # with --resume); the schedule is by steps, so a stop by time leaves the rate high.
    max_minutes: float = 75.0
    threads: int = 2
    seed: int = 1234
    eval_every: int = 1000
    resume: bool = False  # continue the run saved in `output`


def train_sentencepiece(texts: list[str], vocab_size: int, seed: int) -> bytes:
    """A joint unigram model with nmtserve's fixed special ids (pad 0, bos 1, eos 2, unk 3)."""
    buffer = io.BytesIO()
    random.Random(seed).shuffle(texts)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_writer=buffer,
        vocab_size=vocab_size,
        model_type="unigram",
        character_coverage=1.0,
        pad_id=0, bos_id=1, eos_id=2, unk_id=3,
        input_sentence_size=len(texts),
        shuffle_input_sentence=False,
        num_threads=2,
        # The synthetic corpus has a small vocabulary: take what it supports up to vocab_size.
        hard_vocab_limit=False,
        # One piece per digit: copying "8630" or "5,840.18" digit by digit is what a small model
        # learns reliably (with multi-digit pieces the typed set lost 2-3 % to garbled numbers).
        split_digits=True,
        minloglevel=2,
    )
    return buffer.getvalue()


def _batches(pairs: list[tuple[list[int], list[int]]], batch_tokens: int, rng: random.Random):
    """Endless token-bucketed batches: sort by length, cut by token budget, shuffle the cuts."""
    order = sorted(range(len(pairs)), key=lambda i: (len(pairs[i][0]), len(pairs[i][1])))
    cuts: list[list[int]] = []
    current: list[int] = []
    width = 0  # padded source + target length of the current batch
    for i in order:
        w = max(width, len(pairs[i][0]) + len(pairs[i][1]) + 1)
        if current and w * (len(current) + 1) > batch_tokens:
            cuts.append(current)
            current, w = [], len(pairs[i][0]) + len(pairs[i][1]) + 1
        current.append(i)
        width = w
    if current:
        cuts.append(current)
    while True:
        rng.shuffle(cuts)
        yield from cuts


def _exact_match(model: Transformer, tokenizer: Tokenizer, pairs: list[tuple[str, str]], beam: int) -> tuple[float, list[str]]:
    options = SearchOptions(beam_size=beam, max_length=128, max_length_a=2.0, max_length_b=10)
    out = [n[0][0] for n in translate(model, tokenizer, [s for s, _ in pairs], options, batch_size=64)]
    return sum(o == r for o, (_, r) in zip(out, pairs, strict=True)) / max(1, len(pairs)), out


def _lr_factor(step: int, warmup: int, total: int, floor: float) -> float:
    """Linear warm-up to 1, then a cosine down to ``floor`` at ``total`` (flat after it)."""
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))


@torch.no_grad()
def _update_ema(ema: dict[str, torch.Tensor] | None, model: Transformer, decay: float) -> dict[str, torch.Tensor]:
    state = model.state_dict()
    if ema is None:
        return {k: v.detach().clone() for k, v in state.items()}
    for k, v in state.items():
        if v.is_floating_point():
            ema[k].mul_(decay).add_(v, alpha=1 - decay)
    return ema


def _keep_better_weights(
    model: Transformer, ema: dict[str, torch.Tensor] | None, tokenizer: Tokenizer, valid: list[tuple[str, str]]
) -> dict[str, float | str]:
    """Load the averaged weights into ``model`` if they match more of ``valid`` (beam 4)."""
    raw_em, _ = _exact_match(model, tokenizer, valid, beam=defaults.BEAM_SIZE)
    if ema is None:
        return {"kept": "raw", "valid_exact_match_raw": raw_em}
    raw = {k: v.clone() for k, v in model.state_dict().items()}
    model.load_state_dict(ema)
    ema_em, _ = _exact_match(model, tokenizer, valid, beam=defaults.BEAM_SIZE)
    log.info("valid exact match (beam 4): raw weights %.4f, averaged %.4f", raw_em, ema_em)
    if ema_em < raw_em:
        model.load_state_dict(raw)
    kept = "raw" if ema_em < raw_em else "averaged"
    return {"kept": kept, "valid_exact_match_raw": raw_em, "valid_exact_match_averaged": ema_em}


def _splits(opts: TrainOptions) -> dict[str, list[tuple[str, str]]]:
    """The corpus splits plus the typed and joined ones, every English source in one split only.

    The tidy splits are ``build_splits``' (so the test set of earlier models stays the same);
    the typed held-out pairs come from their own stream (seed + 1) and leave the tidy training
    data, the typed training pairs from another (seed + 2) that skips every held-out source.
    The joined held-out pairs (seed + 3: the joined test and valid sets, then seed + 4: the
    first words, never an entry of the lexicon) and the joined training pairs (seed + 5) follow
    the same rule; the short pairs (seed + 6) repeat, and skip every held-out source.
    """
    splits = build_splits(opts.train_size, opts.valid_size, opts.test_size, opts.seed)
    tidy = {s for name in ("test", "valid") for s, _ in splits[name]}
    held = typed_examples(opts.typed_test_size + opts.typed_valid_size, opts.seed + 1, exclude=tidy)
    splits["typed-test"] = [(e.source, e.target) for e in held[: opts.typed_test_size]]
    splits["typed-valid"] = [(e.source, e.target) for e in held[opts.typed_test_size :]]
    held_sources = tidy | {e.source for e in held}
    joined = joined_examples(opts.joined_test_size + opts.joined_valid_size, opts.seed + 3, exclude=held_sources, kinds=JOINED_KINDS)
    splits["joined-test"] = [(e.source, e.target) for e in joined[: opts.joined_test_size]]
    splits["joined-valid"] = [(e.source, e.target) for e in joined[opts.joined_test_size :]]
    held_sources |= {e.source for e in joined}
    lexicon = {en for en, _ in LEXICON}  # always trained on, never held out
    first = joined_examples(opts.first_test_size, opts.seed + 4, exclude=held_sources | lexicon, kinds=("first",))
    splits["first-test"] = [(e.source, e.target) for e in first]
    held_sources |= {e.source for e in first}
    splits["train"] = [p for p in splits["train"] if p[0] not in held_sources]
    exclude = held_sources | {s for s, _ in splits["train"]}
    splits["typed-train"] = [(e.source, e.target) for e in typed_examples(opts.typed_train_size, opts.seed + 2, exclude=exclude)]
    exclude |= {s for s, _ in splits["typed-train"]}
    splits["joined-train"] = [(e.source, e.target) for e in joined_examples(opts.joined_train_size, opts.seed + 5, exclude=exclude,
                                                                            kinds=JOINED_KINDS)]
    splits["short-train"] = [(e.source, e.target) for e in short_examples(opts.short_train_size, opts.seed + 6, exclude=held_sources)]
    log.info("typed pairs: %d train, %d valid, %d test; joined pairs: %d train, %d valid, %d test, %d first words",
             len(splits["typed-train"]), len(splits["typed-valid"]), len(splits["typed-test"]),
             len(splits["joined-train"]), len(splits["joined-valid"]), len(splits["joined-test"]), len(splits["first-test"]))
    log.info("short pairs (repeated): %d", len(splits["short-train"]))
    return splits


def train(opts: TrainOptions) -> Path:
    torch.manual_seed(opts.seed)
    torch.set_num_threads(opts.threads)
    rng = random.Random(opts.seed)
    started = time.monotonic()
    log.info("generating corpus: %d train / %d valid / %d test pairs", opts.train_size, opts.valid_size, opts.test_size)
    splits = _splits(opts)
    train_pairs = splits["train"]

    out = Path(opts.output)
    out.mkdir(parents=True, exist_ok=True)
    spm_path = out / "source.spm"
    start_step, history, previous_minutes = 0, [], 0.0
    if opts.resume:
        # Continue a run in the same directory: same vocabulary and weights, the learning-rate
        # schedule picks up at the step the previous run stopped.
        ckpt = load_checkpoint(out)
        model, config, tokenizer = ckpt.model, ckpt.config, ckpt.tokenizer
        previous = json.loads((out / "training_log.json").read_text())
        start_step, history, previous_minutes = previous["steps"], previous["history"], previous["train_minutes"]
        vocab_size = config.tgt_vocab_size
    else:
        vocab_texts = [t for p in splits["train"][:50_000] + splits["typed-train"][:10_000] + splits["joined-train"][:10_000]
                       + splits["short-train"][:5_000] for t in p]
        spm_path.write_bytes(train_sentencepiece(vocab_texts, opts.vocab_size, opts.seed))
        vocab_size = spm.SentencePieceProcessor(model_file=str(spm_path)).get_piece_size()
        config = TransformerConfig(
            src_vocab_size=vocab_size, tgt_vocab_size=vocab_size, d_model=opts.d_model, h=opts.h,
            d_ff=opts.d_ff, encoder_layers=opts.encoder_layers, decoder_layers=opts.decoder_layers,
            dropout=opts.dropout, max_positions=256,
        )
        tokenizer = Tokenizer.from_files(spm_path, None, config)
        model = Transformer(config)
    encoded = [(tokenizer.encode(s), tokenizer.encode_target(t)) for s, t in train_pairs + splits["typed-train"] + splits["joined-train"]
               + splits["short-train"]]
    n_params = sum(p.numel() for p in model.parameters())
    log.info("model: %d parameters, vocabulary %d", n_params, vocab_size)

    optimizer = torch.optim.Adam(model.parameters(), lr=opts.lr, betas=(0.9, 0.98), eps=1e-9)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: _lr_factor(s + start_step, opts.warmup_steps, opts.max_steps, opts.min_lr_ratio)
    )
    batches = _batches(encoded, opts.batch_tokens, rng)
    deadline = started + opts.max_minutes * 60
    bar = tqdm(total=opts.max_steps, initial=start_step, desc="train", unit="step", mininterval=5)
    step = start_step
    loss_avg = None
    ema_start = opts.max_steps // 2
    ema: dict[str, torch.Tensor] | None = None
    while step < opts.max_steps and time.monotonic() < deadline:
        model.train()
        idx = next(batches)
        src = torch.from_numpy(pad_batch([encoded[i][0] for i in idx], config.pad_id))
        tgt = torch.from_numpy(pad_batch([[config.bos_id, *encoded[i][1]] for i in idx], config.pad_id))
        logits = model(src, tgt[:, :-1])
        loss = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), tgt[:, 1:].reshape(-1),
            ignore_index=config.pad_id, label_smoothing=opts.label_smoothing,
        )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        step += 1
        if step >= ema_start:
            ema = _update_ema(ema, model, opts.ema_decay)
        loss_avg = loss.item() if loss_avg is None else 0.98 * loss_avg + 0.02 * loss.item()
        bar.update(1)
        bar.set_postfix(loss=f"{loss_avg:.3f}", lr=f"{schedule.get_last_lr()[0]:.2e}", refresh=False)
        if step % opts.eval_every == 0:
            model.eval()
            em, _ = _exact_match(model, tokenizer, splits["valid"][:150] + splits["typed-valid"][:50] + splits["joined-valid"][:50], beam=1)
            elapsed = time.monotonic() - started
            history.append({"step": step, "loss": round(loss_avg, 4), "valid_exact_match_greedy": em, "minutes": round(elapsed / 60, 2)})
            log.info("step %d loss %.3f valid exact match (greedy) %.3f at %.1f min", step, loss_avg, em, elapsed / 60)
    bar.close()
    model.eval()
    selection = _keep_better_weights(model, ema, tokenizer, splits["valid"] + splits["typed-valid"] + splits["joined-valid"])
    save_checkpoint(model, out, spm_path)
    for name, split in (("test", "test"), ("valid", "valid"), ("typed", "typed-test"), ("joined", "joined-test"), ("first", "first-test")):
        (out / f"{name}.en").write_text("".join(s + "\n" for s, _ in splits[split]))
        (out / f"{name}.fr").write_text("".join(t + "\n" for _, t in splits[split]))
    minutes = previous_minutes + (time.monotonic() - started) / 60
    summary = {"steps": step, "train_minutes": round(minutes, 2), "parameters": n_params, "history": history, "selection": selection, "options": {k: str(v) for k, v in asdict(opts).items()}}
    (out / "training_log.json").write_text(json.dumps(summary, indent=2) + "\n")
    log.info("trained %d steps in %.1f min; checkpoint in %s", step, minutes, out)
    return out
