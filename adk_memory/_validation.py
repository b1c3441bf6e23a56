"""Requests into the SDK's pydantic models, with pydantic's errors as `InvalidArgument`.

Kept apart from the engine so that a client of an adk-memory server (`adk_memory._remote`)
validates requests exactly as the engine does without importing it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from adk_memory.errors import InvalidArgument

__all__ = ["check_unicode", "parse_model"]

M = TypeVar("M", bound=BaseModel)

_WRONG_TYPE = (
    "{where} holds a value of the wrong type: an enum field takes one of its names as a string, "
    "and lists and objects go only where the API reference shows them."
)
"""google-genai's enums look a non-string value up with `.upper()`, and the AttributeError (or
TypeError) that raises is not turned into a pydantic ValidationError, so it is caught here."""


def parse_model(model: type[M], value: Any, *, field: str) -> M:
    """Validates a dict or model into `model`, turning pydantic errors into InvalidArgument."""
    if value is None:
        return model()
    if isinstance(value, model):
        return value
    if isinstance(value, BaseModel):
        value = value.model_dump(exclude_none=True)
    check_unicode(value, field=field)
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or field
        raise InvalidArgument(
            f"{field}.{where}: {first['msg']}.", field=f"{field}.{where}"
        ) from None
    except (AttributeError, TypeError):
        raise InvalidArgument(_WRONG_TYPE.format(where=field), field=field) from None


def check_unicode(value: Any, *, field: str) -> None:
    """Refuses strings that are not Unicode text, walking lists and mappings.

    A lone surrogate (what a JSON escape of U+D800 decodes to) cannot be encoded by any store,
    digest or response, so it is an `InvalidArgument` here rather than a crash later.
    """
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidArgument(
                f"{field} holds text that is not valid Unicode (a lone surrogate such as "
                "\\ud800); send UTF-8 text.",
                field=field,
            ) from None
    elif isinstance(value, Mapping):
        for key, item in value.items():
            check_unicode(key, field=field)
            check_unicode(item, field=field)
    elif isinstance(value, list | tuple):
        for item in value:
            check_unicode(item, field=field)
