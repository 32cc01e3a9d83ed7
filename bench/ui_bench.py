"""`theseus ui` in a headless Chromium (Debian's chromium + chromium-driver, Selenium), in one run:

1. the runs page of a compacted 1,000-run root: navigation to the table drawn (interactive),
   measured in the browser (``performance.now()`` when the page marks itself ready);
2. a chart of 4 runs x 10,000 steps of 2 keys: navigation to both charts drawn;
3. a live run: a report's flush to the chart showing it (the page polls every second);
4. training next to the app: a quickstart-shaped GPT trained about 30 s alone, then the same while
   ``theseus ui`` serves its root and a browser shows the run's live chart, alternated (A/B, B/A, ...);
   wall and CPU seconds of the training, and the CPU seconds of the app (and the browser) per
   minute of polling.

    uv run python bench/ui_bench.py [--screenshots docs/images] [--only pages|training]
                                    [--train-seconds 30] [--pairs 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

import numpy as np

from tests.ui._browser import browser, ui_process, ui_server, wait_for
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

    write_dataset(root, tokens=200_000)
    for dtype in ("float32", "bfloat16"):
        write_atomic(f"{root}/meta/cpu_peak/cpu-{dtype}.json", json.dumps({f"cpu/{dtype}": 1e11}).encode())


def training_job(root: str, steps: int):
    """A quickstart-shaped GPT (n_embd 64, 2 layers, 4 heads, block 64, batch 8; the tests' 256-token
    vocabulary) reporting every step, created (state initialised, nothing run)."""
    from tests.train._helpers import VOCAB
    from theseus.quick import quick
    from theseus.quickstart import configure

    with quick(root) as q:
        q.build("gpt/train/pretrain", "bench-ui-train")
        configure(q.config, steps)
        q.config.data.dataset = "fineweb"
        q.config.architecture.vocab_size = VOCAB
        q.config.logging.report_interval = 1  # the most a live chart can get: a node per step
        q.config.logging.checkpoint_interval = steps
        q.config.logging.validation_interval = steps
        return q.create()


def cpu_seconds(processes) -> float:
    """User + system CPU seconds of the live processes given (gone ones count 0)."""
    import psutil

    total = 0.0
    for p in processes:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def timed(job) -> tuple[float, float]:
    """Wall and CPU seconds (every thread of this process) of ``job``'s step loop: from its first
    report to its last, so compiling and the final checkpoint are left out. This process does nothing
    else meanwhile (the app and the browser are other processes)."""
    marks = []
    # a report hook after the job's own: each mark follows that report's record
    job.trainer.add_hook(lambda step, metrics: marks.append((time.perf_counter(), time.process_time())))
    job()
    (wall, cpu), (wall_end, cpu_end) = marks[0], marks[-1]
    return wall_end - wall, cpu_end - cpu


def watched(root: str, steps: int) -> dict[str, float]:
    """One training run while ``theseus ui`` serves its root and a headless browser shows the run's
    live chart (opened before the run writes: the page polls every second and draws each new report)."""
    import psutil

    job = training_job(root, steps)
    with ui_process(root) as (url, proc), browser() as driver:
        app = [psutil.Process(proc.pid)]
        chrome = psutil.Process(driver.service.process.pid)
        view = f"{url}/#/charts?runs={job.node.nonce}&keys=train/loss&smooth=0.6"
        ready_ms(driver, view, "charts")
        tree = [chrome, *chrome.children(recursive=True)]
        app_cpu, browser_cpu, start = cpu_seconds(app), cpu_seconds(tree), time.perf_counter()
        wall, cpu = timed(job)
        app_cpu, browser_cpu = cpu_seconds(app) - app_cpu, cpu_seconds(tree) - browser_cpu
        polled = time.perf_counter() - start  # the whole run, startup included: the app's CPU is over all of it
        logged = len(Store(root).find().nonce(job.node.nonce).columns(keys=["train/loss"])["train/loss"])
        shown = "+document.querySelector('.chart table.summary tr')?.dataset.points"
        points = wait_for(driver, f"{shown} === {logged} && {shown}", timeout=30)  # the chart followed the run
    return {"wall": wall, "cpu": cpu, "app_cpu": app_cpu, "browser_cpu": browser_cpu, "polled": polled,
            "points": points}


def training_next_to_the_app(work: str, seconds: float, pairs: int) -> None:
    """Alternate runs alone and watched (A/B, B/A, ...), each about ``seconds`` long; print each pair and the ranges."""
    roots = {arm: f"{work}/{arm}" for arm in ("warm", "solo", "watched")}
    for root in roots.values():
        dataset(root)
    calibrate = 50
    wall, _ = timed(training_job(roots["warm"], calibrate))  # also compiles once (the cache serves later runs)
    steps = max(calibrate, int(seconds / (wall / (calibrate - 1))))
    print(f"training: {steps} steps per run (about {seconds:.0f} s at {wall / (calibrate - 1) * 1000:.0f} ms/step; "
          f"the step loop is timed, from the first report to the last), {pairs} alternated pairs")
    solo, seen = [], []
    for i in range(pairs):  # A/B then B/A: neither arm always runs first
        runs = [lambda: solo.append(dict(zip(("wall", "cpu"), timed(training_job(roots["solo"], steps))))),
                lambda: seen.append(watched(roots["watched"], steps))]
        for run in runs if i % 2 == 0 else runs[::-1]:
            run()
        a, b = solo[-1], seen[-1]
        print(f"  pair {i + 1}: alone {a['wall']:.1f} s wall, {a['cpu']:.1f} s CPU; watched {b['wall']:.1f} s wall, "
              f"{b['cpu']:.1f} s CPU (ratio wall {b['wall'] / a['wall']:.3f}, CPU {b['cpu'] / a['cpu']:.3f}); "
              f"app {b['app_cpu']:.2f} s CPU, browser {b['browser_cpu']:.2f} s CPU, chart {b['points']} points")
    ratio = {k: sorted(b[k] / a[k] for a, b in zip(solo, seen)) for k in ("wall", "cpu")}
    per_minute = sorted(60 * b["app_cpu"] / b["polled"] for b in seen)
    browser_minute = sorted(60 * b["browser_cpu"] / b["polled"] for b in seen)
    print(f"training next to theseus ui + a browser on its live chart, watched / alone over {pairs} pairs: "
          f"wall {ratio['wall'][0]:.3f} to {ratio['wall'][-1]:.3f} (median {statistics.median(ratio['wall']):.3f}), "
          f"CPU {ratio['cpu'][0]:.3f} to {ratio['cpu'][-1]:.3f} (median {statistics.median(ratio['cpu']):.3f})")
    print(f"the app's own CPU: {per_minute[0]:.2f} to {per_minute[-1]:.2f} s per minute of polling "
          f"({100 * per_minute[-1] / 60:.1f}% of one core at most); the browser's: {browser_minute[0]:.2f} to "
          f"{browser_minute[-1]:.2f} s per minute")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--screenshots", help="a folder to save the runs page and a chart as PNG")
    parser.add_argument("--train-seconds", type=float, default=30.0, help="length of each training run (4.)")
    parser.add_argument("--pairs", type=int, default=3, help="alternated alone/watched training pairs (4.)")
    parser.add_argument("--only", choices=["pages", "training"], help="run only the pages (1.-3.) or the training (4.)")
    args = parser.parse_args()
    if args.pairs < 1 or args.train_seconds <= 0:
        parser.error("--pairs must be at least 1 and --train-seconds positive")
    work = tempfile.mkdtemp(prefix="theseus-ui-bench-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    if args.only != "training":
        pages(work, args.screenshots)
    elif args.screenshots:
        parser.error("--screenshots needs the pages (drop --only training)")
    if args.only != "pages":
        training_next_to_the_app(work, args.train_seconds, args.pairs)
    shutil.rmtree(work, ignore_errors=True)


def pages(work: str, screenshots: str | None) -> None:
    """1.-3.: the runs page of 1,000 runs, a chart of 4 x 10,000 steps, a live report's latency."""
    many, long = f"{work}/many", f"{work}/long"
    make_runs(many, runs=1000, nodes=20)
    nonces = long_runs(long)
    with browser() as driver:
        with ui_server(many) as url:
            ready_ms(driver, f"{url}/#/runs", "runs")  # the browser's own first start
            runs = [ready_ms(driver, f"{url}/#/runs", "runs") for _ in range(5)]
            rows = driver.execute_script("return document.querySelectorAll('#runs-table tbody tr[data-nonce]').length")
            if screenshots:
                driver.set_window_size(1280, 640)
                ready_ms(driver, f"{url}/#/runs?cols=config.optimization.lr", "runs")
                driver.save_screenshot(f"{screenshots}/ui-runs.png")
                driver.set_window_size(1400, 1000)
        with ui_server(long) as url:
            view = f"{url}/#/charts?runs={','.join(nonces)}&keys=train/loss,val/loss&smooth=0.9"
            charts = [ready_ms(driver, view, "charts") for _ in range(5)]
            points = driver.execute_script("return [...document.querySelectorAll('table.summary tr')]"
                                           ".map(r => +r.dataset.points).reduce((a, b) => a + b, 0)")
            if screenshots:
                driver.set_window_size(1280, 560)
                ready_ms(driver, view.replace("val/loss", "") + "&x=train/tokens", "charts")
                time.sleep(0.3)
                driver.save_screenshot(f"{screenshots}/ui-chart.png")
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
    report(rows, runs, points, charts, live)


def report(rows, runs, points, charts, live) -> None:
    print(f"runs page, 1,000 runs ({rows} rows): navigation to table drawn, median {statistics.median(runs):.0f} ms "
          f"(min {min(runs):.0f}, max {max(runs):.0f})")
    print(f"chart of 4 runs x 10,000 steps x 2 keys ({points} points): navigation to charts drawn, median "
          f"{statistics.median(charts):.0f} ms (min {min(charts):.0f}, max {max(charts):.0f})")
    print(f"live: flush to chart, median {statistics.median(live):.2f} s, max {max(live):.2f} s")


if __name__ == "__main__":
    main()
