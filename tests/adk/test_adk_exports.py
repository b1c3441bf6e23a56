"""The public names of `adk_memory.adk`, and that importing them costs nothing until used."""

from __future__ import annotations

import subprocess
import sys

import adk_memory.adk


def test_public_names_are_pinned() -> None:
    assert adk_memory.adk.__all__ == [
        "DEFAULT_TOP_K",
        "SCHEMES",
        "EphemeralStoreWarning",
        "MemoryBankEntry",
        "MemoryBankPlugin",
        "MemoryBankService",
        "MemoryServiceBuilder",
        "SelfHostedVertexMemoryBankService",
        "memory_service_builder",
        "memory_service_factory",
        "register_services",
        "user_token_headers",
    ]
    for name in adk_memory.adk.__all__:
        assert getattr(adk_memory.adk, name) is not None


def test_importing_the_package_imports_neither_adk_nor_a_backend() -> None:
    code = (
        "import sys, adk_memory, adk_memory.adk; "
        "loaded = [m for m in sys.modules if m.startswith(('google.adk', 'chromadb', 'redis'))]; "
        "print(loaded); assert not loaded"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
