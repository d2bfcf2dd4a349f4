"""``nmtserve``: export | serve | translate | train | bench.

Sub-commands import their dependencies lazily, so ``nmtserve --help`` is instant and a
client-only install (no torch) can still run ``nmtserve translate --url ...``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from . import contract, defaults
from .exitcodes import EXIT_ERROR, EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE  # noqa: F401 - re-exported


def _add_search_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("decoding")
    g.add_argument("--beam-size", type=int, default=None, help=f"beam width (default: the model's, {defaults.BEAM_SIZE})")
    g.add_argument("--nbest", type=int, default=1, help="hypotheses per sentence (<= beam size)")
    g.add_argument("--all-hypotheses", action="store_true",
                   help="with --nbest: every hypothesis the server returned, not only the plausible ones")
    g.add_argument("--length-penalty", type=float, default=None, help="score = sum log p / length**alpha (default 1.0)")
    g.add_argument("--max-length", type=int, default=None, help="max generated tokens per sentence")
    g.add_argument("--min-length", type=int, default=None,
                   help="fewest generated tokens before the end of sentence (CTranslate2's min_decoding_length)")
    g.add_argument("--no-repeat-ngram-size", type=int, default=None, metavar="N",
                   help="no n-gram of N tokens twice in a translation (transformers' no_repeat_ngram_size; 0: off)")
    g.add_argument("--repetition-penalty", type=float, default=None, metavar="THETA",
                   help="a token already in the translation scores log p * THETA (transformers' beam-search "
                        "repetition_penalty; 1: off, 1.2 a usual value)")
    g.add_argument("--disable-unk", action="store_true", help="never generate the unknown token")
    g.add_argument("--suppress-sequence", action="append", default=None, metavar="IDS",
                   help="target token ids that may not appear in this order, \"12 7 33\" (repeatable; "
                        "CTranslate2's suppress_sequences)")
    g.add_argument("--glossary", metavar="FILE",
                   help="terms to keep: a TSV file (source TAB target per line; .csv: CSV). Each source term "
                        "found in a line (any case, whole words, longest first) must come out as its target "
                        "term (constrained beam search); a term the translation lacks is a WARNING, exit 4")


def _cmd_train(args: argparse.Namespace) -> int:
    from .demo.train import TrainOptions, train

    given = {"max_minutes": args.minutes, "train_size": args.train_size, "seed": args.seed, "max_steps": args.max_steps}
    opts = TrainOptions(output=Path(args.output), resume=args.resume, **{k: v for k, v in given.items() if v is not None})
    train(opts)
    if not args.no_eval:
        from .model.evaluate import evaluate_checkpoint

        evaluate_checkpoint(Path(args.output), beam_size=defaults.BEAM_SIZE, write=True)
    return EXIT_OK


def _cmd_translate(args: argparse.Namespace) -> int:
    if args.checkpoint:
        from .model.local import translate_local

        return translate_local(args)
    from .client.cli import translate_remote

    return translate_remote(args)


def _cmd_pairs(args: argparse.Namespace) -> int:
    from .client.cli import list_pairs

    return list_pairs(args)


def _cmd_languages(args: argparse.Namespace) -> int:
    from .client.cli import list_languages

    return list_languages(args)


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from .model.evaluate import evaluate_checkpoint

    evaluate_checkpoint(Path(args.checkpoint), beam_size=args.beam_size or defaults.BEAM_SIZE, write=args.write)
    return EXIT_OK


def _cmd_export(args: argparse.Namespace) -> int:
    from .export.cli import export_main

    return export_main(args)


def _cmd_serve(args: argparse.Namespace) -> int:
    from .server.cli import serve_main

    if args.gateway_port is None:
        return serve_main(args)
    from .gateway.sidecar import gateway_beside

    with gateway_beside(args):
        return serve_main(args)


def _cmd_gateway(args: argparse.Namespace) -> int:
    from .gateway.cli import gateway_main

    return gateway_main(args)


class _DefaultsFormatter(argparse.HelpFormatter):
    """Every option's default in its help line, unless the help already says it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        hidden = default is None or default is False or default == argparse.SUPPRESS
        if "default" in text or hidden or not action.option_strings:
            return text
        return f"{text} (default: %(default)s)" if text else "default: %(default)s"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nmtserve",
        description="Serve encoder-decoder Transformer translation models on NVIDIA Triton.",
        epilog="Run 'nmtserve COMMAND --help' for a command's options.",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    add_parser = sub.add_parser
    sub.add_parser = lambda *a, **kw: add_parser(*a, formatter_class=_DefaultsFormatter, **kw)  # type: ignore[method-assign]

    p = sub.add_parser("train", help="train the demo model on a generated English->French corpus (CPU)")
    p.add_argument("--output", "-o", default="models/en-fr-numbers", help="checkpoint directory to write")
    # Defaults live in TrainOptions (the shipped demo's recipe); None here means "the recipe's".
    p.add_argument("--minutes", type=float, default=None, help="wall-clock guard on training (recipe: 75)")
    p.add_argument("--train-size", type=int, default=None, help="training pairs to generate (recipe: 400,000)")
    p.add_argument("--seed", type=int, default=None, help="corpus and initialisation seed (recipe: 1234)")
    p.add_argument("--max-steps", type=int, default=None,
                   help="optimizer steps; the learning-rate schedule ends here (recipe: 9,000)")
    p.add_argument("--resume", action="store_true", help="continue the run saved in --output")
    p.add_argument("--no-eval", action="store_true", help="skip the test-set evaluation")
    p.set_defaults(func=_cmd_train)

    p = sub.add_parser("evaluate", help="exact match, BLEU and dropped numbers of a checkpoint on its held-out sets")
    p.add_argument("checkpoint")
    p.add_argument("--beam-size", type=int, default=defaults.BEAM_SIZE, help="beam width")
    p.add_argument("--write", action="store_true", help="write eval.json into the checkpoint")
    p.set_defaults(func=_cmd_evaluate)

    p = sub.add_parser(
        "translate", help="translate lines of text (from FILEs or stdin) via a server or a local checkpoint",
        description="Reads lines from FILEs or stdin, writes one translation per line (blank stays blank). "
                    "Exit status: 0 all translated; 1 failed; 2 usage or rejected lines; 3 no server; 4 all "
                    "translated but some may be incomplete or wrong (the server's check named them on stderr: "
                    "a number of the line missing from its translation, a translation far too short, or a "
                    "score far under the model's usual).",
    )
    p.add_argument("files", nargs="*", metavar="FILE")
    p.add_argument("--checkpoint", help="translate locally with the PyTorch reference decode (no server)")
    p.add_argument("--url", action="append", default=None, metavar="URL",
                   help="server address (default localhost:8001 for gRPC, localhost:8000 for HTTP); repeat it or "
                        "separate with commas for several replicas (requests are spread, a failing one is taken out "
                        "and its work re-sent to another); dns:///NAME:PORT uses every address of NAME, re-resolved "
                        "every 30 s (a Kubernetes headless Service); grpcs:// or https:// turns TLS on")
    p.add_argument("--protocol", choices=["grpc", "http"], default="grpc")
    p.add_argument("--model", default=contract.DEFAULT_MODEL, help="Triton model name")
    p.add_argument("--json", action="store_true", help="JSON lines with scores (and n-best)")
    p.add_argument("--batch-size", type=int, default=defaults.CLIENT_BATCH_SIZE, help="sentences per request")
    p.add_argument("--concurrency", type=int, default=defaults.CLIENT_CONCURRENCY, help="requests in flight")
    p.add_argument("--timeout", type=float, default=defaults.CLIENT_TIMEOUT_S, help="per-request timeout, seconds")
    p.add_argument("--no-progress", action="store_true", help="never show a progress bar")
    p.add_argument("--tls", action="store_true", help="TLS with the system's certificate authorities")
    p.add_argument("--tls-ca", metavar="PEM", help="TLS: trust these certificate authorities (implies --tls)")
    p.add_argument("--tls-cert", metavar="PEM", help="TLS: client certificate, for mutual TLS (with --tls-key)")
    p.add_argument("--tls-key", metavar="PEM", help="TLS: the client certificate's private key")
    p.add_argument("--tls-server-name", metavar="NAME",
                   help="TLS: check the server certificate against NAME (replicas found by DNS are dialled by address)")
    p.add_argument("--header", action="append", default=[], metavar="NAME=VALUE",
                   help="send this header with every request (repeatable; e.g. an auth token for a gateway)")
    p.add_argument("--document", action="store_true",
                   help="read all input (FILEs concatenated, or stdin) as ONE document and write its translation: "
                        "the server cuts it into sentences, translates them as one batch and keeps the layout")
    p.add_argument("--format", choices=contract.DOCUMENT_FORMATS, default=None,
                   help="with --document: how to read it (default: from FILE's extension, else plain). Text: "
                        "Markdown structure and code, HTML tags, attributes, code/pre/script/style and "
                        "translate=\"no\" are kept as written. Files (one FILE): " + ", ".join(contract.FILE_FORMATS)
                        + ": runs of formatting, tables, notes, timings, inline codes... are kept")
    p.add_argument("--output", "-o", metavar="OUT",
                   help="with --document: write the translated document or file to OUT (default: stdout)")
    p.add_argument("--on-error", choices=["empty", "skip", "fail"], default="empty",
                   help="a line the server rejects (too long, invalid UTF-8, ...): its error goes to stderr "
                        "naming FILE:LINE and the other lines are translated; empty: an empty output line "
                        "keeps the lines aligned (default); skip: no output line; fail: stop there. "
                        "Exit status 2 when any line was rejected")
    _add_search_options(p)
    p.add_argument("--source-lang", metavar="CODE",
                   help="source language, for a server of several pairs or a multilingual model (en, eng_Latn)")
    p.add_argument("--target-lang", metavar="CODE",
                   help="target language, for a server of several pairs or a multilingual model (fr, fra_Latn; "
                        "`nmtserve languages` lists them)")
    p.add_argument("--target-prefix", metavar="TEXT", default=None,
                   help="every translation starts with TEXT (forced, then decoding continues; not with --document)")
    p.add_argument("--early-stopping", action="store_true",
                   help="stop each sentence's beam search once --beam-size hypotheses have finished (as CTranslate2 "
                        "does): fewer decoding steps; a few translations differ from the default rule's")
    p.add_argument("--align", action="store_true",
                   help="with --json: each record's word alignment to its line, \"alignment\": [[source word, target "
                        "word], ...] counted from 0 over the whitespace-separated words (the contract's ALIGNMENT)")
    p.add_argument("--confidence", action="store_true",
                   help="with --json: the model's confidence in each translation (\"confidence\", 0..1, its tokens' "
                        "geometric mean probability) and per word (\"word_confidence\"; under 0.3: likely wrong); "
                        "with --align too, \"missing_words\": source words nothing in the translation attended to")
    p.add_argument("--no-split-sentences", action="store_true",
                   help="send each line to the model whole; by default the server translates a line of several "
                        "sentences sentence by sentence and joins them with the line's own spacing")
    p.set_defaults(func=_cmd_translate)

    for name, func, text in (("pairs", _cmd_pairs, "list the language pairs a server translates"),
                             ("languages", _cmd_languages, "list the languages a server translates: code to "
                              "pass as --target-lang, ISO 639 code, name")):
        p = sub.add_parser(name, help=text)
        p.add_argument("--url", action="append", default=None, metavar="URL", help="server address (as for translate)")
        p.add_argument("--protocol", choices=["grpc", "http"], default="grpc")
        p.add_argument("--model", default=contract.DEFAULT_MODEL, help="Triton model name")
        p.add_argument("--timeout", type=float, default=10.0, help="seconds")
        if name == "languages":
            p.add_argument("--json", action="store_true", help="JSON lines, with the codes each translates into")
        p.set_defaults(func=func)

    p = sub.add_parser("export", help="export a checkpoint to ONNX (+TensorRT) and write a Triton model repository")
    p.set_defaults(func=_cmd_export, export_parser=p)
    from .model.importers import FORMATS

    p.add_argument("checkpoint", metavar="PATH",
                   help="the checkpoint, a file or a directory; its format is detected. Formats: "
                        + "; ".join(f"{f.name}: {f.title}" for f in FORMATS))
    p.add_argument("--tokenizer", type=Path, default=None, metavar="FILE",
                   help="the sentencepiece model of a checkpoint that does not record one, or records a path "
                        "that is not there (OpenNMT-py, eole, fairseq, torch.nn.Transformer)")
    p.add_argument("--repository", "-r", default="model_repository", help="Triton model repository to write")
    p.add_argument("--name", default=contract.DEFAULT_MODEL, help="name of the ensemble model")
    p.add_argument("--target", choices=["cpu", "gpu"], default="cpu",
                   help="cpu: ONNX Runtime; gpu: TensorRT plans built when the GPU container starts")
    p.add_argument("--precision", choices=["fp32", "int8", "fp16"], default="fp32",
                   help="int8: CPU graphs with int8 weights, written only if they pass the quality gate; "
                        "fp16: TensorRT plans in fp16 (--target gpu), gated at container start (default fp32)")
    p.add_argument("--fp16", action="store_const", dest="precision", const="fp16", help="same as --precision fp16")
    p.add_argument("--max-batch", type=int, default=defaults.MAX_BATCH, help="max sentences per decoding batch")
    p.add_argument("--max-source-len", type=int, default=None, help="max source tokens (default: min(256, model positions))")
    p.add_argument("--max-target-len", type=int, default=None, help="max generated tokens (default: min(256, model positions - 1))")
    p.add_argument("--beam-size", type=int, default=defaults.BEAM_SIZE, help="default beam width served")
    p.add_argument("--step-backend", default="", metavar="{inprocess,tensorrt,onnxruntime-cuda,bls}",
                   help="how generate runs the graphs (default: inprocess on cpu, tensorrt on gpu; "
                        "onnxruntime-cuda: gpu without TensorRT plans; bls: through the encoder/decoder models)")
    g = p.add_argument_group("quality gate (--precision int8 / fp16)")
    g.add_argument("--max-bleu-drop", type=float, default=0.3,
                   help="refuse a reduced precision that loses more BLEU than this against fp32 (default 0.3)")
    g.add_argument("--gate-source", type=Path, default=None, metavar="FILE",
                   help="source sentences to check on, one per line (default: the checkpoint's test.en)")
    g.add_argument("--gate-reference", type=Path, default=None, metavar="FILE",
                   help="their reference translations (without: fp32's translations are the references)")
    g.add_argument("--gate-sentences", type=int, default=500, help="sentences of the gate set used (default 500)")
    g.add_argument("--gate-source-lang", metavar="CODE", default=None,
                   help="a multilingual model: the gate sentences' language (eng_Latn, en)")
    g.add_argument("--gate-target-lang", metavar="CODE", default=None,
                   help="a multilingual model: the language it translates them into (fra_Latn, fr)")
    g.add_argument("--int8-keep-fp32", default="", metavar="GROUPS",
                   help="weights left in fp32, comma-separated: output (vocabulary projection), attention, ffn")
    p.add_argument("--restrict-vocabulary", action="append", default=[], metavar="[LANG=]FILE",
                   help="opt-in, repeatable: decode into a target language with only the tokens its text in FILE "
                        "uses (one sentence a line; a multilingual model names the language: fra_Latn=corpus.fr). "
                        "Faster where the vocabulary projection dominates (NLLB-200), and it changes translations: "
                        "see docs/measurements.md. Applied by the compiled CPU decoder step; NMTSERVE_VOCABULARY=0 "
                        "turns it off at serve time")
    g = p.add_argument_group("serving limits (0: none; over a queue limit the server answers UNAVAILABLE, retryable)")
    g.add_argument("--max-request-sentences", type=int, default=None,
                   help=f"sentences one request may hold (default {defaults.MAX_REQUEST_SENTENCES})")
    g.add_argument("--max-sentence-chars", type=int, default=None,
                   help=f"characters per sentence (default {defaults.MAX_SENTENCE_CHARS})")
    g.add_argument("--max-queued-sentences", type=int, default=None,
                   help="sentences waiting to join the decoding batch before new requests are refused "
                        f"(default {defaults.MAX_QUEUED_SENTENCES})")
    g.add_argument("--queue-timeout-s", type=float, default=None,
                   help=f"seconds a request may wait for decoding to start (default {defaults.QUEUE_TIMEOUT_S:g})")
    p.add_argument("--parity-sentences", type=int, default=50, help="sentences in the ONNX-vs-PyTorch parity check")
    p.add_argument("--skip-parity", action="store_true", help="skip the parity check (not recommended)")
    p.add_argument("--pair", metavar="SRC-TGT", default=None,
                   help="add the model to --repository under this language pair (en-fr): `translate` then routes "
                        "requests by SOURCE_LANG/TARGET_LANG to every pair exported there (CPU target)")
    p.add_argument("--decoder-graph", choices=("fused", "portable"), default="",
                   help="the decoder graph served: fused (ONNX Runtime's fused CPU kernels, about a third of the nodes; "
                        "the default of --target cpu) or portable (standard ONNX, what TensorRT builds; the only one "
                        "of --target gpu)")
    p.add_argument("--three-step-ensemble", dest="text_in_generate", action="store_false",
                   help="serve `translate` as tokenize -> generate -> detokenize, three processes (default: one "
                        "step, `generate` tokenizing and detokenizing itself: a one-sentence request ~10%% sooner)")
    p.add_argument("--generate-backend", choices=("python", "nmtserve"), default="",
                   help="the Triton backend `generate` runs on: nmtserve (nmtserve_native's backend: in the server "
                        "process, no stub and no shared-memory round trip a request; demo served: p50 ~6%% sooner, "
                        "64 one-sentence clients ~10%% more sentences/s; `nmtserve serve` and the CPU image) or "
                        "python (the Python backend: a stub process of its own). Default: nmtserve for --target cpu "
                        "where nmtserve_native has it, else python")
    p.add_argument("--graph-models", action="store_true",
                   help="also serve the encoder/decoder graphs as Triton models `encoder`/`decoder` for custom "
                        "decode loops (CPU target; a process and a copy of the weights each)")

    sub.add_parser("gpu-check", add_help=False,
                   help="check the TensorRT path of an exported GPU repository against ONNX Runtime (in the GPU "
                        "image; `nmtserve gpu-check --help`)")

    p = sub.add_parser(
        "serve", help="start tritonserver on a model repository (CPU here; the GPU container runs it too)",
        description="Runs the real tritonserver shipped in the nvidia-pytriton wheel (or the full Triton install "
                    "named by $NMTSERVE_TRITON_ROOT: the GPU image's /opt/tritonserver) on a repository written by "
                    "`nmtserve export` until Ctrl+C or SIGTERM. Bound to loopback "
                    "unless --host says otherwise; beyond loopback the model-repository, shared-memory, trace "
                    "and logging APIs need the header nmtserve-admin-key: $NMTSERVE_ADMIN_KEY (gRPC metadata "
                    "triton-grpc-protocol-nmtserve-admin-key).",
    )
    p.add_argument("--model-repository", default="model_repository", help="the Triton model repository")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (0.0.0.0: every interface)")
    p.add_argument("--http-port", type=int, default=8000, help="HTTP/REST (KServe v2) port")
    p.add_argument("--grpc-port", type=int, default=8001, help="gRPC port")
    p.add_argument("--metrics-port", type=int, default=8002, help="Prometheus metrics port")
    p.add_argument("--log-verbose", type=int, default=0, help="tritonserver's log verbosity")
    p.add_argument("--console-log", action="store_true",
                   help="copy tritonserver's log to stderr as it comes (a container's log); it is also in the log file")
    p.add_argument("--tritonserver-arg", action="append", default=None, metavar="--OPTION=VALUE",
                   help="pass an option to tritonserver as it is (repeat it), after nmtserve's own")
    p.add_argument("--startup-timeout", type=float, default=None, metavar="S",
                   help="seconds to wait for every model to load (default 120)")
    p.add_argument("--gateway-port", type=int, default=None, metavar="PORT",
                   help="also run `nmtserve gateway` on PORT (5000: LibreTranslate's), bound to --host: the "
                        "LibreTranslate and DeepL APIs and the web page (needs nmtserve[gateway])")
    p.set_defaults(func=_cmd_serve)

    from .gateway import config as gw  # dependency-free: the gateway's defaults

    p = sub.add_parser(
        "gateway", help="LibreTranslate- and DeepL-compatible HTTP APIs and a web page, on top of Triton",
        description="An HTTP service in front of Triton (reached through the nmtserve client: replicas, "
                    "failover, TLS): LibreTranslate's API (/translate, /detect, /languages, /translate_file, ...), "
                    "DeepL's API v2 (/v2/translate, /v2/languages) and a page to translate in at /. "
                    "Needs nmtserve[gateway].",
    )
    p.add_argument("--url", action="append", default=None, metavar="URL",
                   help="Triton's address (default localhost:8001, gRPC); repeat it or separate with commas for "
                        "replicas; dns:///NAME:PORT for every address of NAME; grpcs:// or https:// for TLS")
    p.add_argument("--protocol", choices=["grpc", "http"], default="grpc", help="how to reach Triton")
    p.add_argument("--model", default=contract.DEFAULT_MODEL, help="Triton model name")
    p.add_argument("--host", default=gw.DEFAULT_HOST, help="address to bind (0.0.0.0: every interface)")
    p.add_argument("--port", type=int, default=gw.DEFAULT_PORT, help="port to listen on")
    p.add_argument("--languages", action="append", default=None, metavar="SRC-TGT",
                   help=f"the language pair(s) of a repository exported without --pair (default: "
                        f"{','.join(gw.DEFAULT_UNNAMED_PAIRS)}, the demo's); "
                        "a repository of pairs names its own")
    p.add_argument("--detect-languages", action="append", default=None, metavar="CODES",
                   help="source=auto chooses among these served sources only (en,fr,de; default: all; more than "
                        "8 are detected in Lingua's low-accuracy mode, weaker on short texts)")
    p.add_argument("--api-keys", metavar="FILE",
                   help=f"require an API key: FILE lists one per line, {gw.KEY_LINE} (0: unlimited; - or "
                        "left out: the gateway's limit)")
    p.add_argument("--frontend-timeout", type=int, default=gw.DEFAULT_FRONTEND_TIMEOUT_MS, metavar="MS",
                   help="the page translates after this pause in typing")
    p.add_argument("--files-dir", metavar="DIR", help="where translated files wait for download (default: a temporary directory)")
    p.add_argument("--timeout", type=float, default=gw.DEFAULT_TIMEOUT, help="seconds per request to Triton")
    p.add_argument("--concurrency", type=int, default=gw.DEFAULT_CONCURRENCY, help="requests in flight to Triton")
    p.add_argument("--access-log", action="store_true", help="log every request")
    p.add_argument("--header", action="append", default=[], metavar="NAME=VALUE",
                   help="send this header with every request to Triton (repeatable)")
    p.add_argument("--tls", action="store_true", help="TLS to Triton with the system's certificate authorities")
    p.add_argument("--tls-ca", metavar="PEM", help="TLS: trust these certificate authorities (implies --tls)")
    p.add_argument("--tls-cert", metavar="PEM", help="TLS: client certificate, for mutual TLS (with --tls-key)")
    p.add_argument("--tls-key", metavar="PEM", help="TLS: the client certificate's private key")
    p.add_argument("--tls-server-name", metavar="NAME", help="TLS: check the server certificate against NAME")
    gw.add_limit_arguments(p)  # every limit and timeout (config.Limits): --char-limit, --batch-limit, --header-timeout, ...
    p.set_defaults(func=_cmd_gateway)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["gpu-check"]:  # its own parser (torch-free module, runs in the GPU image)
        from .export.gpucheck import main as gpu_check

        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        return gpu_check(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2) if args.verbose else logging.INFO
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
