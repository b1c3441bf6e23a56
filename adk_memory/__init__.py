"""adk-memory: a self-hosted Memory Bank, drop-in long-term memory for Google's ADK.

```python
from adk_memory import Client

client = Client(uri="chroma:///var/lib/adk-memory")
bank = client.memory_banks.create()
client.memory_banks.memories.create(name=bank.name, fact="I like blue.", scope={"user_id": "123"})
```
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = [
    "Aborted",
    "AdkMemoryError",
    "AlreadyExists",
    "AsyncClient",
    "AsyncPager",
    "Client",
    "FailedPrecondition",
    "InvalidArgument",
    "ModelUnavailable",
    "NotFound",
    "Pager",
    "PermissionDenied",
    "ResourceExhausted",
    "StoreUnavailable",
    "Unauthenticated",
    "Unimplemented",
    "types",
]

__version__ = "0.1.0"

if TYPE_CHECKING:
    from adk_memory import types
    from adk_memory._async_client import AsyncClient
    from adk_memory._client import Client
    from adk_memory._pagers import AsyncPager, Pager
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

_LAZY = {
    "AsyncClient": "adk_memory._async_client",
    "AsyncPager": "adk_memory._pagers",
    "Client": "adk_memory._client",
    "Pager": "adk_memory._pagers",
    "types": "adk_memory.types",
}
"""Imported on first use: the in-process engine (numpy, the lexical index, embeddings) is not
needed by a process that only talks to an adk-memory server (`adk-memory … --uri http://…`), and
nothing (not even google-genai, under the errors) is imported before the command line is ready
for it."""


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'adk_memory' has no attribute {name!r}")
    value = importlib.import_module(_LAZY.get(name, "adk_memory.errors"))
    found = value if name == "types" else getattr(value, name)
    globals()[name] = found
    return found
