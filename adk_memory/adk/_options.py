"""Service options ADK developers set where they configure ADK: the URI and `services.yaml`.

`MemoryBankService` reads its own options from the `--memory_service_uri` query
(`redis://h:6379/0?bank=support&generation_model=gemini-2.5-flash&idle_duration=30s`) and from
an `adk_memory:` section of the agents folder's `services.yaml` (ADK reads only its `services:`
list and passes the folder as `agents_dir`). Constructor arguments win over the URI, the URI over
the file. Every other query parameter belongs to the store.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from adk_memory.engine.convert import parse_duration
from adk_memory.errors import InvalidArgument

__all__ = [
    "ServiceOptions",
    "idle_duration_text",
    "options_from_agents_dir",
    "parse_options",
    "split_service_parameters",
]

_SECTION = "adk_memory"


class ServiceOptions(BaseModel):
    """The options of `MemoryBankService` that can come from configuration files or URIs."""

    model_config = ConfigDict(extra="forbid")

    bank: str | None = None
    """The bank id or name."""
    top_k: int | None = None
    """Memories per search."""
    embedding_model: str | None = None
    """The embedding model of a bank created without one."""
    generation_model: str | None = None
    """The model that generates memories (overrides the bank's `generation_config.model`)."""
    idle_duration: str | None = None
    """Generate a session's memories after it has been quiet this long (e.g. `"30s"`)."""
    generation_wait: float | None = Field(default=None, ge=0)
    """Seconds a search waits for the user's pending memories to be generated."""
    run_scheduler: bool | None = None
    """Flush due ingest streams in the background on each event loop."""

    def over(self, fallback: ServiceOptions) -> ServiceOptions:
        """These options, with `fallback`'s where these are unset."""
        merged = {**fallback.model_dump(exclude_none=True), **self.model_dump(exclude_none=True)}
        return ServiceOptions(**merged)


def parse_options(values: dict[str, Any], *, where: str) -> ServiceOptions:
    try:
        return ServiceOptions.model_validate(values)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(part) for part in first["loc"])
        raise InvalidArgument(
            f"{where}: option {key!r}: {first['msg']}. Known options: "
            f"{', '.join(ServiceOptions.model_fields)}.",
            field=key,
        ) from exc


def split_service_parameters(uri: str) -> tuple[str, ServiceOptions]:
    """The store URI without the service's own query parameters, and those parameters."""
    from urllib.parse import parse_qsl, urlencode

    base, separator, query = uri.partition("?")
    if not separator:
        return uri, ServiceOptions()
    pairs = parse_qsl(query, keep_blank_values=True)
    mine = {key: value for key, value in pairs if key in ServiceOptions.model_fields}
    rest = [(key, value) for key, value in pairs if key not in ServiceOptions.model_fields]
    options = parse_options(mine, where="memory service URI")
    return (f"{base}?{urlencode(rest)}" if rest else base), options


def options_from_agents_dir(agents_dir: str | None) -> ServiceOptions:
    """The `adk_memory:` section of `services.yaml` (or `.yml`) in ADK's agents folder."""
    if not agents_dir:
        return ServiceOptions()
    for name in ("services.yaml", "services.yml"):
        path = Path(agents_dir) / name
        if path.is_file():
            import yaml  # type: ignore[import-untyped]

            content = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
            section = content.get(_SECTION) if isinstance(content, dict) else None
            if section is None:
                return ServiceOptions()
            if not isinstance(section, dict):
                raise InvalidArgument(
                    f"{path}: the {_SECTION!r} section must be a mapping of option to value.",
                    field=_SECTION,
                )
            return parse_options(section, where=str(path))
    return ServiceOptions()


def idle_duration_text(value: timedelta | str) -> str:
    """A positive idle duration (a `timedelta`, or a string such as `"60s"`) as `"{seconds}s"`."""
    duration = parse_duration(value, field="idle_duration")
    if duration is None or duration <= timedelta(0):
        raise InvalidArgument(
            f"idle_duration must be a positive timedelta or a duration like '60s', not {value!r}.",
            field="idle_duration",
        )
    return f"{duration.total_seconds():.6f}".rstrip("0").rstrip(".") + "s"
