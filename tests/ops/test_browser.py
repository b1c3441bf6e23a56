"""The memory browser (`/ui` of `adk-memory serve`), end to end in headless Chromium.

Chromium: `/usr/bin/chromium` (Debian's package), which `./run tests` installs when run as root.
Without it the test fails with the command to run: a browser test that silently skips is a
browser test that never runs.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from ops_support import RunningServer, start_server

from adk_memory import AsyncClient
from adk_memory.server import ApiKey

KEY = "browser-key-0123456789abcdef"
BANK = "browser-bank"
NAME = f"reasoningEngines/{BANK}"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
XSS = "<img src=x onerror=\"document.title='pwned'\">"


def chromium() -> str:
    """The Chromium executable; the test fails, saying how to install it, when there is none."""
    for candidate in (
        "/usr/bin/chromium",
        shutil.which("chromium"),
        shutil.which("chromium-browser"),
    ):
        if candidate and Path(candidate).exists():
            return candidate
    pytest.fail(
        "The memory-browser test needs Chromium at /usr/bin/chromium. `./run tests` installs it "
        "when run as root; otherwise install it with `sudo apt-get install chromium` "
        "(Debian/Ubuntu)."
    )


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("The browser test needs Playwright: pip install -e '.[testing]'.")
    executable = chromium()
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    client = AsyncClient("memory://", embedding_model="hash-64")
    for running in start_server(
        client, api_keys=[ApiKey(name="browser", key=KEY, permissions=["*"])]
    ):
        running.run(seed(running.client))
        yield running


async def seed(client: AsyncClient) -> None:
    await client.memory_banks.create(memory_bank_id=BANK, config={"display_name": "Browser"})
    await client.memory_banks.create(memory_bank_id="other-bank")
    memories = client.memory_banks.memories
    alice, bob = {"user_id": "alice"}, {"user_id": "bob"}
    await memories.create(
        name=NAME,
        fact="I like green tea.",
        scope=alice,
        config={
            "memory_id": "tea",
            "topics": [{"managed_memory_topic": "USER_PREFERENCES"}],
            "metadata": {"source": {"string_value": "chat"}},
            "ttl": "86400s",
        },
    )
    await memories.update(name=f"{NAME}/memories/tea", fact="I like black tea.")
    await memories.create(
        name=NAME, fact="I live in Lisbon.", scope=alice, config={"memory_id": "home"}
    )
    await memories.create(name=NAME, fact=XSS, scope=alice, config={"memory_id": "markup"})
    await memories.create(
        name=NAME, fact="I like coffee.", scope=bob, config={"memory_id": "coffee"}
    )


def test_the_page_is_static_and_locked_down(server: RunningServer) -> None:
    page = httpx.get(f"{server.url}/ui")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert "http" not in page.text.replace("http-equiv", "")  # nothing loaded from elsewhere
    assert (
        httpx.get(f"{server.url}/ui/app.js").headers["content-type"].startswith("text/javascript")
    )
    # The data behind it needs the key, as every API call does.
    assert httpx.get(f"{server.url}/v1beta1/reasoningEngines").status_code == 401


def test_finding_a_memory_by_scope_and_reading_its_revisions(
    server: RunningServer, browser: Any
) -> None:
    page = browser.new_page()
    page.set_default_timeout(10_000)
    try:
        page.goto(f"{server.url}/ui")
        page.wait_for_selector('[data-testid="status"]:has-text("401")')

        page.fill('[data-testid="api-key"]', KEY)
        page.click('[data-testid="use-key"]')
        page.click(f'[data-testid="bank-{BANK}"]')
        page.wait_for_selector('[data-testid="memory-coffee"]')
        assert page.locator('[data-testid="scope-heading"]').all_inner_texts() == [
            "user_id=alice",
            "user_id=bob",
        ]

        page.fill('[data-testid="scope"]', "user_id=alice")
        page.click('[data-testid="apply"]')
        page.wait_for_selector('[data-testid="memory-coffee"]', state="detached")
        row = page.locator('[data-testid="memory-tea"]')
        cells = row.locator("td").all_inner_texts()
        assert cells[:3] == ["I like black tea.", "USER_PREFERENCES", "source=chat"]
        assert cells[4].endswith("UTC")  # the expiry of its TTL
        assert page.locator('[data-testid="scope-heading"]').all_inner_texts() == ["user_id=alice"]
        # A fact is shown as text, never as markup.
        markup = page.locator('[data-testid="memory-markup"] td.fact')
        assert markup.inner_text() == XSS
        assert page.locator('[data-testid="memories"] img').count() == 0
        assert page.title() != "pwned"

        page.click('[data-testid="revisions-tea"]')
        page.wait_for_selector('[data-testid="revision"] >> nth=1')
        revisions = page.locator('[data-testid="revision"] .fact').all_inner_texts()
        assert revisions == ["I like black tea.", "I like green tea."]

        page.fill('[data-testid="search"]', "green tea")
        page.click('[data-testid="apply"]')
        page.wait_for_selector('th:has-text("Distance")')
        assert page.locator('[data-testid="memory-home"]').count() == 1

        page.fill('[data-testid="scope"]', "")
        page.fill('[data-testid="search"]', "")
        page.fill('[data-testid="filter"]', "fact = (")
        page.click('[data-testid="apply"]')
        page.wait_for_selector('[data-testid="status"].error')
        assert "INVALID_ARGUMENT" in page.inner_text('[data-testid="status"]')
    finally:
        page.close()
