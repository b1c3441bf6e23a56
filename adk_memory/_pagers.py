"""Pagers shaped like the SDK's (`google.genai.pagers`): `.page`, iteration across pages.

Unlike the official SDK, whose retrieve pager cannot follow a second page (reference §2.7), ours
follows every `next_page_token`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from typing import Any, Generic, TypeVar

__all__ = ["AsyncPager", "Pager", "first_page"]

T = TypeVar("T")
Fetch = Callable[[str | None], Awaitable[tuple[list[T], str | None]]]
"""Fetches the page a token names (None: the first page)."""


class AsyncPager(Generic[T]):
    """The first page of a listing, and the means to fetch the next ones."""

    def __init__(self, items: list[T], next_page_token: str | None, fetch: Fetch[T]) -> None:
        self._page = items
        self._next_page_token = next_page_token
        self._fetch = fetch

    @property
    def page(self) -> list[T]:
        """The items of the current page."""
        return self._page

    @property
    def next_page_token(self) -> str | None:
        """The token of the next page, None on the last one."""
        return self._next_page_token

    def __len__(self) -> int:
        return len(self._page)

    def __getitem__(self, index: int) -> T:
        return self._page[index]

    async def next_page(self) -> list[T]:
        """Fetches the next page and makes it current; `IndexError` after the last."""
        if not self._next_page_token:
            raise IndexError("No more pages.")
        self._page, self._next_page_token = await self._fetch(self._next_page_token)
        return self._page

    async def __aiter__(self) -> AsyncIterator[T]:
        while True:
            for item in self._page:
                yield item
            if not self._next_page_token:
                return
            await self.next_page()


async def first_page(fetch: Fetch[T], token: str | None) -> AsyncPager[T]:
    """The pager whose current page is what `fetch(token)` returns."""
    items, next_token = await fetch(token)
    return AsyncPager(items, next_token, fetch)


class Pager(Generic[T]):
    """The blocking twin of `AsyncPager`, driven on the client's event-loop thread."""

    def __init__(
        self, pager: AsyncPager[T], run: Callable[[Coroutine[Any, Any, Any]], Any]
    ) -> None:
        self._pager = pager
        self._run = run

    @property
    def page(self) -> list[T]:
        """The items of the current page."""
        return self._pager.page

    @property
    def next_page_token(self) -> str | None:
        """The token of the next page, None on the last one."""
        return self._pager.next_page_token

    def __len__(self) -> int:
        return len(self._pager)

    def __getitem__(self, index: int) -> T:
        return self._pager[index]

    def next_page(self) -> list[T]:
        """Fetches the next page and makes it current; `IndexError` after the last."""
        result: list[T] = self._run(self._pager.next_page())
        return result

    def __iter__(self) -> Iterator[T]:
        while True:
            yield from self._pager.page
            if not self._pager.next_page_token:
                return
            self.next_page()
