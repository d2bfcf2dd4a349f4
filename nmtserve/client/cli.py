"""``nmtserve translate`` against a server: lines in (files or stdin), one translation per line out.

Exit codes: 0 every line translated; 1 the translation failed (timeout, server error); 2 usage
or invalid input (bad option, unreadable file, unknown model, or lines the server rejected); 3
the server could not be reached; 4 every line translated, but the server warned that some
translations may be incomplete or wrong (a number of the input missing, far too short, or a
score far under the model's usual: each is named on stderr as ``FILE:LINE: may be ...``;
``--json`` records carry ``"warning"``). A
failure prints one line on stderr, naming the input line.

A line the server rejects (``--on-error``): ``empty`` (default) writes an empty line in its place
(``--json``: a record with ``"error"``), ``skip`` writes nothing for it, ``fail`` stops there
(every line before it is written). Either way its error goes to stderr as ``FILE:LINE: message``,
the other lines are translated and written in input order, and the exit status is 2.
"""

from __future__ import annotations

import argparse
import bisect
import json
import logging
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any, TextIO

from ..contract import UNKNOWN_LANGUAGE
from ..exitcodes import EXIT_ERROR, EXIT_INCOMPLETE, EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE
from ..languages import Language
from . import _constants as C
from ._base import languages_of_pairs
from ._protocol import Options, Translation
from ._sync import Translator
from ._transports import TLS
from .errors import (
    InvalidInputError,
    ModelNotFoundError,
    ProtocolMismatchError,
    ServerUnavailableError,
    TranslationError,
    describe_indices,
    local_message,
)

PROG = "nmtserve translate"
STDIN_NAME = "<stdin>"


class UsageError(Exception):
    """A problem with the command line or the input files (exit code 2)."""


def exit_code(error: TranslationError) -> int:
    if isinstance(error, ServerUnavailableError):
        return EXIT_UNAVAILABLE
    if isinstance(error, (InvalidInputError, ModelNotFoundError)):
        return EXIT_USAGE
    return EXIT_ERROR


# --------------------------------------------------------------------------------------------
# Input


@dataclass
class Lines:
    """The input lines of all sources, and which source and line each came from."""

    lines: list[str] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)  # index of each source's first line
    names: list[str] = field(default_factory=list)

    def add(self, name: str, data: bytes) -> None:
        # utf-8-sig: a byte-order mark (Windows editors) is not part of the first sentence. A line
        # that is not UTF-8 keeps its bytes as lone surrogates: the client rejects that line alone
        # (named FILE:LINE, as --on-error says) and translates the others.
        text = data.decode("utf-8-sig", errors="surrogateescape")
        lines = text.split("\n")
        if lines[-1] == "":
            lines.pop()  # the newline that ends the last line does not start another
        self.starts.append(len(self.lines))
        self.names.append(name)
        self.lines.extend(line.removesuffix("\r") for line in lines)

    def where(self, index: int) -> str:
        """ "file:line" of the input sentence at index."""
        source = bisect.bisect_right(self.starts, index) - 1
        return f"{self.names[source]}:{index - self.starts[source] + 1}"

    def describe(self, indices: Iterable[int]) -> str:
        indices = sorted(indices)
        if len(self.names) == 1:
            lines = "lines" if len(indices) > 1 else "line"
            return f"{self.names[0]} {lines} {describe_indices(i + 1 for i in indices)}"
        more = f" and {len(indices) - 1} more" if len(indices) > 1 else ""
        return f"{self.where(indices[0])}{more}"


def read_inputs(files: list[str], stdin: TextIO) -> Lines:
    inputs = Lines()
    for name in files or ["-"]:
        if name == "-":
            stream = getattr(stdin, "buffer", None)
            data = stream.read() if stream is not None else stdin.read().encode("utf-8")
            inputs.add(STDIN_NAME, data)
            continue
        try:
            with open(name, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise UsageError(f"cannot read {name}: {exc.strerror or exc}") from None
        inputs.add(name, data)
    return inputs


# --------------------------------------------------------------------------------------------
# Output


def _one_line(text: str) -> str:
    # One output line per input line, whatever the model produced.
    return " ".join(text.splitlines()) if "\n" in text or "\r" in text else text


def format_line(source: str, translation: Translation, as_json: bool) -> str:
    """Plain: the translation (with n-best: the hypotheses, best first, tab-separated); JSON: a record."""
    if not as_json:
        if translation.hypotheses:
            return "\t".join(_one_line(h.text).replace("\t", " ") for h in translation.hypotheses)
        return _one_line(translation.text)
    record: dict[str, Any] = {
        "source": source,
        "translation": translation.text,
        "score": translation.score,
    }
    if translation.error is not None:
        record["error"] = translation.error.message
    if translation.warning:
        record["warning"] = translation.warning
    if translation.alignment is not None:
        record["alignment"] = [list(pair) for pair in translation.alignment]
    if translation.confidence is not None:
        record["confidence"] = round(translation.confidence, 4)
        record["word_confidence"] = translation.word_confidence
    if translation.missing_words is not None:
        record["missing_words"] = translation.missing_words
    if translation.hypotheses is not None:
        record["nbest"] = [
            {"translation": h.text, "score": h.score} for h in translation.hypotheses
        ]
    return json.dumps(record, ensure_ascii=False)


def _progress(total: int, stderr: TextIO, disabled: bool) -> Any:
    """A tqdm bar, or None when it should not be shown (see _constants)."""
    if disabled or total < C.PROGRESS_MIN_SENTENCES:
        return None
    tty = _isatty(stderr)
    if not tty and total < C.PROGRESS_LARGE_INPUT:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(
        total=total,
        unit="sent",
        file=stderr,
        dynamic_ncols=True,
        mininterval=0.1 if tty else C.PROGRESS_LOG_INTERVAL,
        leave=False,
    )


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


# --------------------------------------------------------------------------------------------
# The command


def _options(args: argparse.Namespace) -> tuple[Options, dict[str, Any]]:
    for name in ("batch_size", "concurrency"):
        value = getattr(args, name)
        if value < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    if not args.timeout > 0:
        raise UsageError(f"--timeout must be a positive number of seconds, got {args.timeout}")
    if (getattr(args, "output", None) or getattr(args, "format", None)) and not getattr(args, "document", False):
        raise UsageError("--output and --format are for --document (a whole document or file)")
    if getattr(args, "confidence", False) and not args.json:
        raise UsageError("--confidence writes each line's confidence into its --json record: add --json")
    if getattr(args, "align", False) and not args.json and not getattr(args, "document", False):
        raise UsageError("--align writes each line's alignment into its --json record: add --json")
    try:
        options = Options(args.beam_size, args.max_length, args.length_penalty, args.nbest,
                          getattr(args, "source_lang", None), getattr(args, "target_lang", None),
                          getattr(args, "target_prefix", None), not getattr(args, "no_split_sentences", False),
                          True if getattr(args, "early_stopping", False) else None,
                          # --all-hypotheses (nmtserve/cli.py): the n-best unfiltered
                          bool(getattr(args, "all_hypotheses", False)),
                          alignment=bool(getattr(args, "align", False)),
                          confidence=bool(getattr(args, "confidence", False)),
                          no_repeat_ngram_size=getattr(args, "no_repeat_ngram_size", None),
                          repetition_penalty=getattr(args, "repetition_penalty", None),
                          min_length=getattr(args, "min_length", None),
                          disable_unk=bool(getattr(args, "disable_unk", False)),
                          suppress_sequences=_suppressed(getattr(args, "suppress_sequence", None)),
                          glossary=_glossary(getattr(args, "glossary", None)))
    except InvalidInputError as exc:
        # Name the flags the user typed, not the library's parameters.
        message = str(exc)
        for param, flag in (
            ("num_hypotheses", "--nbest"),
            ("beam_size", "--beam-size"),
            ("max_length", "--max-length"),
            ("length_penalty", "--length-penalty"),
            ("source_lang", "--source-lang"),
            ("target_lang", "--target-lang"),
            ("target_prefix", "--target-prefix"),
            ("no_repeat_ngram_size", "--no-repeat-ngram-size"),
            ("repetition_penalty", "--repetition-penalty"),
            ("min_length", "--min-length"),
            ("suppress_sequences", "--suppress-sequence"),
        ):
            message = message.replace(param, flag)
        raise UsageError(message) from None
    translator_args = {
        **connection(args),
        "protocol": args.protocol,
        "model": args.model,
        "timeout": args.timeout,
        "batch_size": args.batch_size,
        "concurrency": args.concurrency,
    }
    return options, translator_args


def _glossary(path: str | None) -> dict[str, str] | None:
    if path is None:
        return None
    from ..glossary import read_glossary

    try:
        return read_glossary(path)
    except ValueError as exc:
        raise UsageError(f"--glossary: {exc}") from None


def _suppressed(given: list[str] | None) -> tuple[tuple[int, ...], ...]:
    """``--suppress-sequence "ID ID ..."`` (repeatable) as token id sequences."""
    try:
        return tuple(tuple(int(x) for x in item.replace(",", " ").split()) for item in given or [])
    except ValueError:
        raise UsageError(f"--suppress-sequence takes target token ids (\"12 7 33\"), got {given!r}") from None


def connection(args: argparse.Namespace) -> dict[str, Any]:
    """The ``Translator`` arguments of the connection options client commands share (``--url``,
    repeatable or comma-separated; ``--header NAME=VALUE``; ``--tls*``); UsageError names a bad one.
    ``nmtserve translate`` and ``nmtserve gateway`` read them through this."""
    headers = {}
    for item in getattr(args, "header", []) or []:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"--header takes NAME=VALUE, got {item!r}")
        headers[name.strip()] = value
    # url None: localhost on the protocol's default port; several: replicas.
    return {"url": _urls(getattr(args, "url", None)), "headers": headers or None, "tls": _tls(args)}


def _urls(given: str | list[str] | None) -> list[str] | None:
    if given is None or isinstance(given, str):
        return None if given is None else [given]
    return [u for item in given for u in item.split(",")]


def _tls(args: argparse.Namespace) -> TLS | None:
    files = {"ca": getattr(args, "tls_ca", None), "cert": getattr(args, "tls_cert", None),
             "key": getattr(args, "tls_key", None), "server_name": getattr(args, "tls_server_name", None)}
    if not getattr(args, "tls", False) and not any(files.values()):
        return None  # a grpcs:// or https:// URL still turns it on
    try:
        return TLS(**files)
    except ValueError as exc:
        raise UsageError(str(exc).replace("cert and key", "--tls-cert and --tls-key")) from None


def translate_remote(
    args: argparse.Namespace,
    *,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run ``nmtserve translate`` (without --checkpoint); return the exit code."""
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    if not getattr(args, "verbose", 0):
        # Retries are logged at INFO; the CLI's one error line says what the outcome was.
        logging.getLogger("nmtserve.client").setLevel(logging.WARNING)
    for stream in (stdout, stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(encoding="utf-8")  # type: ignore[union-attr]

    inputs: Lines | None = None
    try:
        options, translator_args = _options(args)
        try:
            translator = Translator(**translator_args)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        with translator:
            if getattr(args, "document", False):
                return _translate_document(translator, options, args, stdin, stdout)
            if not args.files and _isatty(stdin):
                return _interactive(translator, options, args.json, stdin, stdout, stderr)
            inputs = read_inputs(args.files, stdin)
            rejected, warned = _translate_all(translator, options, inputs, args, stdout, stderr)
        if rejected:
            if getattr(args, "on_error", "fail") != "fail":
                _report(stderr, f"{rejected} of {len(inputs.lines)} lines rejected (see above)")
            return EXIT_USAGE
        if warned:
            _report(stderr, f"{warned} of {len(inputs.lines)} translations may be incomplete or wrong (see "
                            "above): check them before use", level="warning")
            return EXIT_INCOMPLETE
        return EXIT_OK
    except UsageError as exc:
        _report(stderr, str(exc))
        return EXIT_USAGE
    except TranslationError as exc:
        _report(stderr, _describe(exc, inputs))
        return exit_code(exc)
    except BrokenPipeError:
        # The reader went away (`| head`): not an error of ours. Point stdout at /dev/null so
        # that the interpreter's final flush does not complain again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, stdout.fileno())
        except (AttributeError, OSError, ValueError):
            pass
        return EXIT_OK


def _ask(args: argparse.Namespace, stderr: TextIO, question: Callable[[Translator], Any],
         prog: str = PROG) -> tuple[int, Any]:
    """(exit status, answer) of one question to the server (its configuration); errors are
    reported under ``prog``, the command's own name."""
    try:
        with Translator(_urls(args.url), protocol=args.protocol, model=args.model, timeout=args.timeout) as translator:
            return EXIT_OK, question(translator)
    except ValueError as exc:
        _report(stderr, str(exc), prog)
        return EXIT_USAGE, None
    except TranslationError as exc:
        _report(stderr, str(exc), prog)
        return exit_code(exc), None


def list_pairs(args: argparse.Namespace, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """``nmtserve pairs``: one pair per line (a one-model server: its model's pair; a multilingual
    model: a pointer to ``nmtserve languages`` on stderr)."""
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    code, pairs = _ask(args, stderr, Translator.pairs, "nmtserve pairs")
    if code != EXIT_OK:
        return code
    if not pairs:
        stderr.write(f"{args.model} names no language pair: a multilingual model translates between its "
                     "languages (`nmtserve languages` lists them), an older export names none\n")
    stdout.write("".join(p + "\n" for p in pairs))
    return EXIT_OK


def _pair_languages(pairs: list[str]) -> list[Language]:
    """The languages of a one-model server's pair ("en-fr": en into fr, and fr), [] when its
    checkpoint does not name both sides."""
    return languages_of_pairs(p for p in pairs if "-" in p and UNKNOWN_LANGUAGE not in p.split("-", 1))


def list_languages(args: argparse.Namespace, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """``nmtserve languages``: one language per line, tab-separated: the code to pass as
    --source-lang / --target-lang, its ISO 639 code, its English name (--json: one object per line,
    with the codes it translates into)."""
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    prog = "nmtserve languages"
    code, languages = _ask(args, stderr, lambda t: t.languages() or _pair_languages(t.pairs()), prog)
    if code != EXIT_OK:
        return code
    if not languages:
        _report(stderr, f"{args.model} serves one model whose checkpoint names neither of its languages "
                        "(export it with --pair SRC-TGT to name them)", prog)
        return EXIT_ERROR
    for lang in languages:
        if args.json:
            stdout.write(json.dumps({"code": lang.code, "iso": lang.iso, "name": lang.name,
                                     "targets": list(lang.targets)}, ensure_ascii=False) + "\n")
        else:
            stdout.write(f"{lang.code}\t{lang.iso}\t{lang.name}\n")
    return EXIT_OK


def _translate_document(
    translator: Translator, options: Options, args: argparse.Namespace, stdin: TextIO, stdout: TextIO
) -> int:
    if options.nbest or args.json or options.target_prefix is not None or options.alignment or options.confidence:
        raise UsageError("--document writes the translated document: --nbest, --json, --align, --confidence and --target-prefix "
                         "do not apply")
    if (options.no_repeat_ngram_size, options.repetition_penalty, options.min_length) != (None, None, None) or \
            options.disable_unk or options.suppress_sequences or options.glossary:
        raise UsageError("--document decodes with the server's defaults: --no-repeat-ngram-size, --repetition-penalty, "
                         "--min-length, --disable-unk, --suppress-sequence and --glossary apply to sentences only")
    target_lang = options.target_lang if isinstance(options.target_lang, str) or options.target_lang is None else None
    fmt = args.format
    if fmt is None:
        fmt = (C.document_format_of(args.files[0]) if args.files else None) or "plain"
    decoding = dict(beam_size=options.beam_size, max_length=options.max_length,
                    length_penalty=options.length_penalty, source_lang=options.source_lang, target_lang=target_lang)
    if fmt in C.FILE_FORMATS:
        if len(args.files) != 1:
            raise UsageError(f"--document with a {fmt} file takes exactly one FILE, got {len(args.files)}")
        try:
            with open(args.files[0], "rb") as f:
                data = f.read()
        except OSError as exc:
            raise UsageError(f"cannot read {args.files[0]}: {exc}") from None
        with _Elapsed(f"translating {os.path.basename(args.files[0])} ({_size(len(data))})"):
            translated = translator.translate_document(data, fmt, **decoding)
        assert isinstance(translated, bytes)
        if args.output:
            _write_output(args.output, translated)
        else:
            binary = getattr(stdout, "buffer", None)
            if binary is None or (hasattr(stdout, "isatty") and stdout.isatty()):
                raise UsageError(f"a translated {fmt} file is binary: give -o OUT to write it")
            stdout.flush()
            binary.write(translated)
            binary.flush()
        return EXIT_OK
    if args.files:
        parts = []
        for name in args.files:
            try:
                with open(name, encoding="utf-8", newline="") as f:
                    parts.append(f.read())
            except (OSError, UnicodeDecodeError) as exc:
                raise UsageError(f"cannot read {name}: {exc}") from None
        text = "".join(parts)
    else:
        text = stdin.read()
    with _Elapsed(f"translating the {fmt} document ({_size(len(text.encode('utf-8')))})"):
        out = translator.translate_document(text, fmt, **decoding)
    assert isinstance(out, str)
    if args.output:
        _write_output(args.output, out.encode("utf-8"))
    else:
        stdout.write(out)
        stdout.flush()
    return EXIT_OK


class _Elapsed:
    """While a long request runs, a line on a terminal's stderr says for how long (the server
    answers a document whole: there is no fraction to show). Nothing when stderr is not a terminal."""

    def __init__(self, what: str) -> None:
        import threading

        self.what, self.done = what, threading.Event()
        self.thread = threading.Thread(target=self._tick, daemon=True) if sys.stderr.isatty() else None

    def __enter__(self) -> _Elapsed:
        if self.thread is not None:
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        if self.thread is not None:
            self.thread.join()

    def _tick(self) -> None:
        import time

        start = time.monotonic()
        while not self.done.wait(1.0):
            sys.stderr.write(f"\r{self.what}: {time.monotonic() - start:.0f} s")
            sys.stderr.flush()
        if time.monotonic() - start >= 1.0:
            sys.stderr.write(f"\r{self.what}: done in {time.monotonic() - start:.1f} s\n")
            sys.stderr.flush()


def _size(n: int) -> str:
    return f"{max(1, round(n / 1e3))} KB" if n < 1e6 else f"{n / 1e6:.1f} MB"


def _write_output(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all (a temporary file beside it, renamed)."""
    import tempfile

    temporary = None
    try:
        fd, temporary = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".nmtserve-",
                                         suffix=".part")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(temporary, path)
    except OSError as exc:
        if temporary is not None and os.path.exists(temporary):
            os.unlink(temporary)
        raise UsageError(f"cannot write {path}: {exc}") from None


def _translate_all(
    translator: Translator,
    options: Options,
    inputs: Lines,
    args: argparse.Namespace,
    stdout: TextIO,
    stderr: TextIO,
) -> int:
    """Translate every input line, writing in order as the prefix completes; (the number of lines
    the server rejected (``--on-error empty|skip``; with ``fail`` the first one raises), the number
    whose translation the server warned about, each named on stderr)."""
    bar = _progress(len(inputs.lines), stderr, args.no_progress)
    on_error = getattr(args, "on_error", "fail")
    position = rejected = warned = 0
    try:
        with closing(translator.translate_batches(inputs.lines, options, "return")) as batches:
            for batch in batches:
                out = []
                stop = False
                for i, t in enumerate(batch, start=position):
                    if t.error is not None:
                        rejected += 1
                        if bar is not None:
                            bar.clear()
                        _report(stderr, _describe(t.error, inputs))
                        if on_error == "fail":
                            stop = True  # every line before it is written; closing cancels the rest
                            break
                        if on_error == "skip":
                            continue
                    elif t.warning:
                        warned += 1
                        if bar is not None:
                            bar.clear()
                        _report(stderr, f"{inputs.where(i)}: {t.warning}", level="warning")
                    out.append(format_line(inputs.lines[i], t, args.json) + "\n")
                stdout.write("".join(out))
                stdout.flush()  # stream: whatever is done in order goes out now
                position += len(batch)
                if bar is not None:
                    bar.update(len(batch))
                if stop:
                    break
    finally:
        if bar is not None:
            bar.close()
    return rejected, warned


def _interactive(
    translator: Translator,
    options: Options,
    as_json: bool,
    stdin: TextIO,
    stdout: TextIO,
    stderr: TextIO,
) -> int:
    """A terminal on stdin: translate each line as it is typed; a rejected line is reported
    and the session goes on, an unreachable server ends it."""
    code = EXIT_OK
    for line in _lines(stdin):
        try:
            batches = translator.translate_batches([line], options)
            translation = [t for batch in batches for t in batch][0]
        except TranslationError as exc:
            _report(stderr, exc.message)
            code = max(code, exit_code(exc))
            if isinstance(exc, ServerUnavailableError):
                return code
            continue
        if translation.warning:
            _report(stderr, translation.warning, level="warning")
        stdout.write(format_line(line, translation, as_json) + "\n")
        stdout.flush()
    return code


def _lines(stream: TextIO) -> Iterator[str]:
    for line in stream:
        yield line.rstrip("\r\n")


def _describe(error: TranslationError, inputs: Lines | None) -> str:
    """The error for a person: input positions become file:line."""
    message = error.message
    if isinstance(error, ServerUnavailableError):
        inputs = None  # the server, not a line, is the problem
    if inputs is not None and error.index is not None:
        # "TEXT[3]" is the sentence's place in its request, which the client reorders: the line
        # number is what names it.
        message = f"{inputs.where(error.index)}: {local_message(message, 'the line')}"
    elif inputs is not None and error.indices:
        message = f"{message} ({inputs.describe(error.indices)})"
    if error.attempts > 1:
        message += f" [gave up after {error.attempts} attempts]"
    if isinstance(error, ServerUnavailableError) and not isinstance(error, ProtocolMismatchError):
        message += " (is the server running? 'nmtserve serve' starts one)"
    return message


def _report(stderr: TextIO, message: str, prog: str = PROG, level: str = "error") -> None:
    stderr.write(f"{prog}: {level}: {' '.join(message.splitlines())}\n")
    stderr.flush()
