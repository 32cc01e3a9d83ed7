"""``theseus ui ROOT``: a local, read-only web app over a root (runs table, charts, run and node pages,
live updates), served by Starlette + uvicorn, drawn with plain JS and the vendored uPlot.

Modules: ``follow`` reads the log (new segments only), ``status``/``table``/``series``/``configs``/
``lineage``/``run``/``node`` shape what each page shows, ``api`` serves it as JSON, ``server``
adds the static pages and runs uvicorn. The data layer is testable without a browser.

>>> import tempfile
>>> from starlette.testclient import TestClient
>>> TestClient(create_app(tempfile.mkdtemp()), base_url="http://127.0.0.1").get("/api/runs").json()["rows"]
[]
"""

from theseus.ui.server import create_app, serve

__all__ = ["create_app", "serve"]
