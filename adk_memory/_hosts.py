"""Which host names and addresses are this machine's own (loopback), for servers and clients.

A keyless server binds only these, and a client of a server uses no proxy for them and follows a
folder's owner record only to them. Kept apart from `server.auth` so that a client does not
import the server's dependencies to ask.
"""

from __future__ import annotations

import ipaddress

__all__ = ["is_loopback"]

_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def is_loopback(host: str) -> bool:
    """Whether `host` (a name or an address, `[::1]` too) is this machine's loopback."""
    bare = host.strip().strip("[]").lower()
    if bare in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(bare).is_loopback
    except ValueError:
        return False
