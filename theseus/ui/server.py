"""The web app: the API (``theseus.ui.api``) and the pages (``static/``: HTML, plain JS, CSS and the
vendored uPlot), served by uvicorn on 127.0.0.1 unless told otherwise.

Everything the browser loads comes from this package: no CDN, no network. The app is safe on a
stranger's root: every response carries a Content-Security-Policy that lets only the package's own
scripts run (none inline, so text from the root cannot become script), and a request naming any
host but the one the server listens on is refused, so a web page elsewhere cannot reach the app
through a DNS name it rebinds to this machine.

>>> import tempfile
>>> from starlette.testclient import TestClient
>>> client = TestClient(create_app(tempfile.mkdtemp()), base_url="http://127.0.0.1:8765")
>>> page = client.get("/")
>>> "uPlot" in page.text, "script-src 'self'" in page.headers["content-security-policy"]
(True, True)
>>> client.get("/api/runs", headers={"host": "evil.example"}).status_code
400
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.responses import FileResponse, PlainTextResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from theseus.errors import BadInput
from theseus.store import Store
from theseus.store.fs import require_root
from theseus.ui.api import Api, routes
from theseus.ui.status import STALE_AFTER_S

STATIC = Path(__file__).with_name("static")
DEFAULT_PORT = 8765
LOOPBACK = ("127.0.0.1", "localhost", "::1")
# only this package's files run or style the pages; nothing is framed, posted or loaded from elsewhere
POLICY = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; object-src 'none'; "
          "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
HEADERS = {"content-security-policy": POLICY, "x-content-type-options": "nosniff", "referrer-policy": "no-referrer",
           "x-frame-options": "DENY"}


def host_names(hosts: Iterable[str]) -> frozenset[str]:
    """The Host header names (lower case, no port; IPv6 in brackets) a server bound to ``hosts`` answers:
    the loopback names and those given. An address that listens everywhere (``0.0.0.0``, ``::``) adds
    only itself: other machines reach the app by the name or address passed as the host.

    >>> sorted(host_names(["10.0.0.5"]))
    ['10.0.0.5', '127.0.0.1', '[::1]', 'localhost']
    """
    return frozenset(f"[{h.strip('[]').lower()}]" if ":" in h else h.lower() for h in (*LOOPBACK, *hosts))


def host_of(header: str) -> str:
    """The host name of a Host header: lower case, without the port.

    >>> host_of("LocalHost:8765"), host_of("[::1]:8765"), host_of("127.0.0.1")
    ('localhost', '[::1]', '127.0.0.1')
    """
    header = header.strip().lower()
    if header.startswith("["):
        return header.split("]", 1)[0] + "]"
    return header.split(":", 1)[0]


class Guard:
    """ASGI middleware: refuse (400) a request whose Host header is not one of ``names`` (DNS
    rebinding), and add :data:`HEADERS` to every response that does not set its own.

    >>> Guard(None, host_names([])).names >= {"localhost"}
    True
    """

    def __init__(self, app: ASGIApp, names: frozenset[str]):
        self.app = app
        self.names = names

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                have = {k.lower() for k, _ in message.get("headers", [])}
                message["headers"] = [*message.get("headers", []),
                                      *((k.encode(), v.encode()) for k, v in HEADERS.items() if k.encode() not in have)]
            await send(message)

        host = host_of(Headers(scope=scope).get("host", ""))
        if host not in self.names:
            refused = PlainTextResponse(f"this server answers only for {', '.join(sorted(self.names))}, "
                                        f"not {host or 'a request without a Host header'}", status_code=400)
            await refused(scope, receive, send_with_headers)
            return
        await self.app(scope, receive, send_with_headers)


def create_app(root: str | os.PathLike, stale_after_s: float = STALE_AFTER_S, hosts: Iterable[str] = ()) -> Starlette:
    """The app over ``root`` (a folder or gs:// URL; it must exist), answering requests for the
    loopback names and ``hosts`` (the address the server listens on).

    >>> create_app("/no/such/theseus-root")
    Traceback (most recent call last):
    ...
    theseus.errors.MissingFile: ...
    """
    store = Store(root)
    require_root(store.fs, store.path())
    if stale_after_s <= 0:
        raise BadInput(f"stale_after_s must be positive, got {stale_after_s}")
    api = Api(store, stale_after_s)
    api.refresh()  # the first read happens before the server starts: a broken root fails here
    api.keys()  # from the summaries: the rows are made when a page asks for them (config keys: when first asked)

    async def index(request):
        return FileResponse(STATIC / "index.html", headers={"cache-control": "no-cache"})

    return Starlette(routes=[Route("/", index), *routes(api), Mount("/static", StaticFiles(directory=STATIC))],
                     middleware=[Middleware(Guard, names=host_names(hosts))])


def serve(root: str | os.PathLike, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
          stale_after_s: float = STALE_AFTER_S) -> None:
    """Serve the app until interrupted (``theseus ui``), answering for ``host`` and the loopback names.

    >>> serve("/no/such/theseus-root")
    Traceback (most recent call last):
    ...
    theseus.errors.MissingFile: ...
    """
    import uvicorn  # the server loads only when serving

    uvicorn.run(create_app(root, stale_after_s, hosts=[host]), host=host, port=port, log_level="warning")
