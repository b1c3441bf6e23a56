"""The README's main job: `adk-memory quickstart`, offline, on embedded Chroma (real MiniLM)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_quickstart_runs_offline_on_embedded_chroma(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GOOGLE_", "GEMINI_"))}
    env.update(
        {"HF_HUB_OFFLINE": "1", "COLUMNS": "120", "ADK_MEMORY_URI": f"chroma://{tmp_path}/db"}
    )
    env.pop("ADK_MEMORY_EMBEDDING_MODEL", None)
    script = Path(sys.executable).parent / "adk-memory"
    result = subprocess.run(
        [str(script), "quickstart"], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert f"chroma://{tmp_path}/db" in out
    assert 'embedding_model="multilingual-e5-small"' in out
    assert "Stored 12 memories for 2 users" in out
    alice = out.split("retrieve for alice")[1].split("retrieve for bob")[0]
    assert "I prefer window seats on flights." in alice and "aisle" not in alice
    assert (
        "rollback to" in out and "I drink my coffee black, no sugar." in out.split("rollback to")[1]
    )
    assert "now:      visible = True" in out and "2 s later: visible = False" in out
    assert "would delete 6 memories" in out
    assert "Skipped the generation step" in out
    assert "Traceback" not in result.stderr
