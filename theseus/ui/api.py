"""The app's JSON API over one root: runs, live changes, filters, CSV, chart series, run and node pages.

Every route reads; none writes to the root. Bad input (a malformed nonce or id, an unknown
key, a condition that cannot be read) answers 400 with ``{"error": ...}`` naming the
problem; a run or node the root does not hold answers 404.

>>> import tempfile
>>> from starlette.testclient import TestClient
>>> from theseus.store import Node, Store
>>> store = Store(tempfile.mkdtemp())
>>> n = Node.start("doc.api.run")
>>> with store.writer() as w:
...     w.write(n, {"train/loss": 2.0})
>>> client = TestClient(routes_app(Api(store)))
>>> [r["nonce"] for r in client.get("/api/runs").json()["rows"]] == [n.nonce]
True
>>> client.get("/api/run/zzzzzz").json()["error"]
"nonce must be 6 lowercase hex characters, got 'zzzzzz'"
"""

from __future__ import annotations

import functools
import threading
import time
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from theseus.errors import BadInput, CorruptData, NotFound, Refused
from theseus.store import Store, marks, schema
from theseus.store.node import check_nonce
from theseus.ui import node as node_data
from theseus.ui import run as run_data
from theseus.ui import series as series_data
from theseus.ui import table
from theseus.ui.follow import Follower, PerVersion
from theseus.ui.status import INSPECTION, STALE_AFTER_S

MAX_PAGE = 5000  # rows of /api/runs per request (the default page): a client pages with offset and total
MAX_SERIES = 200  # runs x keys of /api/series per request
MAX_CSV_RUNS = 10_000  # runs of /api/csv per request (a client asks for more in several)
CONFIG_KEY_RUNS = 1000  # the config keys offered as columns are those of this many most recent runs
MIN_POLL_S = 0.25  # clients poll about every second; several clients share one listing within this
POLL_SPACING = 3  # polls start at least this many times their own duration apart: listing a large root costs
# at most a third of a core, however many clients ask


class JSON(Response):
    """A JSON response through orjson (NaN and infinities become null, as JSON has neither).

    >>> JSON({"loss": float("nan")}).body
    b'{"loss":null}'
    """

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)


class Api:
    """The state of the app: the store, its :class:`Follower`, and a change counter clients poll.

    >>> import tempfile
    >>> Api(Store(tempfile.mkdtemp())).refresh()
    0
    """

    def __init__(self, store: Store, stale_after_s: float = STALE_AFTER_S):
        self.store = store
        self.follower = Follower(store)
        self.stale_after_s = stale_after_s
        self.configs = table.Configs()
        self.table = table.Rows(stale_after_s, self.configs)
        self.numeric = PerVersion(series_data.run_numeric_keys)
        self.config = PerVersion(lambda run: set(self.configs.of([run])[run.nonce]))
        self.token = 0  # grows when any run changes
        self._changed_at: dict[str, int] = {}  # nonce -> token of its last change
        self._last_poll = 0.0
        self._poll_every = MIN_POLL_S
        self._lock = threading.Lock()

    def refresh(self) -> int:
        """Poll the root when the last poll is older than ``MIN_POLL_S`` (or ``POLL_SPACING`` times the last
        poll's duration, when longer); returns the change token."""
        with self._lock:
            if time.monotonic() - self._last_poll >= self._poll_every:
                start = time.monotonic()
                changed = self.follower.poll()
                self._last_poll = time.monotonic()
                self._poll_every = max(MIN_POLL_S, POLL_SPACING * (self._last_poll - start))
                if changed:
                    self.token += 1
                    for run in changed:
                        self._changed_at[run.nonce] = self.token
            return self.token

    def changed_since(self, token: int) -> list[str]:
        """The nonces of the runs that changed after ``token``.

        >>> import tempfile
        >>> Api(Store(tempfile.mkdtemp())).changed_since(0)
        []
        """
        return sorted(n for n, t in self._changed_at.items() if t > token)

    def rows(self, nonces: list[str] | None = None, extra: list[str] = (), inspections: bool = False,
             tags: list[str] = ()) -> list[dict]:
        """Table rows of ``nonces`` (every run when None), most recently written first (see :meth:`page`)."""
        return self.page(nonces, extra, inspections, tags=tags)[0]

    def page(self, nonces: list[str] | None = None, extra: list[str] = (), inspections: bool = False,
             offset: int = 0, limit: int | None = None, tags: list[str] = ()) -> tuple[list[dict], int]:
        """Table rows of ``nonces`` (every run when None), most recently written first, from ``offset``
        (``limit`` rows at most), and how many there are in all; the runs ``theseus ls`` lists only with
        ``--all`` (hidden runs, evaluation runs: `theseus.store.marks`; inspection branches, a trainer
        ticked outside job(): `theseus.store.status.INSPECTION`) only with ``inspections``; only the runs
        tagged with every one of ``tags``. The runs are ordered by their summaries; only the rows asked
        for are made (the values the summaries do not hold, such as a failure's text, read for those
        runs together)."""
        runs = self.follower.runs
        chosen = list(runs.values()) if nonces is None else [runs[n] for n in nonces if n in runs]
        if not inspections:
            chosen = [run for run in chosen if run.latest(schema.STATUS) not in INSPECTION
                      and marks.listed_by_default(run.latest(schema.HIDDEN), run.latest(schema.JOB))]
        wanted_tags = {marks.check_tag(t) for t in tags}
        if wanted_tags:
            chosen = [run for run in chosen if wanted_tags <= set(marks.tags_of(run.latest(schema.TAGS)))]
        chosen.sort(key=lambda run: (-run.facts.written, run.name, run.nonce))
        page = chosen[offset:] if limit is None else chosen[offset:offset + limit]
        fresh = self.table.stale(page, extra)
        wanted = [run for run in fresh if run.records is not None and run.held is None]
        for key in (schema.ERROR, *(k for k in extra if not k.startswith((table.CONFIG, "_")))):
            if wanted:  # each key's values for every row to make, in one scan
                self.follower.records.latest(key, wanted)
        if any(k.startswith(table.CONFIG) for k in extra):
            self.configs.of(fresh)
        return self.table.rows(page, extra), len(chosen)

    def keys(self) -> list[str]:
        """The numeric keys logged in the root."""
        return self.numeric.union(self.follower.runs.values())

    def config_keys(self) -> list[str]:
        """The dotted config keys of the ``CONFIG_KEY_RUNS`` most recently written runs (offered as columns)."""
        runs = sorted(self.follower.runs.values(), key=lambda run: -run.facts.written)[:CONFIG_KEY_RUNS]
        self.configs.of(runs)  # their configs read together, not one read per run
        return self.config.union(runs)


def _list(value: str | None) -> list[str]:
    return [v for v in (value or "").split(",") if v]


def _count(request: Request, name: str, default: int, most: int | None) -> int:
    """The non-negative integer query parameter ``name`` (``default`` when absent); a BadInput naming
    it when it is not one or exceeds ``most``.

    >>> from starlette.requests import Request
    >>> _count(Request({"type": "http", "query_string": b"limit=10"}), "limit", 5, 100)
    10
    """
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if not raw.isdigit():
        raise BadInput(f"{name} must be a non-negative integer, got {raw!r}")
    if most is not None and int(raw) > most:
        raise BadInput(f"{name} is at most {most} rows per request, got {raw}: page with offset")
    return int(raw)


def _seen(request: Request) -> dict[str, int]:
    """The ``since`` query parameter of a series request, ``nonce:seq`` items (the last seq a page holds of each
    run), by nonce; a BadInput naming an item that is not one.

    >>> from starlette.requests import Request
    >>> _seen(Request({"type": "http", "query_string": b"since=abcdef:12,123456:-1"}))
    {'abcdef': 12, '123456': -1}
    """
    seen = {}
    for item in _list(request.query_params.get("since")):
        nonce, _, seq = item.partition(":")
        try:
            seen[nonce] = int(seq)  # -1: a run the page holds no point of yet
        except ValueError:  # int's answer to text the client sent: bad input
            raise BadInput(f"since takes nonce:seq items (the last seq held of each run), got {item!r}") from None
    return seen


def _strings(body: dict, name: str) -> list[str] | None:
    """The request body's field ``name``, a list of strings (None when absent); a BadInput naming it otherwise.

    >>> _strings({"columns": ["name", "status"]}, "columns"), _strings({}, "columns")
    (['name', 'status'], None)
    """
    value = body.get(name)
    if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        raise BadInput(f"{name} must be a list of strings, got a {type(value).__name__}")
    return value


def _error(status: int, message: str) -> JSON:
    return JSON({"error": message}, status_code=status)


def _handled(handler):
    """Run a route's reads off the event loop (a JSON body read first), and turn the error family's
    kinds (`theseus.errors`) into 404 (nothing there) and 400 (bad input, corrupt or refused data)
    answers; any other exception is a bug, left to the server's 500 with its traceback in the log."""

    async def route(request: Request) -> Response:
        try:
            body = await request.json() if request.method == "POST" else None
        except ValueError as e:  # the JSON decoder's answer to the body the client sent: bad input
            return _error(400, f"the request body is not JSON: {e}")
        if request.method == "POST" and not isinstance(body, dict):
            return _error(400, f"expected a JSON object as the request body, got {type(body).__name__}")
        try:
            return await run_in_threadpool(handler, request, body)
        except NotFound as e:
            return _error(404, str(e))
        except (BadInput, CorruptData, Refused) as e:
            return _error(400, str(e))

    return route


def _answer_runs(api: Api, request: Request, body: Any) -> Response:
    """A page of the runs table, with the change token, the total and the metric keys."""
    offset = _count(request, "offset", 0, None)
    limit = _count(request, "limit", MAX_PAGE, MAX_PAGE)
    token = api.refresh()
    extra = _list(request.query_params.get("extra"))
    rows, total = api.page(extra=extra, inspections=request.query_params.get("all") == "1", offset=offset,
                           limit=limit, tags=_list(request.query_params.get("tag")))
    return JSON({"token": token, "rows": rows, "offset": offset, "limit": limit, "total": total,
                 "root": api.store.root, "stale_after_s": api.stale_after_s,
                 "keys": api.keys()})


def _answer_poll(api: Api, request: Request, body: Any) -> Response:
    """The rows of the runs changed since token ``since``, with their versions."""
    since = _count(request, "since", 0, None)
    token = api.refresh()
    changed = api.changed_since(since)
    extra = _list(request.query_params.get("extra"))
    versions = {n: api.follower.runs[n].version for n in changed}
    rows = api.rows(changed, extra, inspections=request.query_params.get("all") == "1",
                    tags=_list(request.query_params.get("tag")))
    return JSON({"token": token, "changed": changed, "versions": versions, "rows": rows})


def _answer_config_keys(api: Api, request: Request, body: Any) -> Response:
    """The config keys and metric keys the runs hold."""
    api.refresh()
    return JSON({"config": api.config_keys(), "metrics": api.keys()})


def _answer_filter_runs(api: Api, request: Request, body: Any) -> Response:
    """The nonces of the runs matching the body's ``conditions``."""
    conditions = [table.parse_condition(text) for text in _strings(body, "conditions") or [] if text.strip()]
    api.refresh()
    runs = api.follower.runs
    found = table.matching(api.store, runs, conditions, api.configs)
    return JSON({"nonces": sorted(found)})


def _answer_csv(api: Api, request: Request, body: Any) -> Response:
    """The runs table (the body's ``nonces`` in their order, or all) as a CSV file of the body's ``columns``."""
    columns = _strings(body, "columns") or list(table.BASE_COLUMNS)
    extra = [c for c in columns if c not in table.BASE_COLUMNS and c not in table.MAIN_METRICS
             and c not in ("project", "group", "run", "error")]
    nonces = _strings(body, "nonces")
    if nonces is not None and len(nonces) > MAX_CSV_RUNS:
        raise BadInput(f"nonces must be a list of at most {MAX_CSV_RUNS} runs per CSV request, got {len(nonces)}")
    rows = api.rows(nonces, extra)
    if nonces is not None:
        order = {n: i for i, n in enumerate(nonces)}
        rows.sort(key=lambda r: order[r["nonce"]])
    return Response(table.to_csv(rows, columns), media_type="text/csv",
                    headers={"content-disposition": 'attachment; filename="runs.csv"'})


def _answer_series(api: Api, request: Request, body: Any) -> Response:
    """The series of each of ``runs`` x ``keys`` against ``x``, the points after those the client has seen."""
    api.refresh()
    x = request.query_params.get("x", series_data.SEQ)
    since = _seen(request)
    asked = len(_list(request.query_params.get("runs"))) * len(_list(request.query_params.get("keys")))
    if asked > MAX_SERIES:
        raise BadInput(f"at most {MAX_SERIES} series (runs x keys) per request, got {asked}: "
                         "ask for fewer runs or keys at a time")
    series_data.check_keys([x, *_list(request.query_params.get("keys"))], api.keys())
    found = []
    for nonce in _list(request.query_params.get("runs")):
        check_nonce(nonce)
        run = api.follower.run(nonce)
        for key in _list(request.query_params.get("keys")):
            after = since.get(nonce)
            found.append({**series_data.series(run, key, x, after), "name": run.name})
    return JSON({"token": api.token, "series": found})


def _answer_run_page(api: Api, request: Request, body: Any) -> Response:
    """The page of run ``nonce`` (its audit unless ``audit=0``)."""
    nonce = request.path_params["nonce"]
    check_nonce(nonce)
    api.refresh()
    audit = request.query_params.get("audit", "1") != "0"
    return JSON(run_data.run_page(api.store, api.follower, nonce, with_audit=audit))


def _answer_run_logs(api: Api, request: Request, body: Any) -> Response:
    """The logs panel of run ``nonce``."""
    nonce = request.path_params["nonce"]
    check_nonce(nonce)
    api.refresh()
    return JSON(run_data.logs_panel(api.store, api.follower, nonce))


def _answer_diff(api: Api, request: Request, body: Any) -> Response:
    """The config diff of ``run`` against ``other``."""
    api.refresh()
    nonce, other = request.query_params.get("run", ""), request.query_params.get("other", "")
    check_nonce(nonce)
    return JSON({"diff": run_data.config_diff(api.store, api.follower, nonce, other)})


def _answer_node_page(api: Api, request: Request, body: Any) -> Response:
    """The page of node ``node_id``."""
    return JSON(node_data.node_page(api.store, request.path_params["node_id"]))


def _answer_file(api: Api, request: Request, body: Any) -> Response:
    """An artifact file of node ``node_id``, with the headers that keep a browser from running it."""
    data, kind = node_data.read_artifact(api.store, request.path_params["node_id"], request.path_params["path"])
    return Response(data, media_type=kind, headers=node_data.artifact_headers(request.path_params["path"]))


def routes(api: Api) -> list[Route]:
    """The API's routes over ``api`` (mounted under ``/api``).

    >>> import tempfile
    >>> sorted(r.path for r in routes(Api(Store(tempfile.mkdtemp()))))[:3]
    ['/api/csv', '/api/diff', '/api/file/{node_id}/{path:path}']
    """
    table_routes = [
        ("/api/runs", _answer_runs, ["GET"]), ("/api/poll", _answer_poll, ["GET"]),
        ("/api/keys", _answer_config_keys, ["GET"]), ("/api/filter", _answer_filter_runs, ["POST"]),
        ("/api/csv", _answer_csv, ["POST"]), ("/api/series", _answer_series, ["GET"]),
        ("/api/run/{nonce}", _answer_run_page, ["GET"]), ("/api/run/{nonce}/logs", _answer_run_logs, ["GET"]),
        ("/api/diff", _answer_diff, ["GET"]), ("/api/node/{node_id}", _answer_node_page, ["GET"]),
        ("/api/file/{node_id}/{path:path}", _answer_file, ["GET"]),
    ]
    return [Route(path, _handled(functools.partial(handler, api)), methods=methods)
            for path, handler, methods in table_routes]


def routes_app(api: Api) -> Starlette:
    """A Starlette app of the API routes alone (the server adds the pages).

    >>> import tempfile
    >>> isinstance(routes_app(Api(Store(tempfile.mkdtemp()))), Starlette)
    True
    """
    return Starlette(routes=routes(api))
