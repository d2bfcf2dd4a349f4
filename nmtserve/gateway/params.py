"""A request's fields, whether it came as JSON, a form or multipart (both APIs take all three),
read with a bound on the body's size.

Whatever the body holds, reading it raises nothing but ``BadRequest``/``TooLarge`` (each API's
400/413): JSON nested deeper than ``MAX_JSON_DEPTH``, a non-finite number (``Infinity``,
``NaN``, ``1e999``), an integer of more than ``MAX_JSON_DIGITS`` digits, a string with a lone
surrogate (``"\\ud800"``, or the bytes of one), bad UTF-8, a malformed form, a body over the
limit, or one that stops arriving (``--body-timeout``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from starlette.datastructures import ImmutableMultiDict, UploadFile
from starlette.requests import ClientDisconnect, Request

from .config import MAX_BODY_BYTES
from .errors import BadRequest, TooLarge

# Neither API nests deeper than an object of lists; a JSON body nested deeper than this is
# refused (instead of recursing towards Python's limit).
MAX_JSON_DEPTH = 32
# No field takes a number this long; Python's own limit (4,300 digits) would name a setting.
MAX_JSON_DIGITS = 100
GONE = "Invalid request: the request body did not arrive (the client went away or was too slow)"


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


def _body_limit(request: Request) -> int:
    """The app's ``--max-body-bytes`` (``app.state.limits``), else the default."""
    app = request.scope.get("app")
    limits = getattr(getattr(app, "state", None), "limits", None)
    return limits.max_body_bytes if limits is not None else MAX_BODY_BYTES


async def read_params(request: Request, limit: int | None = None) -> Params:
    """The fields of a JSON body, or of a form / multipart body together with the query string
    (LibreTranslate reads both; DeepL's client sends a GET's fields as a form body). ``limit``:
    the body's bytes at most (None: the app's ``--max-body-bytes``)."""
    request = _bounded(request, _body_limit(request) if limit is None else limit)
    content_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if content_type == "application/json" or content_type.endswith("+json"):
        try:
            body = await request.body()
        except ClientDisconnect:
            raise BadRequest(GONE) from None
        data = parse_json(body)
        if not isinstance(data, dict):
            raise BadRequest("Invalid JSON format: the body must be a JSON object")
        return Params(data, is_json=True)
    try:
        form = await request.form()
    except TooLarge:
        raise
    except ClientDisconnect:
        raise BadRequest(GONE) from None
    except Exception as exc:  # starlette's MultiPartException and parse errors
        raise BadRequest(f"Invalid request: malformed form data: {exc}") from None
    items = [*request.query_params.multi_items(), *form.multi_items()]
    for name, value in items:
        if not _encodable(name) or (isinstance(value, str) and not _encodable(value)):
            await form.close()
            raise BadRequest(f"Invalid request: the field {_quoted(name)} is not valid text")
    return Params(ImmutableMultiDict(items), is_json=False, form=form)


def parse_json(body: bytes) -> Any:
    """``body`` as JSON, every string valid Unicode and every number finite and of a sane
    length, nested at most ``MAX_JSON_DEPTH`` deep; BadRequest otherwise."""
    try:
        data = json.loads(body, parse_constant=_no_constant, parse_float=_finite, parse_int=_short_int)
    except RecursionError:
        raise BadRequest(f"Invalid JSON format: nested deeper than {MAX_JSON_DEPTH} levels") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"Invalid JSON format: {exc}") from None
    _check_json(data)
    return data


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):  # NaN cannot come from a literal
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


def _short_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_JSON_DIGITS:
        raise ValueError(f"an integer of {len(text)} digits is out of range")
    return int(text)


def _check_json(data: Any) -> None:
    """BadRequest for a string (a value or a key) that is not valid Unicode, or nesting deeper
    than MAX_JSON_DEPTH (walked without recursion)."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            if not _encodable(value):
                raise BadRequest("Invalid JSON format: a string holds a lone surrogate (not valid Unicode)")
            continue
        if not isinstance(value, (dict, list)):
            continue
        if depth > MAX_JSON_DEPTH:
            raise BadRequest(f"Invalid JSON format: nested deeper than {MAX_JSON_DEPTH} levels")
        if isinstance(value, dict):
            stack.extend((k, depth) for k in value)
            stack.extend((v, depth + 1) for v in value.values())
        else:
            stack.extend((v, depth + 1) for v in value)


def _encodable(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _quoted(name: str) -> str:
    return repr(name.encode("utf-8", "backslashreplace").decode("utf-8")[:40])
