"""The rows the watches keep, and each open page's share of them: a page gets a snapshot of
the rows its filter matches, then only what changed (coalesced per object, so a page that
reads slowly holds at most one pending row per object, never a growing backlog).

Runs on the event loop only (the watches post to it).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

from sundial.dashboard import model

Row = dict[str, Any]


class Subscriber:
    """One open page: its filter, the keys it was sent, what it has not been sent yet."""

    def __init__(self, wanted: model.Filter) -> None:
        self.filter = wanted
        self.sent: set[str] = set()
        self.pending: dict[str, str | None] = {}  # key -> the row's JSON, None: removed
        self.control: dict[str, str] = {}  # event -> its latest JSON (problems, scope, ...)
        self.wake = asyncio.Event()

    def offer(self, key: str, row: Row | None, encoded: str | None) -> None:
        if row is not None and self.filter.matches(row):
            self.pending[key] = encoded
            self.sent.add(key)
        elif key in self.sent:
            self.pending[key] = None
            self.sent.discard(key)
        else:
            return
        self.wake.set()

    def tell(self, event: str, data: str) -> None:
        self.control[event] = data
        self.wake.set()

    def drain(self) -> Iterator[tuple[str, str]]:
        """The events to send now: the control events, then the changed rows as one."""
        control, self.control = self.control, {}
        yield from control.items()
        if self.pending:
            pending, self.pending = self.pending, {}
            upserts = [encoded for encoded in pending.values() if encoded is not None]
            removed = [key for key, encoded in pending.items() if encoded is None]
            yield "rows", ('{"upsert":[' + ",".join(upserts) + '],"remove":'
                           + json.dumps(removed) + "}")  # fmt: skip


class Store:
    def __init__(self) -> None:
        self.rows: dict[str, Row] = {}
        self.encoded: dict[str, str] = {}
        self.objects: dict[str, dict[str, Any]] = {}
        self.problems: dict[str, str] = {}
        self.scope_info: dict[str, Any] = {"namespaces": [], "all": False, "note": ""}
        self.listed: set[str | None] = set()  # scopes listed at least once
        self.synced = False
        self.subscribers: set[Subscriber] = set()
        self._facets_due = False

    # ---- what the watches post ----------------------------------------------------------

    def put(self, row: Row, obj: dict[str, Any]) -> None:
        key = row["key"]
        if key in self.rows and self.rows[key]["rv"] == row["rv"]:
            return
        self.rows[key], self.objects[key] = row, obj
        self.encoded[key] = encoded = json.dumps(row, separators=(",", ":"))
        for subscriber in self.subscribers:
            subscriber.offer(key, row, encoded)
        self._facets_due = True

    def remove(self, key: str) -> None:
        if self.rows.pop(key, None) is None:
            return
        self.encoded.pop(key, None)
        self.objects.pop(key, None)
        for subscriber in self.subscribers:
            subscriber.offer(key, None, None)
        self._facets_due = True

    def replace(self, namespace: str | None, rows: list[tuple[Row, dict[str, Any]]]) -> None:
        """A listing of one scope (a namespace, or None: all): what it lacks is gone."""
        listed = {row["key"] for row, _ in rows}
        for key in [
            k
            for k, row in self.rows.items()
            if (namespace is None or row["ns"] == namespace) and k not in listed
        ]:
            self.remove(key)  # fmt: skip
        for row, obj in rows:
            self.put(row, obj)
        self.listed.add(namespace)
        self._sync()

    def problem(self, name: str, message: str | None) -> None:
        """A problem the page shows (None: it is over)."""
        if message is None and name not in self.problems:
            return
        if message is not None and self.problems.get(name) == message:
            return
        if message is None:
            del self.problems[name]
        else:
            self.problems[name] = message
        self._tell_all("problems", self.problems_json())

    def scope(self, namespaces: list[str], everything: bool, note: str) -> None:
        self.scope_info = {"namespaces": namespaces, "all": everything, "note": note}
        self._tell_all("scope", json.dumps(self.scope_info))
        self._sync()

    # ---- what the pages ask -------------------------------------------------------------

    def subscribe(self, wanted: model.Filter) -> tuple[Subscriber, str]:
        """A new page's subscriber and its snapshot (the rows its filter matches)."""
        subscriber = Subscriber(wanted)
        shown = [key for key, row in self.rows.items() if wanted.matches(row)]
        subscriber.sent.update(shown)
        self.subscribers.add(subscriber)
        snapshot = '{"rows":[' + ",".join(self.encoded[key] for key in shown) + "]}"
        return subscriber, snapshot

    def unsubscribe(self, subscriber: Subscriber) -> None:
        self.subscribers.discard(subscriber)

    def hello(self) -> str:
        return json.dumps({
            "scope": self.scope_info, "problems": self._problem_list(),
            "facets": model.facets(self.rows.values()), "synced": self.synced,
            "states": dict(model.STATES),
        })  # fmt: skip

    def detail(self, key: str) -> dict[str, Any] | None:
        obj = self.objects.get(key)
        return model.detail(obj) if obj is not None else None

    def tell_facets(self) -> None:
        """The filters' choices, when rows changed since the last time (on a timer)."""
        if self._facets_due and self.subscribers:
            self._tell_all("facets", json.dumps(model.facets(self.rows.values())))
        self._facets_due = False

    def problems_json(self) -> str:
        return json.dumps(self._problem_list())

    def _problem_list(self) -> list[dict[str, str]]:
        return [{"name": name, "message": message} for name, message in self.problems.items()]

    def _sync(self) -> None:
        """Every scope listed: the pages get the filters' choices, then `synced`."""
        if self.synced or not self._all_listed():
            return
        self.synced = True
        self._facets_due = True
        self.tell_facets()
        self._tell_all("synced", "true")

    def _all_listed(self) -> bool:
        scopes: list[str | None] = (
            [None] if self.scope_info["all"] else list(self.scope_info["namespaces"])
        )
        return bool(scopes) and all(scope in self.listed for scope in scopes)

    def _tell_all(self, event: str, data: str) -> None:
        for subscriber in self.subscribers:
            subscriber.tell(event, data)
