"""A request's fields, whether it came as JSON, a form or multipart (both APIs take all three),
read with a bound on the body's size."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from starlette.datastructures import ImmutableMultiDict, UploadFile
from starlette.requests import Request

from .config import MAX_BODY_BYTES
from .errors import BadRequest, TooLarge


class Params:
    """``get(name)``: one value (a JSON value, or a form/query string); ``getlist(name)``: every
    value (a JSON list, or a repeated form field); ``file(name)``: an uploaded file."""

    def __init__(self, values: Mapping[str, Any], is_json: bool, form: Any = None) -> None:
        self._values, self.is_json, self._form = values, is_json, form

    def get(self, name: str) -> Any:
        value = self._values.get(name)
        return None if isinstance(value, UploadFile) else value

    def getlist(self, name: str) -> list[Any]:
        if self.is_json:
            value = self._values.get(name)
            return value if isinstance(value, list) else [] if value is None else [value]
        return [v for v in self._values.getlist(name) if not isinstance(v, UploadFile)]  # type: ignore[attr-defined]

    def file(self, name: str) -> UploadFile | None:
        value = self._form.get(name) if self._form is not None else None
        return value if isinstance(value, UploadFile) else None

    async def close(self) -> None:
        if self._form is not None:
            await self._form.close()


def _bounded(request: Request, limit: int) -> Request:
    """The same request, whose body raises TooLarge past ``limit`` bytes (before it is all read)."""
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise TooLarge(f"Invalid request: the request body ({int(length)} bytes) exceeds the limit ({limit} bytes)")
    receive, seen = request.receive, 0

    async def bounded_receive() -> Any:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise TooLarge(f"Invalid request: the request body exceeds the limit ({limit} bytes)")
        return message

    return Request(request.scope, bounded_receive)


async def read_params(request: Request, limit: int = MAX_BODY_BYTES) -> Params:
    """The fields of a JSON body, or of a form / multipart body together with the query string
    (LibreTranslate reads both; DeepL's client sends a GET's fields as a form body)."""
    request = _bounded(request, limit)
    content_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if content_type == "application/json" or content_type.endswith("+json"):
        try:
            data = json.loads(await request.body())
        except (ValueError, UnicodeDecodeError) as exc:
            raise BadRequest(f"Invalid JSON format: {exc}") from None
        if not isinstance(data, dict):
            raise BadRequest("Invalid JSON format: the body must be a JSON object")
        return Params(data, is_json=True)
    try:
        form = await request.form()
    except TooLarge:
        raise
    except Exception as exc:  # starlette's MultiPartException and parse errors
        raise BadRequest(f"Invalid request: malformed form data: {exc}") from None
    items = [*request.query_params.multi_items(), *form.multi_items()]
    return Params(ImmutableMultiDict(items), is_json=False, form=form)
