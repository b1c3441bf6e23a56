"""Translation of redis-py and redisvl errors into adk-memory errors, at one boundary.

Every driver call of the store runs inside `redis_errors()`, so the engine never sees a redis
type. Messages name the server's address, never the password, and never quote a fact or scope.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import redis.exceptions
from redisvl.exceptions import RedisVLError

from adk_memory.errors import AdkMemoryError, FailedPrecondition, StoreUnavailable

logger = logging.getLogger(__name__)

__all__ = ["NO_SEARCH_MODULE", "check_warnings", "is_missing_index", "redis_errors"]

NO_SEARCH_MODULE = (
    "The Redis server at {where} has no query engine (the RediSearch module, commands FT.*), "
    "which the adk-memory Redis store needs for vector search. Use Redis 8 or later (the query "
    "engine is built in), Redis Stack, a managed Redis with search enabled, or start the server "
    "with --loadmodule /path/to/redisearch.so."
)

# RediSearch's wording differs between versions ("Unknown Index name", "idx: no such index").
_MISSING_INDEX_FRAGMENTS = ("no such index", "unknown index name")


def is_missing_index(exc: BaseException) -> bool:
    """Whether a server error says that the search index does not exist."""
    text = str(exc).lower()
    return any(fragment in text for fragment in _MISSING_INDEX_FRAGMENTS)


def check_warnings(warnings: list[str], *, where: str, timeout_ms: int) -> None:
    """`StoreUnavailable` when a search's warnings say it timed out (its answer is partial)."""
    for warning in warnings:
        if "timeout" in warning.lower():
            raise StoreUnavailable(
                f"A search on Redis at {where} reached query_timeout_ms "
                f"({timeout_ms} ms) and would have returned partial "
                "results; retry, or raise query_timeout_ms (0 disables the limit)."
            )


def _is_missing_module(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "unknown command" in text and "'ft." in text


@contextmanager
def redis_errors(where: str, action: str) -> Iterator[None]:
    """Re-raises driver errors as `StoreUnavailable` or `FailedPrecondition`, `from` the cause.

    Args:
        where: `host:port` of the server, for messages (never the password).
        action: What the store was doing, for messages ("apply a write batch").
    """
    try:
        yield
    except AdkMemoryError:
        raise
    except redis.exceptions.AuthenticationError as exc:
        raise StoreUnavailable(
            f"Redis at {where} refused the credentials while trying to {action}; check the user "
            "and password in the URI (redis://user:password@host:port/db)."
        ) from exc
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
        raise StoreUnavailable(
            f"Redis at {where} could not be reached or stopped answering while trying to "
            f"{action} ({type(exc).__name__}); nothing was changed unless the write had "
            "already been committed. Check that the server is up and the URI is right."
        ) from exc
    except redis.exceptions.ResponseError as exc:
        if _is_missing_module(exc):
            raise FailedPrecondition(NO_SEARCH_MODULE.format(where=where)) from exc
        raise StoreUnavailable(
            f"Redis at {where} answered with an error while trying to {action}: {str(exc)[:200]}"
        ) from exc
    except redis.exceptions.RedisError as exc:
        raise StoreUnavailable(
            f"Redis at {where} failed while trying to {action} ({type(exc).__name__})."
        ) from exc
    except RedisVLError as exc:
        cause = exc.__cause__
        if cause is not None and _is_missing_module(cause):
            raise FailedPrecondition(NO_SEARCH_MODULE.format(where=where)) from exc
        raise StoreUnavailable(
            f"Redis at {where} failed while trying to {action}: {str(exc)[:200]}"
        ) from exc
    except OSError as exc:
        raise StoreUnavailable(
            f"Redis at {where} could not be reached while trying to {action} "
            f"({type(exc).__name__})."
        ) from exc
