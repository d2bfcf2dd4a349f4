"""LibreTranslate's HTTP API, shapes and messages as its ``app.py`` defines them.

    POST /translate        q (a string or a list), source (a code or "auto"), target,
                           format (text | html), alternatives, api_key, glossary (nmtserve's
                           own: {source term: target term}, or the id of a glossary of the key),
                           confidence (nmtserve's own: true)
                           -> {"translatedText", "detectedLanguage" (auto), "alternatives" (asked),
                               "warning" (nmtserve's own, when something is suspected);
                               with confidence: "confidence", "wordConfidence", "missingWords"}
    POST /detect           q -> [{"confidence", "language"}] (a language the server does not
                           translate from too, when the text is surely in it)
    GET  /languages        [{"code", "name", "targets"}]
    GET  /frontend/settings
    POST /translate_file   file (.txt, .md, .html and the files of contract.FILE_FORMATS: .docx, .srt...),
                           source, target, api_key -> {"translatedFileUrl"}
    GET  /download_file/NAME
    GET  /health           {"status": "ok"}

Errors are ``{"error": "..."}``: 400 a bad or missing field, an unsupported language or
format (with ``source=auto``, a text surely in a language the server does not translate from:
"fr is not supported: this looks like French; this server translates from English ..."), over
a limit; 403 a bad or missing key; 429 over the key's rate; 500 the translation
failed or Triton cannot be reached.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Any

from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse
from starlette.routing import Route

from .. import contract
from .detect import Detection
from .errors import BadRequest, Forbidden, GatewayError, RateLimited, endpoint
from .files import FORMATS
from .glossaries import Glossary, check_size, parse_entries
from .languages import Catalog
from .params import read_params
from .service import Service, looks_like

FORMAT_TEXT, FORMAT_HTML = "text", "html"
AUTO = "auto"


def _error(exc: GatewayError) -> JSONResponse:
    if isinstance(exc, Forbidden):
        return JSONResponse({"error": exc.message}, 403)
    if isinstance(exc, RateLimited):
        return JSONResponse({"error": f"Slowdown: {exc.message}"}, 429)
    if isinstance(exc, BadRequest):
        return JSONResponse({"error": exc.message}, 400)
    return JSONResponse({"error": exc.message}, 500)


def _missing(name: str) -> BadRequest:
    return BadRequest(f"Invalid request: missing {name} parameter")


def _string(value: Any, name: str) -> str:
    if not value:
        raise _missing(name)
    if not isinstance(value, str):
        raise BadRequest(f"Invalid request: {name} parameter must be a string")
    return value


def _flag(value: Any, name: str) -> bool:
    """A boolean parameter: true/false (JSON), or "true"/"false"/"1"/"0" (a form)."""
    if value is None or value is False or value == "":
        return False
    if value is True:
        return True
    if isinstance(value, (int, str)) and str(value).strip().lower() in ("0", "1", "true", "false"):
        return str(value).strip().lower() in ("1", "true")
    raise BadRequest(f"Invalid request: {name} parameter must be true or false")


def _confidence(done: Any) -> dict[str, Any]:
    """nmtserve's confidence fields of one translation (``service.Translated``): its confidence
    (0..1), one per whitespace-separated word of translatedText, the source words that may be
    missing; null for a text that got none (HTML, or a text with glossary terms)."""
    confidence = None if done.confidence is None else round(done.confidence, 4)
    words = None if done.word_confidence is None else [round(c, 2) for c in done.word_confidence]
    return {"confidence": confidence, "wordConfidence": words, "missingWords": done.missing_words}


def _detected(found: Detection) -> dict[str, Any]:
    return {"confidence": found.confidence, "language": found.language}


def _check_pair(catalog: Catalog, source: str, target: str) -> None:
    if source not in catalog.sources:
        raise BadRequest(f"{source} is not supported")
    if target not in catalog.codes:
        raise BadRequest(f"{target} is not supported")
    if not catalog.serves(source, target):
        raise BadRequest(
            f"{catalog.name(target)} ({target}) is not available as a target language from "
            f"{catalog.name(source)} ({source})"
        )


def _language(code: str) -> str:
    """A served code as a glossary names its language: "pt-BR" -> "pt" (deepl.py's rule)."""
    return code.strip().replace("_", "-").split("-", 1)[0].lower()


def _glossary(service: Service, value: Any, key: Any, source: str, target: str) -> Glossary | None:
    """The request's ``glossary`` (nmtserve's extension): an object {source term: target term},
    read as a DeepL glossary's entries are, or the id of a glossary of the key's
    (``/v2/glossaries``) made for the request's pair."""
    if value in (None, "", {}):
        return None
    if isinstance(value, dict):
        if not all(isinstance(s, str) and isinstance(t, str) for s, t in value.items()):
            raise BadRequest("Invalid request: glossary must map source terms (strings) to target terms (strings)")
        if any(c in s + t for s, t in value.items() for c in "\t\r\n"):
            raise BadRequest("Invalid request: a glossary term holds a tab or a line break")
        entries = parse_entries("\n".join(f"{s}\t{t}" for s, t in value.items()), "tsv")
        check_size(entries, service.config.limits)
        return Glossary("", "", source, target, entries)
    if not isinstance(value, str):
        raise BadRequest("Invalid request: glossary must be an object {source term: target term} or a glossary id")
    glossary = service.glossaries.get(key.key if key is not None else None, value.strip())
    if (glossary.source_lang, glossary.target_lang) != (_language(source), _language(target)):
        raise BadRequest(f"Invalid request: glossary {glossary.glossary_id} is for {glossary.source_lang} to "
                         f"{glossary.target_lang}, not {source} to {target}")
    return glossary


def routes(service: Service) -> list[Route]:
    config = service.config

    async def source_for(texts: list[str], source: str, target: str, *, batch: bool = False
                         ) -> tuple[str, Detection | None]:
        """The source code, and what was detected when it is "auto". A text surely in a language
        the server does not translate from is refused as LibreTranslate refuses a source it
        does not have ("fr is not supported"), saying what it looks like; a batch names the
        text (``q[2]: ...``)."""
        if source != AUTO:
            return source, None
        foreign = await service.foreign(texts)
        if foreign is not None:
            i, seen = foreign
            raise BadRequest(f"{f'q[{i}]: ' if batch else ''}{seen.language} is not supported: "
                             f"{looks_like(seen, await service.catalog())} (name the source language "
                             f"to translate it anyway)")
        found = await service.detect_source("\n".join(texts), target)
        if found is None:
            raise BadRequest(f"{target} is not supported")
        return found.language, found

    @endpoint(_error)
    async def translate(request: Request) -> JSONResponse:
        params = await read_params(request)
        key = service.access.check(params.get("api_key"))
        q = params.get("q")
        if not q:
            raise _missing("q")
        source, target = _string(params.get("source"), "source"), _string(params.get("target"), "target")
        try:
            alternatives = max(0, int(params.get("alternatives") or 0))
        except (TypeError, ValueError):
            raise BadRequest("Invalid request: alternatives parameter is not a number") from None
        if alternatives > config.alternatives_limit != -1:
            raise BadRequest(
                f"Invalid request: alternatives parameter must be <= {config.alternatives_limit}")
        batch = isinstance(q, list)
        texts = q if batch else [q]
        if not all(isinstance(t, str) for t in texts):
            raise BadRequest("Invalid request: q parameter must be a string or a list of strings")
        if not params.is_json:
            texts = ["\n".join(t.splitlines()) for t in texts]  # LF only, so limits count alike
        service.access.check_request(key, texts)  # texts, characters, the key's minute (config.Limits)
        source, detected = await source_for(texts, source, target, batch=batch)
        fmt = params.get("format") or FORMAT_TEXT
        if fmt not in (FORMAT_TEXT, FORMAT_HTML):
            raise BadRequest(f"{fmt} format is not supported")
        _check_pair(await service.catalog(), source, target)
        glossary = _glossary(service, params.get("glossary"), key, source, target)
        confidence = _flag(params.get("confidence"), "confidence")
        done = await service.translate(texts, source, target, html=fmt == FORMAT_HTML,
                                       alternatives=alternatives, glossary=glossary, confidence=confidence)
        if batch:
            result: dict[str, Any] = {"translatedText": [d.text for d in done]}
            if detected is not None:
                result["detectedLanguage"] = [_detected(detected)] * len(done)
            if alternatives:
                result["alternatives"] = [d.alternatives for d in done]
            if any(d.warning for d in done):  # nmtserve's own: "" where nothing is suspected
                result["warnings"] = [d.warning for d in done]
            if confidence:
                fields = [_confidence(d) for d in done]
                for name in ("confidence", "wordConfidence", "missingWords"):
                    result[name] = [f[name] for f in fields]
        else:
            result = {"translatedText": done[0].text}
            if detected is not None:
                result["detectedLanguage"] = _detected(detected)
            if alternatives:
                result["alternatives"] = done[0].alternatives
            if done[0].warning:  # nmtserve's own: the translation may be incomplete or wrong
                result["warning"] = done[0].warning
            if confidence:
                result.update(_confidence(done[0]))
        return JSONResponse(result)

    @endpoint(_error)
    async def detect(request: Request) -> JSONResponse:
        params = await read_params(request)
        key = service.access.check(params.get("api_key"))
        q = params.get("q")
        if not q:
            raise _missing("q")
        if isinstance(q, list) and all(isinstance(t, str) for t in q):
            q = "\n".join(q)
        if not isinstance(q, str):
            raise BadRequest("Invalid request: q parameter must be a string")
        service.access.check_request(key, params.getlist("q"))
        return JSONResponse([_detected(d) for d in await service.detect(q)])

    @endpoint(_error)
    async def languages(request: Request) -> JSONResponse:
        catalog = await service.catalog()
        return JSONResponse([{"code": c, "name": catalog.name(c), "targets": catalog.targets_of(c)}
                             for c in catalog.codes])

    @endpoint(_error)
    async def frontend_settings(request: Request) -> JSONResponse:
        catalog = await service.catalog()
        target = catalog.targets_of(catalog.sources[0])[0] if catalog.pairs else ""
        return JSONResponse({
            "charLimit": service.access.request_char_limit(),
            "frontendTimeout": config.frontend_timeout_ms,
            "apiKeys": service.access.required,
            "keyRequired": service.access.required,
            "suggestions": False,
            "filesTranslation": True,
            "supportedFilesFormat": list(FORMATS),
            "language": {
                "source": {"code": AUTO, "name": "Auto Detect"},
                "target": {"code": target, "name": catalog.name(target)},
            },
        })

    @endpoint(_error)
    async def translate_file(request: Request) -> JSONResponse:
        params = await read_params(request)
        try:
            key = service.access.check(params.get("api_key"))
            upload = params.file("file")
            if upload is None:
                raise _missing("file")
            source, target = _string(params.get("source"), "source"), _string(params.get("target"), "target")
            if not upload.filename:
                raise BadRequest("Invalid request: empty file")
            fmt = FORMATS.get(PurePath(upload.filename).suffix.lower())
            if fmt is None:
                raise BadRequest("Invalid request: file format not supported")
            data = await upload.read()
            if not data:
                raise BadRequest("Invalid request: empty file")
            if fmt in contract.FILE_FORMATS:
                service.access.check_request(key, [], file=True, chars=len(data))
                if source == AUTO:
                    source = await service.only_source(target, f"a {fmt} file")
                _check_pair(await service.catalog(), source, target)
                translated = await service.translate_document(data, fmt, source, target)
            else:
                try:
                    text = data.decode("utf-8")
                except UnicodeDecodeError:
                    raise BadRequest("Invalid request: the file is not UTF-8 text") from None
                if "\x00" in text:
                    raise BadRequest("Invalid request: the file is binary, not text")
                service.access.check_request(key, [text], file=True)
                source, _ = await source_for([text], source, target)
                _check_pair(await service.catalog(), source, target)
                translated = await service.translate_document(text, fmt, source, target)
        finally:
            await params.close()
        name = service.files.put(upload.filename, translated if isinstance(translated, bytes)
                                 else translated.encode("utf-8"))
        return JSONResponse({"translatedFileUrl": str(request.url_for("download_file", filename=name))})

    @endpoint(_error)
    async def download_file(request: Request) -> FileResponse:
        found = service.files.get(request.path_params["filename"])
        if found is None:
            raise BadRequest("Invalid filename (or the file expired: translated files are kept 30 minutes)")
        path, name = found
        return FileResponse(path, filename=name)

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    return [
        Route("/translate", translate, methods=["POST"]),
        Route("/detect", detect, methods=["POST"]),
        Route("/languages", languages, methods=["GET"]),
        Route("/frontend/settings", frontend_settings, methods=["GET"]),
        Route("/translate_file", translate_file, methods=["POST"]),
        Route("/download_file/{filename:str}", download_file, methods=["GET"], name="download_file"),
        Route("/health", health, methods=["GET"]),
    ]
