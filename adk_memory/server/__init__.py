"""The REST server: Agent Platform's Memory Bank API over HTTP, for the official SDK and ADK.

```python
from adk_memory.server import ApiKey, create_app

app = create_app("chroma:///var/lib/adk-memory",
                 api_keys=[ApiKey(name="agent", key="…", permissions=["memories.generate",
                                                                      "memories.retrieve"])])
```

`adk-memory serve --uri URI --host H --port P [--keys FILE] [--allowed-host NAME]
[--cors-origin ORIGIN]` runs it with uvicorn. `app` holds the routes, `auth` the API keys, their
permissions and the Host/Origin guard, `wire` the request and response formats.
"""

from __future__ import annotations

from adk_memory.server.app import DEFAULT_MAX_BODY_BYTES, create_app, serve
from adk_memory.server.auth import PERMISSIONS, ApiKey, ApiKeys

__all__ = ["DEFAULT_MAX_BODY_BYTES", "PERMISSIONS", "ApiKey", "ApiKeys", "create_app", "serve"]
