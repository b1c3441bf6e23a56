"""`user_token_headers`: per-user credentials for ADK's `McpToolset` against `adk-memory mcp`.

An `McpToolset` built with `headers=` sends the same credential for every ADK user of the
process, so every user shares one scope. ADK's `header_provider` is called with each call's
`ReadonlyContext`; this one answers with a token signed for that context's user (HS256, the
`token_secret` of a key in the MCP server's key file, whose `scope_claims` map `user_id` to the
`sub` claim). The server then confines each call to that user's scope, and ADK pools one MCP
session per distinct header set, so two users never share a session. Tokens are cached per user
and renewed before they expire, so a user keeps one session (and ADK's tool-list cache).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

from adk_memory.errors import FailedPrecondition, InvalidArgument

if TYPE_CHECKING:
    from google.adk.agents.readonly_context import ReadonlyContext

__all__ = ["user_token_headers"]

_MIN_SECRET = 32
"""HS256 secrets shorter than this are refused by the server's key file too."""
_MAX_CACHED_USERS = 10_000


def user_token_headers(
    token_secret: str, *, hours: float = 24.0
) -> Callable[[ReadonlyContext], dict[str, str]]:
    """A `header_provider` for `McpToolset`: `Authorization: Bearer <token of this ADK user>`.

    Each token carries `sub` = the ADK user id and `app` = the app name (map them with
    `scope_claims: {user_id: sub}`, and `app_name: app` if one server serves several apps) and
    expires after `hours`; a user's token is reused until its last tenth of life.

    Args:
        token_secret: The `token_secret` of the server's key (32 characters or more).
        hours: How long each token is valid.

    Returns:
        The callable to pass as `McpToolset(header_provider=...)`.

    Raises:
        InvalidArgument: The secret is too short or `hours` is not positive.
        FailedPrecondition: `joserfc` is not installed (`pip install 'adk-memory[server]'`).
    """
    if len(token_secret) < _MIN_SECRET:
        raise InvalidArgument(
            f"token_secret must have at least {_MIN_SECRET} characters (HS256), as the MCP "
            "server's key file requires.",
            field="token_secret",
        )
    if not hours > 0:
        raise InvalidArgument("hours must be positive.", field="hours")
    try:
        from joserfc import jwt
        from joserfc.jwk import OctKey
    except ImportError:
        raise FailedPrecondition(
            "Signing per-user tokens needs joserfc. Install it with: "
            "pip install 'adk-memory[server]'"
        ) from None
    key = OctKey.import_key(token_secret)
    lifetime = int(hours * 3600)
    cached: OrderedDict[tuple[str, str], tuple[str, float]] = OrderedDict()
    lock = threading.Lock()

    def headers(context: ReadonlyContext) -> dict[str, str]:
        who = (context.session.app_name, context.user_id)
        now = time.time()
        with lock:
            found = cached.get(who)
            if found is None or found[1] - now < lifetime / 10:
                expires = int(now) + lifetime
                claims = {"sub": who[1], "app": who[0], "exp": expires}
                found = (jwt.encode({"alg": "HS256"}, claims, key), float(expires))
                cached[who] = found
            cached.move_to_end(who)
            while len(cached) > _MAX_CACHED_USERS:
                cached.popitem(last=False)
        return {"Authorization": f"Bearer {found[0]}"}

    return headers
