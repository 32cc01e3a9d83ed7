"""The web app: the API (``theseus.ui.api``) and the pages (``static/``: HTML, plain JS, CSS and the
vendored uPlot), served by uvicorn on 127.0.0.1 unless told otherwise.

Everything the browser loads comes from this package: no CDN, no network.

>>> import tempfile
>>> from starlette.testclient import TestClient
>>> client = TestClient(create_app(tempfile.mkdtemp()))
>>> "uPlot" in client.get("/").text, client.get("/static/uPlot.iife.min.js").status_code
(True, 200)
"""

from __future__ import annotations

import os
from pathlib import Path

from starlette.applications import Starlette
from starlette.responses import FileResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from theseus.store import Store
from theseus.store.fs import require_root
from theseus.ui.api import Api, routes
from theseus.ui.status import STALE_AFTER_S

STATIC = Path(__file__).with_name("static")
DEFAULT_PORT = 8765


def create_app(root: str | os.PathLike, stale_after_s: float = STALE_AFTER_S) -> Starlette:
    """The app over ``root`` (a folder or gs:// URL; it must exist).

    >>> create_app("/no/such/theseus-root")
    Traceback (most recent call last):
    ...
    FileNotFoundError: ...
    """
    store = Store(root)
    require_root(store.fs, store.path())
    if stale_after_s <= 0:
        raise ValueError(f"stale_after_s must be positive, got {stale_after_s}")
    api = Api(store, stale_after_s)
    api.refresh()  # the first read happens before the server starts: a broken root fails here
    api.rows(), api.keys(), api.config_keys()  # worked out once, before the first page asks

    async def index(request):
        return FileResponse(STATIC / "index.html", headers={"cache-control": "no-cache"})

    return Starlette(routes=[Route("/", index), *routes(api), Mount("/static", StaticFiles(directory=STATIC))])


def serve(root: str | os.PathLike, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
          stale_after_s: float = STALE_AFTER_S) -> None:
    """Serve the app until interrupted (``theseus ui``).

    >>> serve("/no/such/theseus-root")
    Traceback (most recent call last):
    ...
    FileNotFoundError: ...
    """
    import uvicorn  # the server loads only when serving

    uvicorn.run(create_app(root, stale_after_s), host=host, port=port, log_level="warning")
