"""`SelfHostedVertexMemoryBankService`: ADK's Vertex AI Memory Bank service on `adk-memory serve`.

ADK's `VertexAiMemoryBankService` reaches Agent Platform through the official SDK and has no
base-URL option; its documented extension point is `_build_api_client` ("Subclasses that need
custom credentials or an endpoint should override this method"). This subclass overrides only
that, so everything else is ADK's own code: the scope `{app_name, user_id}`, `ingest_events`
for sessions, `memories.create` for `add_memory`, `memories.retrieve` for `search_memory`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from google.adk.memory.vertex_ai_memory_bank_service import VertexAiMemoryBankService
from google.oauth2.credentials import Credentials

from adk_memory.adk._loops import run_at_loop_shutdown
from adk_memory.names import Names

if TYPE_CHECKING:
    import agentplatform

__all__ = ["SelfHostedVertexMemoryBankService"]

_NO_TOKEN = "adk-memory-no-token"
"""Sent as the bearer token when the server needs none (a loopback server without keys); a
static token also keeps the SDK from looking for Google credentials."""


class SelfHostedVertexMemoryBankService(VertexAiMemoryBankService):
    """ADK's `VertexAiMemoryBankService`, talking to a self-hosted adk-memory REST server."""

    def __init__(
        self,
        agent_engine_id: str,
        *,
        endpoint: str = "http://127.0.0.1:8080",
        api_key: str | None = None,
        bearer_token: str | None = None,
        project: str = "local",
        location: str = "local",
        http_options: Mapping[str, Any] | None = None,
    ) -> None:
        """Points ADK's Memory Bank service at `endpoint`.

        Args:
            agent_engine_id: The bank's id (`1234…`, `my-bank`) or its full name.
            endpoint: The server's base URL, without `/v1beta1`.
            api_key: A key from the server's key file, sent as `x-goog-api-key`.
            bearer_token: Or a token sent as `Authorization: Bearer …` (a key works too).
            project: The project segment of request paths (any value; the server accepts all).
            location: The location segment of request paths.
            http_options: More `google.genai` HttpOptions fields (`timeout`, `retry_options`,
                `headers`, …); `base_url` is always `endpoint`.

        Raises:
            ValueError: Both `api_key` and `bearer_token` are given, or the endpoint is empty.
        """
        if api_key and bearer_token:
            raise ValueError("Pass api_key or bearer_token, not both.")
        if not endpoint:
            raise ValueError("endpoint must be the server's base URL, e.g. http://127.0.0.1:8080.")
        bank_id = Names.parse_bank(agent_engine_id) if "/" in agent_engine_id else agent_engine_id
        super().__init__(project=project, location=location, agent_engine_id=bank_id)
        self._endpoint = endpoint.rstrip("/")
        self._api_key = api_key
        self._bearer_token = bearer_token
        self._extra_http_options = dict(http_options or {})

    def _build_api_client(self) -> agentplatform.AsyncClient:
        """The official SDK's async client with `base_url` set to the self-hosted endpoint.

        ADK builds one per event loop and never closes it; built on a running loop, it is closed
        when that loop shuts down, so its pooled connections are not left to the collector.
        """
        import agentplatform

        options: dict[str, Any] = {**self._extra_http_options, "base_url": self._endpoint}
        if self._api_key:
            options["headers"] = {
                **dict(options.get("headers") or {}),
                "x-goog-api-key": self._api_key,
            }
        client = agentplatform.Client(
            project=self._project,
            location=self._location,
            credentials=Credentials(token=self._bearer_token or _NO_TOKEN),  # type: ignore[no-untyped-call]
            http_options=options,
        )
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return client.aio
        run_at_loop_shutdown(client.aio.aclose)
        return client.aio

    def __repr__(self) -> str:
        bank, endpoint = self._agent_engine_id, self._endpoint
        return f"{type(self).__name__}(agent_engine_id={bank!r}, endpoint={endpoint!r})"
