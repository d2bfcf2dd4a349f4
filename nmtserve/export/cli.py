"""``nmtserve export``: argument handling around ``pipeline.export``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..exitcodes import EXIT_ERROR, EXIT_USAGE
from .pipeline import ExportError, ExportOptions, export

LIMITS = ("max_request_sentences", "max_sentence_chars", "max_queued_sentences", "queue_timeout_s")


def _restriction(given: str) -> tuple[str | None, Path]:
    """--restrict-vocabulary's LANG=FILE or FILE (a file whose name holds "=" can be given as ./a=b)."""
    language, sep, path = given.partition("=")
    if not sep or "/" in language or Path(given).exists():
        return None, Path(given)
    return language, Path(path)


def export_main(args: argparse.Namespace) -> int:
    opts = ExportOptions(
        repository=Path(args.repository), name=args.name, target=args.target, precision=args.precision,
        max_batch=args.max_batch, max_source_len=args.max_source_len, max_target_len=args.max_target_len,
        beam_size=args.beam_size, parity_sentences=args.parity_sentences, skip_parity=args.skip_parity,
        step_backend=args.step_backend, graph_models=args.graph_models, text_in_generate=args.text_in_generate,
        generate_backend=args.generate_backend, decoder_graph=args.decoder_graph, pair=args.pair or "",
        max_bleu_drop=args.max_bleu_drop,
        gate_source=args.gate_source, gate_reference=args.gate_reference, gate_sentences=args.gate_sentences,
        gate_source_lang=args.gate_source_lang, gate_target_lang=args.gate_target_lang,
        int8_keep_fp32=tuple(k for k in args.int8_keep_fp32.split(",") if k.strip()),
        limits={name: getattr(args, name) for name in LIMITS if getattr(args, name) is not None},
        tokenizer=args.tokenizer,
        restrict_vocabulary=tuple(_restriction(given) for given in args.restrict_vocabulary),
    )
    try:
        report = export(Path(args.checkpoint), opts)
    except ExportError as exc:
        print(f"nmtserve export: error: {exc}", file=sys.stderr)
        # A checkpoint nmtserve cannot read is the user's input to fix (nothing was written).
        return EXIT_USAGE if exc.unreadable else EXIT_ERROR
    print(report.summary())
    print(f"serve it with: nmtserve serve --model-repository {opts.repository}")
    return 0
