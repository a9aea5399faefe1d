"""Parts of a KubeClient stand-in for unit tests of a pass: the calls a pass makes that
the test has no interest in (no other objects listed, no Events read, Events dropped)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any


class QuietKube:
    async def list_all(self, *_: object) -> list[dict[str, Any]]:
        return []

    async def list_pages(self, *_: object) -> AsyncIterator[list[dict[str, Any]]]:
        for page in ([],):
            yield page

    async def cronjob_event_messages(self, *_: object) -> list[str]:
        return []

    async def create_event(self, *_: object) -> None:
        pass
