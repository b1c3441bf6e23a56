"""Key and index names: the only place they are spelled (see the key layout in `_store`).

`StoreKeys` names the store-wide keys of one prefix and each bank's record key; `Bank` names
every key of one epoch of a bank, each under the bank's hash tag `{P:B}` (one cluster slot).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from adk_memory.errors import InvalidArgument

_BANK_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")


@dataclass(frozen=True, slots=True)
class StoreKeys:
    """The store-wide keys under one `key_prefix`, and the record key of each bank."""

    prefix: str

    @property
    def registry(self) -> str:
        return f"{self.prefix}:banks"

    @property
    def garbage(self) -> str:
        return f"{self.prefix}:garbage"

    def bank(self, bank_id: str) -> str:
        """The bank's record key; `InvalidArgument` for an id that is not valid."""
        if not isinstance(bank_id, str) or not _BANK_ID.fullmatch(bank_id):
            raise InvalidArgument(
                f"Bank id {str(bank_id)[:40]!r} is not valid; use letters, digits, '-', '_' "
                "and '.' (at most 128).",
                field="bank_id",
            )
        return f"{{{self.prefix}:{bank_id}}}:bank"

    def due(self, kind: str) -> str:
        return f"{self.prefix}:due:{kind}"


@dataclass(frozen=True, slots=True)
class Bank:
    """Where one epoch of a bank lives and how its index is built."""

    prefix: str
    bank_id: str
    epoch: str
    dim: int
    algorithm: str
    dtype: str

    @property
    def base(self) -> str:
        return f"{{{self.prefix}:{self.bank_id}}}:{self.epoch}:"

    @property
    def index_name(self) -> str:
        return f"{self.base}idx"

    @property
    def legacy_index_name(self) -> str:
        """The index name before it carried the hash tag (dropped once the new one exists)."""
        return f"{self.prefix}:idx:{self.bank_id}:{self.epoch}"

    def memory(self, memory_id: str) -> str:
        return f"{self.base}m:{memory_id}"

    def revision(self, memory_id: str, revision_id: str) -> str:
        return f"{self.base}r:{memory_id}:{revision_id}"

    def revision_set(self, memory_id: str) -> str:
        return f"{self.base}rz:{memory_id}"

    @property
    def revision_ids(self) -> str:
        return f"{self.base}rids"

    @property
    def revision_expiry(self) -> str:
        return f"{self.base}rexp"

    @property
    def revision_expiry_native(self) -> str:
        return f"{self.base}rexpn"

    def operation(self, path: str) -> str:
        return f"{self.base}op:{path}"

    def documents(self, kind: str) -> str:
        return f"{self.base}doc:{kind}"

    def document_scopes(self, kind: str) -> str:
        return f"{self.base}dsk:{kind}"

    def scoped_documents(self, kind: str) -> str:
        return f"{self.base}dsc:{kind}"

    def scope_version(self, scope_key: str) -> str:
        return f"{self.base}v:{scope_key}"

    def commit_marker(self, write_id: str) -> str:
        return f"{self.base}tx:{write_id}"
