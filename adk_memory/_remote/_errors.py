"""The server's answers as our typed errors: the one place a remote call's failures are mapped.

The REST server answers every failure with the Google error envelope (`{"error": {"code",
"message", "status", "details"}}`), which google-genai raises as its `ClientError` or
`ServerError`. `server_errors` rebuilds our error of that status (`NotFound`, `Aborted`, …) with
its message and, from a `BadRequest` field violation, its `field`, so a caller catches the same
class through `http://` as in process; a message that names an operation or option comes with
its `wording` template, so the advice reads in the caller's terms (`--force` on the CLI,
`force=True` in Python). `UNAVAILABLE` is `StoreUnavailable` unless the envelope's `ErrorInfo`
carries `ModelUnavailable.reason`. httpx's transport errors (a refused connection, a
server that died mid-answer, a timeout) become `StoreUnavailable`, naming the server and what is
known about the call's outcome: each write is one atomic step on the server, so it happened
entirely or not at all. An answer adk-memory's API never gives (a success that is not a JSON
object of the expected shape: something else answers at the URI) is `FailedPrecondition` on
`uri`, never the parser's own exception.
"""

from __future__ import annotations

import contextlib
import json
import ssl
from collections.abc import Iterator
from typing import Any

import httpx
from google.genai import errors as genai_errors
from pydantic import ValidationError

from adk_memory.errors import (
    Aborted,
    AdkMemoryError,
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    ModelUnavailable,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    StoreUnavailable,
    Unauthenticated,
    Unimplemented,
)

__all__ = ["not_our_api", "rebuilt", "server_errors"]

_BY_STATUS: dict[str, type[AdkMemoryError]] = {
    cls.status: cls
    for cls in (
        InvalidArgument,
        Unauthenticated,
        PermissionDenied,
        NotFound,
        AlreadyExists,
        FailedPrecondition,
        Aborted,
        ResourceExhausted,
        Unimplemented,
        StoreUnavailable,
    )
}


_BY_REASON = (ModelUnavailable,)
"""Classes the envelope names by `ErrorInfo.reason` (their status is another class's)."""


def rebuilt(error: genai_errors.APIError, server: str) -> AdkMemoryError:
    """Our error for an error answer of the server at `server` (a URL without credentials)."""
    details = _details(error.details)
    status = str(error.status or "")
    cls = _BY_STATUS.get(status)
    reasons = {detail.get("reason") for detail in details}
    cls = next((known for known in _BY_REASON if known.reason in reasons), cls)
    message = str(error.message or "")
    if cls is None:
        # Not our envelope: something else answers at that address (a proxy, another program).
        shown = f"HTTP {error.code}" + (f" {status}" if status else "")
        if error.code and error.code >= 500:
            return StoreUnavailable(
                f"The server at {server} answered {shown} instead of adk-memory's API; is "
                "adk-memory serve running there?"
            )
        return not_our_api(server, shown)
    # The marked template, when the server sent one, words the advice in the caller's terms.
    template = _template(details) or message or f"The server at {server} answered {status}."
    return cls(template, field=_field(details))


def not_our_api(server: str, answered: str) -> FailedPrecondition:
    """The error for an answer of `server` that adk-memory's API never gives (`answered`)."""
    return FailedPrecondition(
        f"The server at {server} answered {answered}, which is not adk-memory's API; check "
        "the URI (it names an `adk-memory serve`, e.g. http://127.0.0.1:8080).",
        field="uri",
    )


@contextlib.contextmanager
def server_errors(server: str) -> Iterator[None]:
    """Raises what fails inside as our typed errors (see the module docstring)."""
    try:
        yield
    except AdkMemoryError:
        raise
    except genai_errors.APIError as exc:
        raise rebuilt(exc, server) from None
    except httpx.TimeoutException as exc:
        raise StoreUnavailable(
            f"The adk-memory server at {server} did not answer in time ({type(exc).__name__}). "
            "A write it was given is either done entirely or not at all; read before retrying."
        ) from exc
    except httpx.ConnectError as exc:
        if _caused_by(exc, ssl.SSLError):
            raise StoreUnavailable(
                f"The TLS handshake with {server} failed ({_reason(exc)}); nothing was sent. "
                "Give the server a certificate for that host name from a CA this machine "
                "trusts, or point SSL_CERT_FILE at the CA bundle that signed its certificate."
            ) from exc
        raise StoreUnavailable(
            f"Cannot reach the adk-memory server at {server} ({_reason(exc)}); nothing was "
            "sent. Is `adk-memory serve` running there?"
        ) from exc
    except httpx.TransportError as exc:
        raise StoreUnavailable(
            f"The adk-memory server at {server} closed the connection before answering "
            f"({type(exc).__name__}). A write it was given is either done entirely or not at "
            "all (each is one atomic step there); read before retrying."
        ) from exc
    except json.JSONDecodeError:  # only answers are parsed here
        raise not_our_api(server, "a body that is not JSON") from None
    except ValidationError as exc:
        if not exc.title.startswith("_"):  # the SDK's request models are its private ones
            raise not_our_api(server, f"a {exc.title} that does not validate") from None
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "request"
        raise InvalidArgument(f"{where}: {first['msg']}.", field=where) from None


def _details(payload: Any) -> list[dict[str, Any]]:
    error = payload.get("error") if isinstance(payload, dict) else None
    found = error.get("details") if isinstance(error, dict) else None
    return [item for item in found or () if isinstance(item, dict)]


def _field(details: list[dict[str, Any]]) -> str | None:
    for detail in details:
        for violation in detail.get("fieldViolations") or ():
            if isinstance(violation, dict) and isinstance(violation.get("field"), str):
                return str(violation["field"])
    return None


def _template(details: list[dict[str, Any]]) -> str | None:
    """The message's `wording` template from our `ErrorInfo`, if the server sent one."""
    for detail in details:
        metadata = detail.get("metadata") if detail.get("domain") == "adk-memory" else None
        template = metadata.get("template") if isinstance(metadata, dict) else None
        if isinstance(template, str) and template:
            return template
    return None


def _caused_by(exc: BaseException, kind: type[BaseException]) -> bool:
    """Whether `exc` or an exception it was raised from (httpx wraps httpcore's) is a `kind`."""
    seen: BaseException | None = exc
    for _ in range(8):  # a chain is short; a cycle must not loop forever
        if seen is None:
            return False
        if isinstance(seen, kind):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _reason(exc: httpx.TransportError) -> str:
    cause = exc.__cause__ or exc.__context__
    text = str(cause or exc) or type(exc).__name__
    return text[:120]
