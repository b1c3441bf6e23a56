"""Service options ADK developers set where they configure ADK: the URI and `services.yaml`.

`MemoryBankService` reads its own options from the `--memory_service_uri` query
(`redis://h:6379/0?bank=support&generation_model=gemini-2.5-flash&idle_duration=30s`) and from
an `adk_memory:` section of the agents folder's `services.yaml` (ADK reads only its `services:`
list and passes the folder as `agents_dir`). Constructor arguments win over the URI, the URI over
the file. Every other query parameter belongs to the store.
"""

from __future__ import annotations

import difflib
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from adk_memory.engine.convert import parse_duration
from adk_memory.engine.retrieval import DEFAULT_TOP_K, MAX_SEARCH_QUERY, MAX_TOP_K
from adk_memory.errors import InvalidArgument
from adk_memory.settings import default_search_timeout

__all__ = [
    "DEFAULT_GENERATION_WAIT",
    "DEFAULT_IDLE_DURATION",
    "DEFAULT_SEARCH_TIMEOUT",
    "DEFAULT_TOP_K",
    "ServiceOptions",
    "idle_duration_text",
    "options_from_agents_dir",
    "parse_options",
    "search_query_within",
    "split_service_parameters",
    "top_k_within",
    "with_service_options",
]

_SECTION = "adk_memory"


DEFAULT_IDLE_DURATION = "60s"
"""A session's memories are generated after it has been quiet this long (if nothing came first)."""

DEFAULT_GENERATION_WAIT = 10.0
"""Seconds a search waits for the user's pending memories to be generated."""

DEFAULT_SEARCH_TIMEOUT = 2.0
"""Seconds each store call of a turn (a search, a listing of streams) waits for the store."""


def top_k_within(value: object, *, field: str = "top_k") -> int:
    """A positive count; above 100 is coerced to 100, as Memory Bank's retrieve does (SPEC §3)."""
    try:
        count = value if isinstance(value, int) else int(str(value))
    except ValueError:
        count = 0
    if isinstance(value, bool) or count < 1:
        raise InvalidArgument(
            f"{field} must be a positive whole number, not {str(value)[:20]!r}.", field=field
        )
    return min(count, MAX_TOP_K)


def idle_duration_text(value: timedelta | str) -> str:
    """A positive idle duration (a `timedelta`, or a string such as `"60s"`) as `"{seconds}s"`."""
    duration = parse_duration(value, field="idle_duration")
    if duration is None or duration <= timedelta(0):
        raise InvalidArgument(
            f"idle_duration must be a positive timedelta or a duration like '60s', not {value!r}.",
            field="idle_duration",
        )
    return f"{duration.total_seconds():.6f}".rstrip("0").rstrip(".") + "s"


class ServiceOptions(BaseModel):
    """The options of `MemoryBankService` that can come from configuration files or URIs."""

    model_config = ConfigDict(extra="forbid")

    bank: str | None = None
    """The bank id or name."""
    top_k: Annotated[int, AfterValidator(top_k_within)] = DEFAULT_TOP_K
    """Memories per search."""
    embedding_model: str | None = None
    """The embedding model of a bank created without one."""
    generation_model: str | None = None
    """The model that generates memories (overrides the bank's `generation_config.model`)."""
    idle_duration: Annotated[str, AfterValidator(idle_duration_text)] = DEFAULT_IDLE_DURATION
    """Generate a session's memories after it has been quiet this long (e.g. `"30s"`)."""
    generation_wait: float = Field(default=DEFAULT_GENERATION_WAIT, ge=0)
    """Seconds a search waits for the user's pending memories to be generated."""
    search_timeout: float = Field(
        default_factory=lambda: default_search_timeout() or DEFAULT_SEARCH_TIMEOUT,
        validate_default=True,
        gt=0,
        le=60,
    )
    """Seconds each store call of a turn waits for the store; a timeout opens the breaker
    (default: `ADK_MEMORY_SEARCH_TIMEOUT`, else 2)."""
    run_scheduler: bool = True
    """Flush due ingest streams in the background on each event loop."""

    def over(self, fallback: ServiceOptions) -> ServiceOptions:
        """These options, with `fallback`'s where these are unset."""
        merged = {**fallback.model_dump(exclude_unset=True), **self.model_dump(exclude_unset=True)}
        return ServiceOptions.model_validate(merged)


def parse_options(values: dict[str, Any], *, where: str) -> ServiceOptions:
    """The options given (a None value is not given)."""
    try:
        return ServiceOptions.model_validate({k: v for k, v in values.items() if v is not None})
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(part) for part in first["loc"])
        raise InvalidArgument(
            f"{where}: option {key!r}: {first['msg']}. Known options: "
            f"{', '.join(ServiceOptions.model_fields)}.",
            field=key,
        ) from exc


def _defaults() -> ServiceOptions:
    """No option given (the defaults read `ADK_MEMORY_SEARCH_TIMEOUT`, checked here)."""
    return parse_options({}, where="ADK_MEMORY_SEARCH_TIMEOUT")


def split_service_parameters(uri: str) -> tuple[str, ServiceOptions]:
    """The store URI without the service's own query parameters, and those parameters.

    Raises:
        InvalidArgument: A parameter that looks like a misspelt service option (the store
            refuses the other unknown ones when the service builds its clients).
    """
    from urllib.parse import parse_qsl, urlencode

    base, separator, query = uri.partition("?")
    if not separator:
        return uri, _defaults()
    pairs = parse_qsl(query, keep_blank_values=True)
    mine = {key: value for key, value in pairs if key in ServiceOptions.model_fields}
    rest = [(key, value) for key, value in pairs if key not in ServiceOptions.model_fields]
    for key, _ in rest:
        _refuse_near_miss(key, where="the memory service URI")
    options = parse_options(mine, where="memory service URI")
    return (f"{base}?{urlencode(rest)}" if rest else base), options


def _refuse_near_miss(key: str, *, where: str) -> None:
    close = difflib.get_close_matches(key, list(ServiceOptions.model_fields), n=1, cutoff=0.8)
    if close:
        raise InvalidArgument(
            f"Unknown option {key!r} in {where}; did you mean {close[0]!r}? The service's "
            f"options are {_known()}; other query parameters configure the store.",
            field=key,
        )


def _known() -> str:
    return ", ".join(ServiceOptions.model_fields)


def _near(key: str, name: str) -> bool:
    return difflib.SequenceMatcher(None, key.lower().replace("-", "_"), name).ratio() >= 0.8


def with_service_options(error: InvalidArgument) -> InvalidArgument:
    """A store's refusal of a URI parameter, also listing the service's own options."""
    return InvalidArgument(
        f"{error.message} The memory service's own options are {_known()}.", field=error.field
    )


def search_query_within(query: str) -> str:
    """The query cut to the retrieve limit, keeping its end (where the question usually is)."""
    if len(query) <= MAX_SEARCH_QUERY:
        return query
    return query[-MAX_SEARCH_QUERY:]


def options_from_agents_dir(agents_dir: str | None) -> ServiceOptions:
    """The `adk_memory:` section of `services.yaml` (or `.yml`) in ADK's agents folder."""
    if not agents_dir:
        return _defaults()
    for name in ("services.yaml", "services.yml"):
        path = Path(agents_dir) / name
        if path.is_file():
            import yaml  # type: ignore[import-untyped]

            content = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
            if isinstance(content, dict):
                for key in content:
                    if key != _SECTION and _near(str(key), _SECTION):
                        raise InvalidArgument(
                            f"{path}: unknown section {key!r}; did you mean {_SECTION!r}? "
                            f"Its keys are the service's options: {_known()}.",
                            field=str(key),
                        )
            section = content.get(_SECTION) if isinstance(content, dict) else None
            if section is None:
                return _defaults()
            if not isinstance(section, dict):
                raise InvalidArgument(
                    f"{path}: the {_SECTION!r} section must be a mapping of option to value.",
                    field=_SECTION,
                )
            return parse_options(section, where=str(path))
    return _defaults()
