"""`theseus ui` at scale: a compacted root of N synthetic runs (``tests/ui/_synthetic_runs.py``: 20
nodes, a config, a status and, in some runs, checkpoint records each), cached under ``--cache``.

Measured in one process, each against the same root's ``Store(root).runs()`` (a new Store: cold),
the summary every runs table needs at least, as a ratio:

- server start: ``create_app(root)`` (the app's first read of the root), and the RSS it adds;
- ``/api/runs`` first page (the table's first request);
- one run page (``/api/run/<nonce>?audit=0``: the data the page shows, without the audit);
- ``/api/filter`` with a metric condition and with a config condition;
- a poll with nothing new (what each open page asks every second);
- with ``--browser``: the runs page in headless Chromium (navigation to the table drawn, and one
  keystroke in the name filter to the table redrawn).

    uv run python bench/ui_scale.py [--runs 10000] [--cache /tmp/theseus-ui-scale] [--browser]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import time
import warnings
from pathlib import Path

VERSION = 1  # of the cached roots' content: bump when make_runs changes


def build_root(cache: Path, runs: int, nodes: int) -> tuple[Path, float | None]:
    """The cached compacted root of ``runs`` runs and the seconds its build took (None: from the cache)."""
    from tests.ui._synthetic_runs import make_runs

    folder = cache / f"ui-{runs}x{nodes}-v{VERSION}"
    if folder.exists():
        return folder, None
    staging = cache / f".{folder.name}.building"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    start = time.perf_counter()
    make_runs(str(staging), runs=runs, nodes=nodes, compact=True)
    took = time.perf_counter() - start
    staging.rename(folder)
    return folder, took


def rss_mib() -> float:
    """This process's resident memory now (MiB), from /proc."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--cache", default="/tmp/theseus-ui-scale")
    parser.add_argument("--browser", action="store_true", help="also the runs page in headless Chromium")
    args = parser.parse_args()
    from starlette.testclient import TestClient

    from theseus.store import Store
    from theseus.ui.server import create_app

    root, built = build_root(Path(args.cache), args.runs, args.nodes)
    if built is not None:
        print(f"built {args.runs:,} runs x {args.nodes} nodes (compacted) in {built:.1f} s: {root}")
    warnings.simplefilter("ignore")
    baseline, frame = timed(lambda: Store(root).runs())
    before = rss_mib()
    start, app = timed(lambda: create_app(root))
    added = rss_mib() - before
    client = TestClient(app, base_url="http://127.0.0.1")
    first, page = timed(lambda: client.get("/api/runs?limit=100").json())
    nonce = page["rows"][len(page["rows"]) // 2]["nonce"]
    run, _ = timed(lambda: client.get(f"/api/run/{nonce}?audit=0").json())
    metric, found = timed(lambda: client.post("/api/filter", json={"conditions": ["train/loss < 0.3"]}).json())
    config, _ = timed(lambda: client.post("/api/filter", json={"conditions": ["config.optimization.lr == 0.001"]}))
    time.sleep(0.3)
    poll, _ = timed(lambda: client.get(f"/api/poll?since={page['token']}").json())
    print(f"\n{len(frame):,} runs in the root; Store(root).runs() cold: {baseline:.3f} s; "
          f"/api/runs total {page.get('total', len(page['rows'])):,}; filter kept {len(found['nonces']):,}\n")
    print("| figure | seconds | Store.runs() (s) | ratio |")
    print("|---|---|---|---|")
    for label, took in ((f"server start (create_app), +{added:,.0f} MiB RSS", start),
                        ("/api/runs first page (100 rows)", first), ("one run page (/api/run, no audit)", run),
                        ("/api/filter train/loss < 0.3", metric),
                        ("/api/filter config.optimization.lr == 0.001", config),
                        ("/api/poll, nothing new", poll)):
        print(f"| {label}, {args.runs:,} runs | {took:.3f} | {baseline:.3f} | {took / baseline:.2f}x |")
    print(f"\npeak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MiB")
    if args.browser:
        ready, typed = browser_figures(str(root))
        print(f"| runs page in Chromium: navigation to the table drawn, {args.runs:,} runs | {ready:.3f} | "
              f"{baseline:.3f} | {ready / baseline:.2f}x |")
        print(f"| runs page: one keystroke in the filter to the table redrawn, {args.runs:,} runs | {typed:.3f} | "
              f"{baseline:.3f} | {typed / baseline:.2f}x |")


def browser_figures(root: str) -> tuple[float, float]:
    """Seconds from navigation to the runs table drawn (every page of /api/runs loaded), and from a
    keystroke in the name filter to the table redrawn, in headless Chromium over ``theseus ui``."""
    from tests.ui._browser import browser, ui_server, wait_for

    with ui_server(root) as url, browser() as driver:
        driver.get(f"{url}/#/runs")
        wait_for(driver, "document.body.dataset.ready === 'runs'", timeout=600)
        ready = float(driver.execute_script("return document.body.dataset.readyMs")) / 1000
        typed = driver.execute_script(
            "const t = performance.now(), box = document.getElementById('filter');"
            "box.value = 'run-00'; box.dispatchEvent(new Event('input')); return performance.now() - t;")
        return ready, float(typed) / 1000


if __name__ == "__main__":
    main()
