"""A bank's search index: its schema, creation, rebuild wait and drop.

`SearchIndex` also remembers which indexes this store knows to exist. A new index waits until it
has indexed what is already stored under its prefix.

A bank indexed before the index name carried the hash tag (`Bank.legacy_index_name`) gets its
new index built from its memories on first use, and the old one dropped once it is complete.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import redis.exceptions
from redis.commands.search.index_definition import IndexDefinition, IndexType
from redisvl.schema import IndexSchema

from adk_memory.errors import StoreUnavailable
from adk_memory_redis._codec import text
from adk_memory_redis._config import RedisClient, RedisStoreConfig
from adk_memory_redis._connection import command
from adk_memory_redis._errors import is_missing_index
from adk_memory_redis._layout import Bank

_INDEXING_WAIT_SECONDS = 120.0
"""How long a call waits for a rebuilt index to take in the bank's stored memories."""


class SearchIndex:
    """Creates and drops the banks' indexes, remembering those that exist."""

    def __init__(self, config: RedisStoreConfig, where: str) -> None:
        self._config = config
        self._where = where
        self.known: set[str] = set()
        """Names of the indexes this store created or found to exist."""

    def schema(self, bank: Bank) -> IndexSchema:
        vector_attrs: dict[str, Any] = {
            "algorithm": bank.algorithm.lower(),
            "dims": bank.dim,
            "distance_metric": "l2",
            "datatype": bank.dtype,
        }
        if bank.algorithm == "HNSW":
            vector_attrs.update(
                m=self._config.hnsw_m,
                ef_construction=self._config.hnsw_ef_construction,
                ef_runtime=self._config.hnsw_ef_runtime,
            )
        tag = {"case_sensitive": True}
        fields: list[dict[str, Any]] = [
            {"name": "memory_id", "type": "tag", "attrs": {**tag, "sortable": True}},
            {"name": "scope_key", "type": "tag", "attrs": tag},
            {"name": "scope_tags", "type": "tag", "attrs": tag},
            {"name": "fact_tag", "type": "tag", "attrs": tag},
            {"name": "topic_tags", "type": "tag", "attrs": tag},
            {"name": "meta_tags", "type": "tag", "attrs": tag},
            {"name": "create_us", "type": "numeric", "attrs": {"sortable": True}},
            {"name": "update_us", "type": "numeric", "attrs": {"sortable": True}},
            {"name": "live_until", "type": "numeric"},
            {"name": "expire_us", "type": "numeric"},
            {"name": "embedding", "type": "vector", "attrs": vector_attrs},
        ]
        if self._config.full_text:
            fields.append({"name": "fact", "type": "text", "attrs": {"no_stem": True}})
        return IndexSchema.from_dict(
            {
                "index": {
                    "name": bank.index_name,
                    "prefix": f"{bank.base}m:",
                    "storage_type": "hash",
                },
                "fields": fields,
            }
        )

    async def ensure(self, client: RedisClient, bank: Bank, *, known: bool = True) -> None:
        """Creates the bank's index unless it exists (`known`: trust `self.known` for that)."""
        if known and bank.index_name in self.known:
            return
        # redis-py's create_index, not redisvl's create: on a cluster redisvl sends FT.CREATE to
        # a default node, while the client routes it to the index name's slot owner.
        definition = IndexDefinition(  # type: ignore[no-untyped-call]
            prefix=[f"{bank.base}m:"], index_type=IndexType.HASH
        )
        try:
            await client.ft(bank.index_name).create_index(
                self.schema(bank).redis_fields, definition=definition
            )
        except redis.exceptions.ResponseError as exc:
            if "already exists" not in str(exc).lower():
                raise
        else:
            await self._wait_until_indexed(client, bank.index_name)
            await self.drop(client, bank.legacy_index_name, documents=False)
        self.known.add(bank.index_name)

    async def _wait_until_indexed(self, client: RedisClient, name: str) -> None:
        """Waits while a new index takes in documents already stored under its prefix.

        An index is built afresh over existing documents when a bank's slot has moved to
        another shard (open-source RediSearch keeps one index per shard) or when a bank indexed
        under the old name is first used; until it has read them all it would answer partially.
        """
        deadline = time.monotonic() + _INDEXING_WAIT_SECONDS
        delay = 0.005
        while True:
            info = await client.ft(name).info()  # type: ignore[no-untyped-call]
            indexing = {text(key): value for key, value in info.items()}.get("indexing", 0)
            if not float(text(indexing)):  # RESP2 names the fields in str, RESP3 in bytes
                return
            if time.monotonic() > deadline:
                raise StoreUnavailable(
                    f"The search index of a memory bank on Redis at {self._where} is still being "
                    f"built after {_INDEXING_WAIT_SECONDS:g} s; retry the request later."
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.25)

    async def drop(self, client: RedisClient, name: str, *, documents: bool) -> None:
        """Drops an index if it exists (`documents`: with the hashes it indexes)."""
        try:
            args = ["FT.DROPINDEX", name] + (["DD"] if documents else [])
            await command(client, *args)
        except redis.exceptions.ResponseError as exc:
            if not is_missing_index(exc):
                raise
        self.known.discard(name)
