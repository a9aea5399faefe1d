"""`kubectl sundial dashboard`: a read-only page on localhost, served by the plugin.

    GET /                      the page (static/index.html; app.js and app.css beside it)
    GET /api/stream?ns=&label=&backend=&state=&q=
                               server-sent events: hello (scope, problems, the filters'
                               choices), snapshot (the rows the filter matches), then rows
                               (changed and removed), problems, scope, facets, synced
    GET /api/object/NS/NAME    one object's detail (every cell in full, conditions, ...)

Everything the page needs ships in this package (no CDN, works offline). It reads the
cluster with the user's own kubeconfig and writes nothing. It listens on the loopback
address only and answers only requests whose Host is that address (a web page elsewhere
cannot read it through DNS rebinding).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import webbrowser
from collections.abc import Callable
from importlib import resources
from typing import Any

from aiohttp import web

from sundial.dashboard import model
from sundial.dashboard.source import Source
from sundial.dashboard.store import Store

log = logging.getLogger(__name__)
HOST = "127.0.0.1"
HEARTBEAT_SECONDS = 15.0
FACETS_SECONDS = 1.0
STATIC = {
    "app.js": "text/javascript",
    "app.css": "text/css",
    "favicon.svg": "image/svg+xml",
}
STORE: web.AppKey[Store] = web.AppKey("store", Store)


def asset(name: str) -> bytes:
    return resources.files("sundial.dashboard").joinpath("static", name).read_bytes()


def application(store: Store, allowed_hosts: Callable[[], set[str]]) -> web.Application:
    @web.middleware
    async def local_only(
        request: web.Request, handler: Callable[[web.Request], Any]
    ) -> web.StreamResponse:
        if request.host not in allowed_hosts():
            raise web.HTTPForbidden(text=f"this dashboard answers on {HOST} only")
        response: web.StreamResponse = await handler(request)
        response.headers.setdefault("Cache-Control", "no-store")
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Content-Security-Policy"] = (
            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
            "connect-src 'self'; frame-ancestors 'none'"
        )
        return response

    app = web.Application(middlewares=[local_only])
    app[STORE] = store
    app.router.add_get("/", index)
    app.router.add_get("/static/{name}", static)
    app.router.add_get("/api/stream", stream)
    app.router.add_get("/api/object/{namespace}/{name}", detail)
    return app


async def index(request: web.Request) -> web.Response:
    return web.Response(body=asset("index.html"), content_type="text/html", charset="utf-8")


async def static(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    if name not in STATIC:
        raise web.HTTPNotFound()
    return web.Response(body=asset(name), content_type=STATIC[name])


async def detail(request: web.Request) -> web.Response:
    key = f"{request.match_info['namespace']}/{request.match_info['name']}"
    found = request.app[STORE].detail(key)
    if found is None:
        raise web.HTTPNotFound(text=json.dumps({"error": f"no ScheduledJob {key} is shown"}),
                               content_type="application/json")  # fmt: skip
    return web.json_response(found)


async def stream(request: web.Request) -> web.StreamResponse:
    store = request.app[STORE]
    complaint = None
    try:
        wanted = model.Filter.from_query(request.query)
    except model.FilterError as error:
        wanted, complaint = model.Filter(), str(error)
    response = web.StreamResponse(headers={
        "Content-Type": "text/event-stream", "Cache-Control": "no-store",
    })  # fmt: skip
    await response.prepare(request)
    subscriber, snapshot = store.subscribe(wanted)
    try:
        await _send(response, "hello", store.hello())
        if complaint is not None:
            await _send(response, "filter", json.dumps({"error": complaint}))
        await _send(response, "snapshot", snapshot)
        while True:
            try:
                async with asyncio.timeout(HEARTBEAT_SECONDS):
                    await subscriber.wake.wait()
            except TimeoutError:
                await response.write(b": still here\n\n")
                continue
            subscriber.wake.clear()
            for event, data in subscriber.drain():
                await _send(response, event, data)
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        store.unsubscribe(subscriber)
    return response


async def _send(response: web.StreamResponse, event: str, data: str) -> None:
    await response.write(f"event: {event}\ndata: {data}\n\n".encode())


async def serve(
    *, namespace: str | None, context_namespace: str, port: int = 0, open_browser: bool = False,
    ready: Callable[[str], None] | None = None,
    api_client: Callable[[], Any] | None = None,
) -> None:  # fmt: skip
    """Serve until cancelled (Ctrl-C): the watches in threads, the page on HOST:port."""
    loop = asyncio.get_running_loop()
    store = Store()

    def post(call: Callable[..., None], *args: Any) -> None:
        loop.call_soon_threadsafe(call, *args)

    source = Source(store, post, namespace=namespace, context_namespace=context_namespace,
                    **({"api_client": api_client} if api_client is not None else {}))  # fmt: skip
    bound: list[int] = []
    app = application(
        store, lambda: {f"{HOST}:{p}" for p in bound} | {f"localhost:{p}" for p in bound}
    )
    runner = web.AppRunner(app, shutdown_timeout=1.0, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, HOST, port)
    await site.start()
    server = site._server
    sockets = getattr(server, "sockets", None) or []
    bound.extend(sock.getsockname()[1] for sock in sockets)
    url = f"http://{HOST}:{bound[0]}/"
    source.start()
    if ready is not None:
        ready(url)
    if open_browser:
        with contextlib.suppress(Exception):
            webbrowser.open(url)
    try:
        while True:
            await asyncio.sleep(FACETS_SECONDS)
            store.tell_facets()
    finally:
        source.stop()
        await runner.cleanup()
