"""DeepL's document translation: upload, status, result (what ``deepl.Translator.translate_document``
calls).

    POST /v2/document                 file (multipart, its name's extension gives the format),
                                      target_lang, source_lang (optional when the server translates
                                      into target_lang from one language only), output_format
                                      (only the input's own), glossary_id (not for files: 400)
                                      -> {"document_id", "document_key"}
    POST /v2/document/{id}            document_key -> {"document_id", "status": queued | translating
                                      | done | error, "seconds_remaining" (an estimate, while
                                      translating), "billed_characters" (done), "error_message"}
    POST /v2/document/{id}/result     document_key -> the translated file; then it is deleted, as
                                      DeepL deletes it (a second download is 404)

The file is translated by the server's ``translate_document`` model (text formats: plain, html;
files: every format of ``contract.FILE_FORMATS``), in the background: the upload answers at
once. A document is its uploader's: another key, or a wrong ``document_key``, gets DeepL's 404
"Document not found". The translated file waits in the gateway's download folder (its caps and
its 30 minutes, files.py); a document not fetched by then is gone. A file the server cannot read
ends in status "error" with the server's message (which names the problem), never as a "done"
file left partly untranslated. PDF is refused at upload with a 400 that says so.

Billed characters: a text file's characters; a binary file's size in bytes (the gateway does
not read the text of a .docx; the server does), which is also what the key's per-minute limit
counts.
"""

from __future__ import annotations

import asyncio
import secrets
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse
from starlette.routing import Route

from .. import contract
from .errors import BadRequest, GatewayError, NotFound, Unavailable
from .params import read_params
from .service import Service

# Formats DeepL's document API takes that this server reads; the rest are named in the 400.
_TEXT = {".txt": "plain", ".text": "plain", ".html": "html", ".htm": "html"}
MAX_JOBS = 1000  # documents remembered at once (done ones beyond this: the oldest forgotten)
JOB_TTL_S = 30 * 60.0


@dataclass
class _Job:
    id: str
    key: str
    owner: str | None
    filename: str
    size: int
    started: float = field(default_factory=time.monotonic)
    status: str = "queued"
    error: str | None = None
    stored: str | None = None  # the name in the download folder once done
    task: asyncio.Task | None = None

    def estimate_s(self) -> int:
        """Seconds left, a guess from the file's size (~20 KB of file a second on a CPU server)."""
        return max(1, round(1 + self.size / 20_000 - (time.monotonic() - self.started)))


class Documents:
    """The documents uploaded and their translations, in memory (ids and keys are random)."""

    def __init__(self) -> None:
        self.jobs: dict[str, _Job] = {}

    def add(self, job: _Job) -> None:
        now = time.monotonic()
        for old in [j for j in self.jobs.values() if now - j.started > JOB_TTL_S]:
            self._forget(old)
        while len(self.jobs) >= MAX_JOBS:
            done = [j for j in self.jobs.values() if j.status in ("done", "error")]
            if not done:
                raise Unavailable("Too many documents are being translated: try again later")
            self._forget(min(done, key=lambda j: j.started))
        self.jobs[job.id] = job

    def find(self, document_id: str, key: Any, owner: str | None) -> _Job:
        job = self.jobs.get(document_id)
        if job is None or not isinstance(key, str) or not secrets.compare_digest(job.key, key) or job.owner != owner:
            raise NotFound("Document not found")
        return job

    def _forget(self, job: _Job) -> None:
        self.jobs.pop(job.id, None)
        if job.task is not None and not job.task.done():
            job.task.cancel()


def document_format(filename: str) -> str:
    """The translate_document format of an uploaded file's name; BadRequest naming what is wrong."""
    lower = filename.lower()
    if lower.endswith(".pdf"):
        raise BadRequest("Value for 'file' not supported: PDF is not translated by this server (its text has no "
                         "reliable reading order or runs to put a translation back into): convert it to DOCX or "
                         "ODT first")
    dot = lower.rfind(".")
    if dot >= 0 and lower[dot:] in _TEXT:
        return _TEXT[lower[dot:]]
    fmt = contract.document_format_of(filename)
    if fmt is None or fmt not in contract.FILE_FORMATS:
        known = sorted({*_TEXT, *(e for exts, _, _ in contract.FILE_FORMATS.values() for e in exts)})
        raise BadRequest(f"Value for 'file' not supported: {filename!r} is not a format this server translates "
                         f"({', '.join(known)})")
    return fmt


def routes(service: Service, auth_key: Any, owner_of: Any, served: Any, error: Any, endpoint: Any) -> list[Route]:
    """The three routes; ``auth_key``, ``owner_of``, ``served``, ``error`` and ``endpoint`` are
    deepl.py's (the key of a request, its owner, a DeepL language code read, its error answer)."""
    documents = Documents()

    async def translate(job: _Job, data: bytes, fmt: str, source: str, target: str) -> None:
        job.status = "translating"
        try:
            document: str | bytes = data if fmt in contract.FILE_FORMATS else data.decode("utf-8")
            out = await service.translate_document(document, fmt, source, target)
            job.stored = service.files.put(job.filename, out if isinstance(out, bytes) else out.encode("utf-8"))
            job.status = "done"
        except GatewayError as exc:
            job.status, job.error = "error", exc.message
        except Exception as exc:  # noqa: BLE001 - the status says it; the gateway keeps serving
            job.status, job.error = "error", f"the translation failed: {exc}"

    @endpoint(error)
    async def upload(request: Request) -> JSONResponse:
        params = await read_params(request)
        try:
            key = service.access.check(auth_key(request, params))
            upload = params.file("file")
            if upload is None or not upload.filename:
                raise BadRequest("Parameter 'file' not specified.")
            if params.get("target_lang") is None:
                raise BadRequest("Parameter 'target_lang' not specified.")
            if params.get("glossary_id") not in (None, ""):
                raise BadRequest("Value for 'glossary_id' not supported: glossaries apply to /v2/translate only "
                                 "on this server")
            fmt = document_format(upload.filename)
            output = params.get("output_format")
            if output not in (None, "") and document_format(f"x.{str(output).lstrip('.')}") != fmt:
                raise BadRequest("Value for 'output_format' not supported: the file comes back in its own format")
            data = await upload.read()
            if not data:
                raise BadRequest("Value for 'file' not supported: the file is empty")
            if fmt not in contract.FILE_FORMATS:
                try:
                    data.decode("utf-8")
                except UnicodeDecodeError:
                    raise BadRequest("Value for 'file' not supported: the text file is not UTF-8") from None
            catalog = await service.catalog()
            target = served(params.get("target_lang"), catalog.targets, "target_lang")
            given = params.get("source_lang")
            source = served(given, catalog.sources, "source_lang") if given else await service.only_source(
                target, f"a {fmt} file")
            if not catalog.serves(source, target):
                raise BadRequest("Value for 'target_lang' not supported.")
            service.access.check_request(key, [], api="deepl", file=True, chars=len(data))
            job = _Job(uuid.uuid4().hex.upper(), secrets.token_hex(32).upper(), owner_of(key), upload.filename,
                       len(data))
            documents.add(job)
        finally:
            await params.close()
        job.task = asyncio.create_task(translate(job, data, fmt, source, target))
        return JSONResponse({"document_id": job.id, "document_key": job.key})

    async def _job(request: Request) -> _Job:
        params = await read_params(request)
        owner = owner_of(service.access.check(auth_key(request, params)))
        return documents.find(request.path_params["document_id"], params.get("document_key"), owner)

    @endpoint(error)
    async def status(request: Request) -> JSONResponse:
        job = await _job(request)
        body: dict[str, Any] = {"document_id": job.id, "status": job.status}
        if job.status in ("queued", "translating"):
            body["seconds_remaining"] = job.estimate_s()
        elif job.status == "done":
            body["billed_characters"] = job.size
        else:
            body["error_message"] = job.error
        return JSONResponse(body)

    @endpoint(error)
    async def result(request: Request) -> FileResponse:
        job = await _job(request)
        if job.status != "done" or job.stored is None:
            raise NotFound("Document not found" if job.status == "error" else "Document is not ready yet")
        found = service.files.get(job.stored)
        documents._forget(job)  # DeepL deletes a document once it is downloaded
        if found is None:
            raise NotFound("Document not found (the translation was kept 30 minutes)")
        path, name = found
        media = next((m for fmt, (exts, m, _) in contract.FILE_FORMATS.items() if name.lower().endswith(exts)),
                     "application/octet-stream")
        return FileResponse(path, media_type=media, filename=name,
                            background=_remove_after(path))

    return [
        Route("/v2/document", upload, methods=["POST"]),
        Route("/v2/document/{document_id:str}", status, methods=["POST", "GET"]),
        Route("/v2/document/{document_id:str}/result", result, methods=["POST", "GET"]),
    ]


def _remove_after(path: Any) -> Any:
    from starlette.background import BackgroundTask

    return BackgroundTask(lambda: path.unlink(missing_ok=True))
