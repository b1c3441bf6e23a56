"""adk-memory: a self-hosted Memory Bank, drop-in long-term memory for Google's ADK.

```python
from adk_memory import Client

client = Client(uri="chroma:///var/lib/adk-memory")
bank = client.memory_banks.create()
client.memory_banks.memories.create(name=bank.name, fact="I like blue.", scope={"user_id": "123"})
```
"""

from __future__ import annotations

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
