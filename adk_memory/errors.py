"""Typed errors: every error adk-memory raises on purpose.

```
AdkMemoryError                (INTERNAL, 500)
 ├── InvalidArgument          (INVALID_ARGUMENT, 400)   malformed request; `field` names the part
 ├── Unauthenticated          (UNAUTHENTICATED, 401)
 ├── PermissionDenied         (PERMISSION_DENIED, 403)
 ├── NotFound                 (NOT_FOUND, 404)
 ├── AlreadyExists            (ALREADY_EXISTS, 409)
 ├── FailedPrecondition       (FAILED_PRECONDITION, 400) the system is not in a state to do it
 ├── Aborted                  (ABORTED, 409)            a concurrent write changed what was read
 ├── ResourceExhausted        (RESOURCE_EXHAUSTED, 429) a documented limit was reached
 ├── Unimplemented            (UNIMPLEMENTED, 501)
 ├── StoreUnavailable         (UNAVAILABLE, 503)        the storage backend could not be reached
 └── ModelUnavailable         (UNAVAILABLE, 503)        the model failed or gave no valid answer
```

Each error carries its google.rpc code and HTTP status, so the REST layer needs no mapping table.
Messages say what was wrong and how to fix it; they never contain a fact, a scope value or a
password.
"""

from __future__ import annotations

from typing import ClassVar

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


class AdkMemoryError(Exception):
    """Root of every error adk-memory raises on purpose."""

    code: ClassVar[str] = "INTERNAL"
    http_status: ClassVar[int] = 500

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field  # the request field at fault, e.g. "scope.user_id" or "filter"


class InvalidArgument(AdkMemoryError):
    """The request is malformed; `field` names the part to fix."""

    code = "INVALID_ARGUMENT"
    http_status = 400


class Unauthenticated(AdkMemoryError):
    """The request carries no valid credentials."""

    code = "UNAUTHENTICATED"
    http_status = 401


class PermissionDenied(AdkMemoryError):
    """The credentials are valid but lack the permission or the bank."""

    code = "PERMISSION_DENIED"
    http_status = 403


class NotFound(AdkMemoryError):
    """The named resource does not exist (or has expired)."""

    code = "NOT_FOUND"
    http_status = 404


class AlreadyExists(AdkMemoryError):
    """A resource with that name exists already."""

    code = "ALREADY_EXISTS"
    http_status = 409


class FailedPrecondition(AdkMemoryError):
    """The request is valid but the system is not in a state to carry it out."""

    code = "FAILED_PRECONDITION"
    http_status = 400


class Aborted(AdkMemoryError):
    """A concurrent write changed or removed what this request read; nothing was changed.

    Read again and retry: the message says what changed.
    """

    code = "ABORTED"
    http_status = 409


class ResourceExhausted(AdkMemoryError):
    """A documented size or count limit was reached."""

    code = "RESOURCE_EXHAUSTED"
    http_status = 429


class Unimplemented(AdkMemoryError):
    """The feature exists in the managed service but not here."""

    code = "UNIMPLEMENTED"
    http_status = 501


class StoreUnavailable(AdkMemoryError):
    """The storage backend could not be reached or failed mid-call; nothing was changed."""

    code = "UNAVAILABLE"
    http_status = 503


class ModelUnavailable(AdkMemoryError):
    """The memory model could not be called, timed out, or gave no valid answer; nothing changed."""

    code = "UNAVAILABLE"
    http_status = 503
