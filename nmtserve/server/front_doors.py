"""The BLS front doors beside the ensemble: ``translate_document`` (``DocumentModel``) and, in a
repository of language pairs, ``translate`` (``PairRouterModel``). Each forwards its requests to
an ensemble by BLS from a thread pool and answers through the request's response sender, so
requests in flight overlap in one non-decoupled instance."""

from __future__ import annotations

import json
import logging
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .. import contract as c
from .. import defaults
from . import stub
from .protocol import InputError, choose_pair, status_of_message

log = logging.getLogger("nmtserve.server")
pb_utils = stub.pb_utils  # None outside a Triton Python-backend stub


class _FrontDoor:
    """What both front doors share: their parameters, a pool of ``WORKERS`` forwarding threads,
    and its shutdown."""

    WORKERS = 8

    def _start(self, args: dict) -> dict:
        params, _ = stub.parameters(args)
        self._pool = ThreadPoolExecutor(self.WORKERS, thread_name_prefix=f"nmtserve-{type(self).__name__}")
        return params

    def finalize(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class DocumentModel(_FrontDoor):
    """``translate_document``: DOCUMENT [1] (+ FORMAT, decoding options) -> TRANSLATION [1], SENTENCES [1].

    Cuts the document into sentences (``nmtserve.documents``: plain, Markdown, HTML), sends all
    of them to the ``translate`` ensemble as one request (BLS; more than
    ``max_request_sentences`` go as several, one after another), and puts the translations back
    into the document. Non-decoupled, answering through response senders from a thread pool (as
    ``generate`` does), so documents in flight decode in generate's one running batch and a
    long document does not hold up a short one.
    """

    WORKERS = 8  # documents in flight at once in this model; more wait in the pool's queue

    def initialize(self, args: dict) -> None:
        params = self._start(args)
        self.translate_model = params.get("translate_model", c.DEFAULT_MODEL)
        self.max_chars = int(params.get("max_document_chars", defaults.MAX_DOCUMENT_CHARS)) or None
        self.chunk = int(params.get("max_request_sentences", defaults.MAX_REQUEST_SENTENCES)) or defaults.MAX_REQUEST_SENTENCES
        # "1": `translate_model` is the pair router, which takes SOURCE_LANG/TARGET_LANG.
        self.routed = params.get("routed", "0") == "1"
        # "drop": the export measured that the model does not carry inline placeholders
        # (nmtserve.export.markup), so sentences go without them; "keep" (and older exports): with.
        self.inline_markup = params.get(c.INLINE_MARKUP_PARAMETER, c.INLINE_MARKUP_KEEP)
        # Older exports serve no alignments: their "drop" drops the inline formatting.
        self.aligns = params.get(c.ALIGNMENTS_PARAMETER, "0") == "1"

    def execute(self, requests: list) -> None:
        for request in requests:
            sender = request.get_response_sender()
            try:  # copied out here: the inputs are freed when execute returns
                text, fmt = _document_input(request)
                options = {name: np.array(value) for name in (c.BEAM_SIZE, c.MAX_LENGTH, c.LENGTH_PENALTY,
                                                              c.EARLY_STOPPING, c.SOURCE_LANG, c.TARGET_LANG)
                           if (value := stub.input_array(request, name)) is not None}
                if not self.routed and (c.SOURCE_LANG in options or c.TARGET_LANG in options):
                    raise InputError(f"this server serves one model without language pairs: leave {c.SOURCE_LANG} "
                                     f"and {c.TARGET_LANG} out")
            except InputError as exc:
                stub.send_final(sender, pb_utils.InferenceResponse(error=stub.error(str(exc))))
                continue
            self._pool.submit(self._translate, text, fmt, options, sender)
        return None

    def _translate(self, text: str | bytes, fmt: str, options: dict, sender) -> None:
        from ..documents import DocumentError, segment
        from ..documents._files import segment_file

        try:
            cut = segment_file if isinstance(text, bytes) else segment
            document = cut(text, fmt, max_chars=self.max_chars) if self.max_chars else cut(text, fmt)
            # A model that does not carry placeholders gets each sentence without them, and its
            # alignment puts the inline markup back around the aligned words (documents._align).
            dropping = self.inline_markup == c.INLINE_MARKUP_DROP
            aligning = dropping and self.aligns
            sentences = document.without_markup() if dropping else document.sentences
            translations: list[str] = []
            alignments: list[str] = []
            for start in range(0, len(sentences), self.chunk):
                part, aligned = self._sentences(sentences[start:start + self.chunk], start, options, aligning)
                translations += part
                alignments += aligned
            if aligning:
                from ..alignment import parse_pharaoh

                out = document.render_aligned(translations, [parse_pharaoh(a) for a in alignments])
            else:
                out = document.render(translations)
            if isinstance(out, str):
                out = out.encode("utf-8")
            response = pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor(c.TRANSLATION, np.array([out], dtype=np.object_)),
                pb_utils.Tensor(c.SENTENCES, np.array([len(document.sentences)], dtype=np.int32)),
            ])
        except DocumentError as exc:
            response = pb_utils.InferenceResponse(error=stub.error(str(exc)))
        except _TranslateFailed as exc:
            response = pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc), exc.code))
        except Exception as exc:
            log.exception("translate_document failed")
            response = pb_utils.InferenceResponse(error=stub.error(f"document translation failed: {exc}", invalid=False))
        stub.send_final(sender, response)

    def _sentences(self, sentences: list[str], start: int, options: dict, align: bool) -> tuple[list[str], list[str]]:
        """One BLS request to the translate ensemble: the translations and (``align``) their word
        alignments, else ""s. Its error keeps its status code, with the sentence named by its
        place in the document instead of in the request."""
        inputs = [pb_utils.Tensor(c.TEXT, np.array([s.encode("utf-8") for s in sentences], dtype=np.object_)),
                  pb_utils.Tensor(c.SPLIT_SENTENCES, np.array([False]))]  # cut already, by the document's rules
        inputs += [pb_utils.Tensor(name, value) for name, value in options.items()]
        outputs = [c.TRANSLATION]
        if align:
            inputs.append(pb_utils.Tensor(c.ALIGN, np.array([True])))
            outputs.append(c.ALIGNMENT)
        # The outputs parameter too: the ensemble asks its steps for all they have, WARNING's checks included.
        response = pb_utils.InferenceRequest(model_name=self.translate_model, requested_output_names=outputs,
                                             inputs=inputs, parameters={c.OUTPUTS_PARAMETER: ",".join(outputs)}).exec()
        if response.has_error():
            error = bls_error(response.error())
            message = c.SENTENCE_IN_MESSAGE.sub(
                lambda m: f"sentence {start + int(m.group(1)) + 1} of the document ({_snippet(sentences, m)})",
                error.message())
            raise _TranslateFailed(message, error.code())
        out = pb_utils.get_output_tensor_by_name(response, c.TRANSLATION).as_numpy()
        translations = [t.decode("utf-8") for t in out.reshape(-1)]
        if not align:
            return translations, [""] * len(translations)
        aligned = pb_utils.get_output_tensor_by_name(response, c.ALIGNMENT).as_numpy()
        return translations, [a.decode("utf-8") for a in aligned.reshape(-1)]



def _snippet(sentences: list[str], match) -> str:
    """The sentence an error names, as the person finds it in the document: its first words."""
    index = int(match.group(1))
    text = sentences[index] if 0 <= index < len(sentences) else ""
    return repr(text if len(text) <= 40 else text[:40] + "...")


class _TranslateFailed(Exception):
    def __init__(self, message: str, code) -> None:
        super().__init__(message)
        self.code = code


def _document_input(request) -> tuple[str | bytes, str]:
    """The request's DOCUMENT, as text (a text format) or bytes (a file format), and its FORMAT
    (default plain); InputError names a bad one."""
    document = stub.input_array(request, c.DOCUMENT)
    if document is None or document.size != 1:
        raise InputError(f"{c.DOCUMENT} must hold exactly one document, got {0 if document is None else document.size}")
    fmt = stub.input_array(request, c.FORMAT)
    name = "plain" if fmt is None or fmt.size == 0 else fmt.reshape(-1)[0]
    name = name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name)
    if name not in c.DOCUMENT_FORMATS:
        raise InputError(f"{c.FORMAT} must be one of {', '.join(c.DOCUMENT_FORMATS)}, got {name!r}")
    raw = document.reshape(-1)[0]
    if name in c.FILE_FORMATS:
        return (raw if isinstance(raw, bytes) else str(raw).encode("utf-8")), name
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else str(raw)
    except UnicodeDecodeError as exc:
        raise InputError(f"{c.DOCUMENT} is not valid UTF-8 (byte {exc.start})") from None
    return text, name


class PairRouterModel(_FrontDoor):
    """``translate`` in a repository of several language pairs: TEXT, SOURCE_LANG, TARGET_LANG
    (and the decoding options) -> the outputs of the pair's own ensemble (``translate_en_fr``).

    Each pair keeps its own tokenize/generate/detokenize, so requests for different pairs decode
    concurrently, each pair in its own in-flight batch. The request is forwarded by BLS from a
    thread pool and answered through its response sender (as ``generate`` does). Without
    SOURCE_LANG/TARGET_LANG a request goes to the only pair that fits what it gives; an unknown
    or ambiguous pair is INVALID_ARG listing the pairs served.
    """

    WORKERS = 64  # requests forwarded at once; more wait in the pool's queue

    def initialize(self, args: dict) -> None:
        params = self._start(args)
        self.name = json.loads(args["model_config"])["name"]
        self.pairs = tuple(p for p in params.get(c.PAIRS_PARAMETER, "").split(",") if p)
        if not self.pairs:
            raise ValueError(f"model {self.name}: no language pairs in its '{c.PAIRS_PARAMETER}' parameter")
        log.info("%s routes %s", self.name, ", ".join(self.pairs))

    def execute(self, requests: list) -> None:
        for request in requests:
            sender = request.get_response_sender()
            try:
                given = stub.input_arrays(request)  # one pass, not a listing of the inputs per name
                pair = choose_pair(self.pairs, _language(given, c.SOURCE_LANG), _language(given, c.TARGET_LANG))
                inputs = [pb_utils.Tensor(t.name, np.array(value)) for t in c.TRANSLATE_INPUTS
                          if (value := given.get(t.name)) is not None]
                outputs = list(request.requested_output_names())
                # The outputs parameter goes on to the pair's ensemble, whose steps read it.
                named = stub.outputs_parameter(request.parameters())
                parameters = {} if named is None else {c.OUTPUTS_PARAMETER: named}
            except InputError as exc:
                stub.send_final(sender, pb_utils.InferenceResponse(error=stub.error(str(exc))))
                continue
            self._pool.submit(self._forward, self.name + c.pair_suffix(pair), inputs, outputs, parameters, sender)
        return None

    def _forward(self, model: str, inputs: list, outputs: list[str], parameters: dict, sender) -> None:
        try:
            answer = pb_utils.InferenceRequest(model_name=model, requested_output_names=outputs, inputs=inputs,
                                               parameters=parameters).exec()
            if answer.has_error():
                response = pb_utils.InferenceResponse(error=bls_error(answer.error()))
            else:
                response = pb_utils.InferenceResponse(output_tensors=answer.output_tensors())
        except Exception as exc:
            log.exception("routing to %s failed", model)
            response = pb_utils.InferenceResponse(error=stub.error(f"routing to {model} failed: {exc}", invalid=False))
        stub.send_final(sender, response)



def _language(given: dict[str, np.ndarray], name: str) -> str | None:
    value = given.get(name)
    if value is None or value.size == 0:
        return None
    if value.size != 1:
        raise InputError(f"{name} must hold one language code, got {value.size}")
    raw = value.reshape(-1)[0]
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    return text.strip() or None


def bls_error(error):
    """A BLS response's error with the status the client should see.

    The Python backend hands a BLS caller the message of the callee's error but (Triton 24.x)
    not always its code, which arrives as INTERNAL; a client would then treat a bad sentence
    as a server failure and not retry an overloaded server. The code is recovered from the
    message where the contract makes that certain."""
    errors = pb_utils.TritonError
    code = error.code() if hasattr(error, "code") else errors.INTERNAL
    message = error.message()
    if code == errors.INTERNAL:
        status = status_of_message(message)
        if status == "INVALID_ARG":
            code = errors.INVALID_ARG
        elif status == "UNAVAILABLE":
            code = getattr(errors, "UNAVAILABLE", errors.INTERNAL)
    return errors(message, code)
