"""Configuration of the Chroma store and the parsing of its URIs.

The URI is the configuration (STYLE §3 "Config"): it chooses embedded or server mode and its
query parameters override the defaults of `ChromaStoreConfig`; keyword arguments to
`ChromaMemoryStore.from_uri` override both. Nothing here touches the network or the disk.

URIs:

* `chroma:///absolute/path`: an embedded, persistent Chroma in that directory.
* `chroma://./relative/path`: the same, relative to the current working directory (the `.` host
  marks it as relative; any other host is refused, since it would be silently ignored).
* `chroma+http://host[:port]` (port 8000 by default) and `chroma+https://host[:port]` (443): a
  Chroma server. A store writes to one only with `lock_url` or `single_host=true` (`_locks`).

Query parameters are the field names of `ChromaStoreConfig` except the location fields, for
example `chroma:///var/lib/adk-memory?collection_prefix=team-a&vector_cache_mb=64`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any, Literal
from urllib.parse import parse_qsl, unquote, urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from adk_memory.errors import InvalidArgument

__all__ = ["SCHEMES", "ChromaStoreConfig", "build_config", "config_from_uri", "serving_options"]

SCHEMES = ("chroma", "chroma+http", "chroma+https")
_LOCATION_FIELDS = frozenset({"path", "host", "port", "ssl"})
_PREFIX = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}")


class ChromaStoreConfig(BaseModel):
    """Where the Chroma data lives and how the store uses it. Frozen; build a new one to change."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str | None = None
    """Directory of an embedded, persistent Chroma (`chroma:///path`); exclusive with `host`."""
    host: str | None = None
    """Host name of a Chroma server (`chroma+http://host:port`); exclusive with `path`."""
    port: int = Field(default=8000, ge=1, le=65535)
    """Port of the Chroma server."""
    ssl: bool = False
    """Talk HTTPS to the server (`chroma+https://`)."""
    headers: Mapping[str, str] = Field(default_factory=dict)
    """Extra HTTP headers for the server, e.g. `{"X-Chroma-Token": …}`; never logged."""
    tenant: str = "default_tenant"
    """Chroma tenant holding the collections."""
    database: str = "default_database"
    """Chroma database holding the collections."""
    collection_prefix: str = "adkmem"
    """Start of every collection name this store creates (`<prefix>.banks`,
    `<prefix>.<bank>.mem`, `<prefix>.<bank>.aux`); stores with different prefixes share a Chroma
    without seeing each other. Letters, digits, `_` and `-`, starting with a letter or digit."""
    vector_cache_mb: float = Field(default=256.0, ge=0)
    """Memory for the vectors of recently searched or written scopes, per store (least recently used
    scopes are dropped first; a scope larger than all of it is never kept). Each entry is
    checked against the scope's version before use, so it is never stale; 0 turns it off."""
    hnsw_ef_construction: int = Field(default=100, ge=1)
    """HNSW `ef_construction` of new memory collections (build quality)."""
    hnsw_ef_search: int = Field(default=100, ge=1)
    """HNSW `ef_search` of new memory collections (searches are exact and do not use it)."""
    hnsw_max_neighbors: int = Field(default=16, ge=2)
    """HNSW `max_neighbors` (M) of new memory collections."""
    lock_url: str | None = None
    """A `redis://` or `rediss://` URL for the locks that serialise writes and generation: what a
    Chroma server written from several hosts (or containers) needs (requires
    `adk-memory-redis`). Embedded stores lock with files next to the data; a server store needs
    this or `single_host`, else its writes are refused (`_locks`)."""
    single_host: bool = False
    """Every process that writes to this Chroma server runs on this host: lock with files in
    `lock_dir`, named after an id read from the server (not after the URI), so that every such
    process meets the same locks however it spells the server's address and whatever its
    temporary directory. Exclusive with `lock_url`; for a server only."""
    process: Literal["inline", "child"] = "inline"
    """Where an embedded store runs Chroma: in this process (`inline`), or in a child process of
    its own (`child`: `_child`), which keeps Chroma's writes from holding this process's GIL. A
    child costs about a second to start and a round trip a call, and gives a process serving many
    callers (an ADK runner, `adk-memory serve`, `adk-memory mcp`) shorter turns and more
    requests a second; those hosts choose it when the URI does not (`serving_options`). The
    directory's first store in a process decides for the others. For an embedded store only."""
    lock_dir: str = "/var/lock/adk-memory"
    """The folder of `single_host`'s lock files: absolute, never the temporary directory (which
    systemd's PrivateTmp, containers and `TMPDIR` make differ between processes). Every process
    that writes to the server must be able to write it; set only with `single_host`."""

    @field_validator("collection_prefix")
    @classmethod
    def _check_prefix(cls, value: str) -> str:
        if not _PREFIX.fullmatch(value):
            raise ValueError(
                "must be 1-63 letters, digits, '_' or '-', starting with a letter or digit"
            )
        return value

    @field_validator("lock_url")
    @classmethod
    def _check_lock_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("redis://", "rediss://")):
            raise ValueError("must be a redis:// or rediss:// URL")
        return value

    @field_validator("single_host")
    @classmethod
    def _check_single_host(cls, value: bool, info: ValidationInfo) -> bool:
        if value and info.data.get("path") is not None:
            raise ValueError("is for a Chroma server; an embedded store locks next to its data")
        if value and info.data.get("lock_url") is not None:
            raise ValueError("and lock_url exclude each other: keep lock_url for several hosts")
        return value

    @field_validator("lock_dir")
    @classmethod
    def _check_lock_dir(cls, value: str, info: ValidationInfo) -> str:
        if not info.data.get("single_host"):
            raise ValueError("is the folder of single_host's locks; set single_host=true too")
        if not PurePath(value).is_absolute():
            raise ValueError("must be an absolute path (the same for every process)")
        return value

    @model_validator(mode="after")
    def _one_location(self) -> ChromaStoreConfig:
        if self.path is not None and self.host is not None:
            raise ValueError("set either path (embedded) or host (server), not both")
        if self.process == "child" and self.path is None:
            raise ValueError("process=child is for an embedded store (chroma:///path)")
        return self

    @property
    def location(self) -> str:
        """Where the data is, for messages and logs (no credentials)."""
        if self.path is not None:
            return f"embedded Chroma at {self.path}"
        if self.host is not None:
            scheme = "https" if self.ssl else "http"
            return f"Chroma server {scheme}://{self.host}:{self.port}"
        return "a caller-provided Chroma client"


def build_config(values: Mapping[str, Any], *, source: str) -> ChromaStoreConfig:
    """Validates config values, turning pydantic's error into `InvalidArgument` naming the field.

    Args:
        values: Field values (strings from a URI are converted by pydantic).
        source: Where they came from, for the message (`"URI"`, `"options"`).

    Returns:
        The frozen config.

    Raises:
        InvalidArgument: A value is missing, unknown or of the wrong type.
    """
    try:
        return ChromaStoreConfig.model_validate(dict(values))
    except ValidationError as exc:
        first = exc.errors()[0]
        name = ".".join(str(part) for part in first["loc"]) or "uri"
        if first["type"] == "extra_forbidden":
            known = ", ".join(sorted(set(ChromaStoreConfig.model_fields) - _LOCATION_FIELDS))
            message = f"Unknown Chroma store parameter {name!r} in the {source}; known: {known}."
        else:
            message = f"Chroma store parameter {name!r} in the {source} is invalid: {first['msg']}."
        raise InvalidArgument(message, field=name) from None


def config_from_uri(uri: str, options: Mapping[str, Any]) -> ChromaStoreConfig:
    """Parses a `chroma://`, `chroma+http://` or `chroma+https://` URI and applies the options.

    Args:
        uri: The storage URI (see the module docstring).
        options: Keyword options; they override the URI's query parameters.

    Returns:
        The config.

    Raises:
        InvalidArgument: The URI has another scheme, no path or host, a query parameter that is not
            a config field, or a value of the wrong type.
    """
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    values: dict[str, Any] = {}
    if scheme == "chroma":
        values["path"] = _embedded_path(parts.netloc, unquote(parts.path))
    elif scheme in ("chroma+http", "chroma+https"):
        try:
            host, port = parts.hostname, parts.port
        except ValueError:
            host, port = None, None
        if not host or parts.path not in ("", "/"):
            raise InvalidArgument(
                f"A Chroma server URI is {scheme}://host:port with nothing after the port; "
                f"got host {host!r} and path {_clip(parts.path)}.",
                field="uri",
            )
        values["host"] = host
        values["ssl"] = scheme == "chroma+https"
        values["port"] = port or (443 if scheme == "chroma+https" else 8000)
    else:
        raise InvalidArgument(
            f"ChromaMemoryStore takes chroma:///path, chroma+http://host:port or "
            f"chroma+https://host:port URIs, not {scheme or 'no scheme'!r}.",
            field="uri",
        )
    seen: set[str] = set()
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name in seen:
            raise InvalidArgument(f"URI parameter {name!r} is given twice; keep one.", field=name)
        if name in _LOCATION_FIELDS:
            raise InvalidArgument(
                f"URI parameter {name!r} is set by the URI itself; remove it.", field=name
            )
        seen.add(name)
        values[name] = value
    for name, value in options.items():
        if name in _LOCATION_FIELDS:
            raise InvalidArgument(
                f"Option {name!r} is set by the URI; change the URI instead.", field=name
            )
        values[name] = value
    return build_config(values, source="URI")


def serving_options(uri: str) -> dict[str, Any]:
    """The options a process serving many callers adds to `uri`.

    `process=child` for an embedded URI that does not choose its process itself.
    """
    parts = urlsplit(uri)
    chosen = any(name == "process" for name, _ in parse_qsl(parts.query, keep_blank_values=True))
    return {} if chosen or parts.scheme.lower() != "chroma" else {"process": "child"}


def _embedded_path(netloc: str, path: str) -> str:
    if netloc == "." and path:
        return "." + path
    if netloc == "" and path.startswith("/") and path != "/":
        return path
    raise InvalidArgument(
        "An embedded Chroma URI is chroma:///absolute/path (three slashes) or "
        f"chroma://./relative/path; got host {netloc!r} and path {path!r}. For a Chroma server "
        "use chroma+http://host:port.",
        field="uri",
    )


def _clip(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")
