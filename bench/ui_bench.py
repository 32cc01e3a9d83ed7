"""`theseus ui` in a headless Chromium (Debian's chromium + chromium-driver, Selenium), in one run:

1. the runs page of a compacted 1,000-run root: navigation to the table drawn (interactive),
   measured in the browser (``performance.now()`` when the page marks itself ready);
2. a chart of 4 runs x 10,000 steps of 2 keys: navigation to both charts drawn;
3. a live run: a report's flush to the chart showing it (the page polls every second);
4. a tiny training run alone, and the same run while ``theseus ui`` serves its root to a browser
   watching it (the server reads each new segment), wall time of both and their ratio.

    uv run python bench/ui_bench.py [--screenshots docs/images]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import numpy as np

from tests.ui._browser import browser, ui_server, wait_for
from tests.ui._synthetic_runs import make_runs
from theseus.store import Node, Store


def ready_ms(driver, url: str, ready: str) -> float:
    driver.get("about:blank")
    driver.get(url)
    wait_for(driver, f"document.body.dataset.ready === '{ready}'", timeout=60)
    return float(driver.execute_script("return document.body.dataset.readyMs"))


def long_runs(root: str, runs: int = 4, steps: int = 10_000) -> list[str]:
    store = Store(root)
    nonces = []
    noise = np.random.default_rng(0).standard_normal((runs, steps))
    with store.writer(flush_interval=3600) as w:
        for r in range(runs):
            node = Node.start(f"bench.ui.long-{r}")
            w.job(node, "bench/ui", f"optimization:\n  lr: {1e-3 * (r + 1)}\n")
            for k in range(steps):
                rate = 100 * (r + 1)  # a learning-rate sweep: each run falls at its own pace, noisily
                w.write(node, {"train/loss": 1.0 + 4.0 / (1 + k / rate) + 0.3 * float(noise[r, k]),
                               "val/loss": 1.05 + 4.0 / (1 + k / rate), "train/tokens": 4096 * k})
                if k % 2500 == 2499:
                    w.checkpoint(node, f"objects/{node.id}")
                node = node.next()
            w.finished(node)
            nonces.append(node.nonce)
    store.compact()
    return nonces


def dataset(root: str) -> None:
    """The trainer tests' tiny dataset, and the CPU's peak FLOPs cached (MFU is not what is measured)."""
    import json

    from tests.train._helpers import write_dataset
    from theseus.store.fs import write_atomic

    write_dataset(root, tokens=20_000)
    for dtype in ("float32", "bfloat16"):
        write_atomic(f"{root}/meta/cpu_peak/cpu-{dtype}.json", json.dumps({f"cpu/{dtype}": 1e11}).encode())


def train(root: str, steps: int) -> float:
    from tests.audit.conftest import STEP_TOKENS, TINY
    from theseus.quick import quick

    with quick(root) as q:
        q.build("gpt/train/pretrain", "bench-ui-train")
        for section, values in TINY.items():
            for key, value in values.items():
                q.config[section][key] = value
        q.config.training.tokens = STEP_TOKENS * steps
        q.config.logging.checkpoint_interval = steps
        job = q.create()
        start = time.perf_counter()
        job()
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--screenshots", help="a folder to save the runs page and a chart as PNG")
    parser.add_argument("--train-steps", type=int, default=60)
    parser.add_argument("--no-training", action="store_true", help="skip the training slowdown (4.)")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="theseus-ui-bench-", dir="/dev/shm")
    many, long = f"{work}/many", f"{work}/long"
    make_runs(many, runs=1000, nodes=20)
    nonces = long_runs(long)
    with browser() as driver:
        with ui_server(many) as url:
            ready_ms(driver, f"{url}/#/runs", "runs")  # the browser's own first start
            runs = [ready_ms(driver, f"{url}/#/runs", "runs") for _ in range(5)]
            rows = driver.execute_script("return document.querySelectorAll('#runs-table tbody tr[data-nonce]').length")
            if args.screenshots:
                driver.set_window_size(1280, 640)
                ready_ms(driver, f"{url}/#/runs?cols=config.optimization.lr", "runs")
                driver.save_screenshot(f"{args.screenshots}/ui-runs.png")
                driver.set_window_size(1400, 1000)
        with ui_server(long) as url:
            view = f"{url}/#/charts?runs={','.join(nonces)}&keys=train/loss,val/loss&smooth=0.9"
            charts = [ready_ms(driver, view, "charts") for _ in range(5)]
            points = driver.execute_script("return [...document.querySelectorAll('table.summary tr')]"
                                           ".map(r => +r.dataset.points).reduce((a, b) => a + b, 0)")
            if args.screenshots:
                driver.set_window_size(1280, 560)
                ready_ms(driver, view.replace("val/loss", "") + "&x=train/tokens", "charts")
                time.sleep(0.3)
                driver.save_screenshot(f"{args.screenshots}/ui-chart.png")
                driver.set_window_size(1400, 1000)
            store = Store(long)
            node = Node.start("bench.ui.live")
            with store.writer() as w:
                w.write(node, {"train/loss": 3.0})
            ready_ms(driver, f"{url}/#/charts?runs={node.nonce}&keys=train/loss", "charts")
            points_js = "+document.querySelector('.chart table.summary tr').dataset.points"
            live = []
            for k in range(1, 9):
                time.sleep(0.37 * k % 1)  # flushes at various phases of the page's one-second poll
                node = node.next()
                with store.writer() as w:
                    w.write(node, {"train/loss": 3.0 - 0.1 * k})
                flushed = time.perf_counter()
                wait_for(driver, f"{points_js} === {k + 1}", timeout=30, every=0.01)
                live.append(time.perf_counter() - flushed)
    solo_root, watched_root, warm_root = f"{work}/solo", f"{work}/watched", f"{work}/warm"
    if args.no_training:
        report(rows, runs, points, charts, live)
        return
    for root in (solo_root, watched_root, warm_root):
        dataset(root)
    train(warm_root, 3)  # compiles once for the process
    solo, watched = [], []
    for _ in range(2):  # alternated, so a slow spell of the shared machine hits both
        solo.append(train(solo_root, args.train_steps))
        with ui_server(watched_root) as url, browser() as driver:
            driver.get(f"{url}/#/runs")  # polls every second; each new segment is read by the server
            watched.append(train(watched_root, args.train_steps))
    report(rows, runs, points, charts, live)
    print(f"training {args.train_steps} steps alone: {min(solo):.2f} s; with theseus ui and a browser watching: "
          f"{min(watched):.2f} s; ratio {min(watched) / min(solo):.3f} (best of {len(solo)} each)")


def report(rows, runs, points, charts, live) -> None:
    print(f"runs page, 1,000 runs ({rows} rows): navigation to table drawn, median {statistics.median(runs):.0f} ms "
          f"(min {min(runs):.0f}, max {max(runs):.0f})")
    print(f"chart of 4 runs x 10,000 steps x 2 keys ({points} points): navigation to charts drawn, median "
          f"{statistics.median(charts):.0f} ms (min {min(charts):.0f}, max {max(charts):.0f})")
    print(f"live: flush to chart, median {statistics.median(live):.2f} s, max {max(live):.2f} s")


if __name__ == "__main__":
    main()
