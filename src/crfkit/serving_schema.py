"""The typed schema of ``POST /tag``'s JSON requests (pydantic v2, the ``crfkit[serve]`` extra).

:func:`parse_request` reads a request's bytes straight into a :class:`TagRequest`: pydantic's JSON
parser bounds the nesting depth and the size of numbers, and every field is checked by type (strict:
no ``"1"`` for ``1``, no ``1`` for ``true``); a malformed request raises :class:`RequestError` whose
message names the field (``sentences[0][2]: ...``).  The limits that depend on the server's
configuration (``nbest``, tokens per request) are checked by :mod:`crfkit.serving`, which also turns
a :class:`RequestError` into a 400 answer.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, PlainValidator, ValidationError, model_validator

__all__ = ["FIELDS", "RequestError", "TagRequest", "parse_request"]


class RequestError(ValueError):
    """A JSON request that does not fit :class:`TagRequest`; the message names the field."""


def _token(v: Any) -> Any:
    if isinstance(v, str):
        return v
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        return v
    if isinstance(v, dict) and all(
        isinstance(x, (str, int, float)) and not isinstance(x, bool) for x in v.values()
    ):
        return v
    raise ValueError(
        "a token is a string (its columns, whitespace-separated), a list of strings (its columns "
        "or attributes) or an object of attribute: number"
    )


def _cell(v: Any) -> Any:
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, list) and v and all(isinstance(x, str) for x in v):
        return set(v)
    raise ValueError("an allowed cell is null (any label), a label or a non-empty list of labels")


def _pair(v: Any) -> Any:
    if isinstance(v, str):
        return v
    if isinstance(v, list) and len(v) == 2 and all(isinstance(x, str) for x in v):
        return ",".join(v)
    raise ValueError('a forbidden pair is "FROM,TO" or ["FROM", "TO"]')


Token = Annotated[Any, PlainValidator(_token)]
Cell = Annotated[Any, PlainValidator(_cell)]
Pair = Annotated[Any, PlainValidator(_pair)]


class TagRequest(BaseModel):
    """A JSON request of ``POST /tag`` (see :mod:`crfkit.serving`)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    sentences: list[list[Token]]
    nbest: int | None = None
    constraints: str | None = None
    forbid: list[Pair] | None = None
    allowed: list[list[Cell]] | None = None
    decode: Literal["viterbi", "posterior"] = "viterbi"
    marginals: bool = False
    probability: bool = False

    @model_validator(mode="after")
    def _consistent(self) -> TagRequest:
        if self.nbest is not None and self.nbest < 0:
            raise RequestError(
                f"nbest: a positive integer (or 0: no n-best list), not {self.nbest}"
            )
        if self.nbest and self.decode != "viterbi":
            raise RequestError(
                "nbest: lists the most probable sequences; it does not combine with "
                '"decode": "posterior"'
            )
        if self.allowed is not None:
            if len(self.allowed) != len(self.sentences):
                raise RequestError(
                    f"allowed: one list per sentence ({len(self.sentences)}), "
                    f"not {len(self.allowed)}"
                )
            for i, (cells, sent) in enumerate(zip(self.allowed, self.sentences)):
                if len(cells) != len(sent):
                    raise RequestError(
                        f"allowed[{i}]: one cell per token ({len(sent)}), not {len(cells)}"
                    )
        return self


#: the fields of a JSON request
FIELDS = tuple(TagRequest.model_fields)


def _where(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def parse_request(body: bytes) -> TagRequest:
    """The :class:`TagRequest` of a JSON body; :class:`RequestError` naming the field otherwise."""
    try:
        return TagRequest.model_validate_json(body)
    except ValidationError as e:
        errs = e.errors(include_url=False)
        first = errs[0]
        kind, loc, msg = first["type"], first["loc"], first["msg"]
        if kind == "json_invalid":
            raise RequestError(f"the body is not JSON: {msg}") from None
        if kind == "model_type" and not loc:
            raise RequestError('a JSON request is an object: {"sentences": [...], ...}') from None
        if kind == "extra_forbidden":
            extra = sorted(str(er["loc"][0]) for er in errs if er["type"] == "extra_forbidden")
            raise RequestError(
                f"unknown field(s) {', '.join(extra)} (fields: {', '.join(sorted(FIELDS))})"
            ) from None
        if kind == "missing":
            raise RequestError(f"{_where(loc)}: required") from None
        ctx = (first.get("ctx") or {}).get("error")
        if isinstance(ctx, RequestError):
            raise RequestError(str(ctx)) from None
        msg = msg.removeprefix("Value error, ")
        more = f" (and {len(errs) - 1} more)" if len(errs) > 1 else ""
        raise RequestError(f"{_where(loc) or 'request'}: {msg}{more}") from None
