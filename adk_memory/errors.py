"""Typed errors: every error adk-memory raises on purpose.

```
google.genai.errors.APIError
 └── AdkMemoryError              (INTERNAL, 500)
      ├── InvalidArgument        (INVALID_ARGUMENT, 400)   malformed request; `field` names the part
      ├── Unauthenticated        (UNAUTHENTICATED, 401)
      ├── PermissionDenied       (PERMISSION_DENIED, 403)
      ├── NotFound               (NOT_FOUND, 404)
      ├── AlreadyExists          (ALREADY_EXISTS, 409)
      ├── FailedPrecondition     (FAILED_PRECONDITION, 400) the system is not in a state to do it
      ├── Aborted                (ABORTED, 409)            a concurrent write changed what was read
      ├── ResourceExhausted      (RESOURCE_EXHAUSTED, 429) a documented limit was reached
      ├── Unimplemented          (UNIMPLEMENTED, 501)
      ├── StoreUnavailable       (UNAVAILABLE, 503)        the storage backend could not be reached
      └── ModelUnavailable       (UNAVAILABLE, 503)        the model failed or gave no valid answer
```

Every 4xx error is also a `google.genai.errors.ClientError` and every 5xx one a `ServerError`,
with `code` (the HTTP status), `status` (the google.rpc code) and `message` set as the SDK sets
them, so code written against the SDK (`except genai_errors.ClientError`) catches ours too. The
REST layer needs no mapping table. `str(error)` is the message alone. Messages say what was
wrong and how to fix it; they never contain a fact, a scope value or a password.
"""

from __future__ import annotations

from typing import Any

from google.genai.errors import APIError, ClientError, ServerError

from adk_memory.wording import render_text

__all__ = [
    "Aborted",
    "AdkMemoryError",
    "AlreadyExists",
    "FailedPrecondition",
    "InvalidArgument",
    "ModelUnavailable",
    "NotFound",
    "PermissionDenied",
    "ResourceExhausted",
    "StoreUnavailable",
    "Unauthenticated",
    "Unimplemented",
]


class AdkMemoryError(APIError):
    """Root of every error adk-memory raises on purpose."""

    code = 500
    """The HTTP status (a class constant of each error, set on the instance as the SDK does)."""
    status: str = "INTERNAL"
    """The google.rpc code."""
    reason: str | None = None
    """The `ErrorInfo` reason the REST envelope carries when `status` alone does not tell this
    class apart (a client rebuilds the class from it)."""
    message: str

    def __init__(self, message: str, *, field: str | None = None) -> None:
        self.template = message  # with `wording` markers; the message is its Python wording
        message = render_text(message, "python")
        code, status = type(self).code, type(self).status
        super().__init__(code, {"error": {"code": code, "message": message, "status": status}})
        Exception.__init__(self, message)
        self.field = field  # the request field at fault, e.g. "scope.user_id" or "filter"

    def __reduce__(self) -> tuple[Any, ...]:
        # APIError's own __reduce__ rebuilds a plain APIError, losing the class and `field`.
        return (_rebuild, (type(self), self.template, self.field))


def _rebuild(cls: type[AdkMemoryError], message: str, field: str | None) -> AdkMemoryError:
    return cls(message, field=field)


class InvalidArgument(AdkMemoryError, ClientError):
    """The request is malformed; `field` names the part to fix."""

    code = 400
    status = "INVALID_ARGUMENT"


class Unauthenticated(AdkMemoryError, ClientError):
    """The request carries no valid credentials."""

    code = 401
    status = "UNAUTHENTICATED"


class PermissionDenied(AdkMemoryError, ClientError):
    """The credentials are valid but lack the permission or the bank."""

    code = 403
    status = "PERMISSION_DENIED"


class NotFound(AdkMemoryError, ClientError):
    """The named resource does not exist (or has expired)."""

    code = 404
    status = "NOT_FOUND"


class AlreadyExists(AdkMemoryError, ClientError):
    """A resource with that name exists already."""

    code = 409
    status = "ALREADY_EXISTS"


class FailedPrecondition(AdkMemoryError, ClientError):
    """The request is valid but the system is not in a state to carry it out."""

    code = 400
    status = "FAILED_PRECONDITION"


class Aborted(AdkMemoryError, ClientError):
    """A concurrent write changed or removed what this request read; nothing was changed.

    Read again and retry: the message says what changed.
    """

    code = 409
    status = "ABORTED"


class ResourceExhausted(AdkMemoryError, ClientError):
    """A documented size or count limit was reached."""

    code = 429
    status = "RESOURCE_EXHAUSTED"


class Unimplemented(AdkMemoryError, ServerError):
    """The feature exists in the managed service but not here."""

    code = 501
    status = "UNIMPLEMENTED"


class StoreUnavailable(AdkMemoryError, ServerError):
    """The storage backend could not be reached or failed mid-call; nothing was changed."""

    code = 503
    status = "UNAVAILABLE"


class ModelUnavailable(AdkMemoryError, ServerError):
    """The memory model could not be called, timed out, or gave no valid answer; nothing changed."""

    code = 503
    status = "UNAVAILABLE"
    reason = "MODEL_UNAVAILABLE"
