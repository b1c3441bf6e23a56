"""Lets `adk run` build adk-memory's service from `--memory_service_uri=chroma://…|redis://…`.

`adk run` reads `services.py`/`services.yaml` from the agent's own folder (`adk web` and
`adk api_server` read the one in `sample_agents/`). Only adk-memory's schemes are registered;
`memory://` stays ADK's in-memory service.
"""

from __future__ import annotations

from adk_memory.adk import register_services

register_services()
