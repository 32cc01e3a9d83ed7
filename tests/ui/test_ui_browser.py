"""`theseus ui` in a real browser (headless Chromium driven by Selenium): the runs page of a
synthetic 1,000-run root and of a trained root, filters, sorting, grouping, selecting, charts, the
run and node pages, and a live run's new report reaching the chart; the DOM is checked against
what the store's cursor returns, and screenshots are saved under the test's tmp dir."""

from __future__ import annotations

import os
import shutil
import tempfile
import time

import pytest

from tests.system_packages import skip_or_fail
from tests.ui._browser import browser, chromium_paths, ui_server, wait_for
from tests.ui._synthetic_runs import make_runs
from theseus.store import Node, Store
from theseus.viewer.plot import plot

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    if chromium_paths() is None:
        skip_or_fail("chromium and chromium-driver are missing: apt-get install chromium chromium-driver")
    with browser(str(tmp_path_factory.mktemp("downloads"))) as d:
        yield d


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    """A compacted root of 1,000 runs (on /dev/shm where there is one: the writer's fsyncs are cheap there)."""
    base = tempfile.mkdtemp(dir="/dev/shm") if os.path.isdir("/dev/shm") else str(tmp_path_factory.mktemp("synth"))
    root = f"{base}/root"
    make_runs(root, runs=1000, nodes=20)
    with ui_server(root) as url:
        yield root, url
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def trained(built, tmp_path_factory):  # noqa: F811
    """A copy of the trained root with a picture published at main's last checkpoint, served."""
    root = str(tmp_path_factory.mktemp("trained") / "root")
    shutil.copytree(built.root, root)
    store = Store(root)
    last = store.find().nonce(built.main).checkpoint().last()
    plot(store, [built.main], ["train/loss"], out=f"{store.objects(last)}/analysis/loss.png")
    with store.writer() as w:
        w.artifacts(last, f"objects/{last.id}")
    with ui_server(root) as url:
        yield root, url, built


def open_page(driver, url: str, ready: str) -> float:
    """Navigate and wait for the page to say it is drawn; returns the seconds it took."""
    start = time.perf_counter()
    driver.get("about:blank")
    driver.get(url)
    wait_for(driver, f"document.body.dataset.ready === '{ready}'")
    return time.perf_counter() - start


def shown_rows(driver) -> list[str]:
    return driver.execute_script("return [...document.querySelectorAll('#runs-table tbody tr[data-nonce]')]"
                                 ".map(r => r.dataset.nonce)")


def cell(driver, nonce: str, column: str) -> str:
    return driver.execute_script(
        f"return document.querySelector('tr[data-nonce=\"{nonce}\"] td[data-col=\"{column}\"]').textContent")


def type_into(driver, element_id: str, text: str, enter: bool = False) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    box = driver.find_element(By.ID, element_id)
    box.send_keys(Keys.CONTROL + "a", Keys.BACKSPACE)  # (clear() fires no input event)
    box.send_keys(text + (Keys.ENTER if enter else ""))


def test_runs_page_of_1000_runs_filters_sorts_groups_and_selects(driver, synthetic, tmp_path):
    from selenium.webdriver.common.by import By

    root, url = synthetic
    store = Store(root)
    runs = {r["nonce"]: r for r in store.runs().iter_rows(named=True)}
    seconds = open_page(driver, f"{url}/#/runs", "runs")
    driver.save_screenshot(str(tmp_path / "runs-1000.png"))
    assert sorted(shown_rows(driver)) == sorted(runs)
    some = next(iter(runs.values()))
    assert float(cell(driver, some["nonce"], "train/loss")) == pytest.approx(some["train/loss"], rel=1e-4)
    assert cell(driver, some["nonce"], "nodes") == str(some["nodes"])
    print(f"runs page of 1,000 runs drawn {seconds:.2f} s after navigation")

    type_into(driver, "filter", "run-000")
    assert sorted(shown_rows(driver)) == sorted(n for n, r in runs.items() if "run-000" in r["name"])
    driver.find_element(By.ID, "regex").click()
    type_into(driver, "filter", r"run-000[0-4]$")
    assert len(shown_rows(driver)) == 5
    type_into(driver, "filter", "")
    driver.find_element(By.CSS_SELECTOR, "#status-filter option[value=failed]").click()
    assert sorted(shown_rows(driver)) == sorted(n for n, r in runs.items() if r["_status"] == "failed")
    driver.find_element(By.CSS_SELECTOR, "#status-filter option[value='']").click()

    driver.find_element(By.CSS_SELECTOR, "th[data-sort='train/loss']").click()  # descending first
    driver.find_element(By.CSS_SELECTOR, "th[data-sort='train/loss']").click()  # then ascending
    expected = sorted(runs.values(), key=lambda r: (r["train/loss"], r["name"]))
    assert shown_rows(driver)[:20] == [r["nonce"] for r in expected[:20]]

    type_into(driver, "where", "train/loss < 0.26; config.optimization.lr == 0.001", enter=True)
    cursor = store.find().where("train/loss", "<", 0.26).frame(keys=["train/loss"]).collect()
    wanted = {n for n in cursor["nonce"].unique().to_list()} & {
        n for n in runs if store.run_record(n)["_config"].startswith("optimization:\n  lr: 0.001")}
    wait_for(driver, f"document.querySelectorAll('#runs-table tbody tr[data-nonce]').length === {len(wanted)}")
    assert set(shown_rows(driver)) == wanted and wanted
    type_into(driver, "where", "train/los < 1", enter=True)
    assert "did you mean 'train/loss'" in wait_for(driver, "document.getElementById('where-error').textContent")
    type_into(driver, "where", "", enter=True)
    wait_for(driver, "document.querySelectorAll('#runs-table tbody tr[data-nonce]').length === 1000")

    driver.find_element(By.CSS_SELECTOR, "#group-by option[value=project]").click()
    groups = driver.execute_script("return [...document.querySelectorAll('tr.group')].map(r => r.textContent)")
    assert sorted(g.split(" = ")[1].split(" ")[0] for g in groups) == ["audio", "lang", "vision"]

    type_into(driver, "add-column", "config.optimization.lr", enter=True)
    wait_for(driver, "document.querySelector('td[data-col=\"config.optimization.lr\"]')")
    assert "cols=config.optimization.lr" in driver.current_url
    picked = shown_rows(driver)[:2]
    for nonce in picked:
        driver.find_element(By.CSS_SELECTOR, f"tr[data-nonce='{nonce}'] input.pick").click()
    driver.find_element(By.ID, "compare").click()
    wait_for(driver, "document.body.dataset.ready === 'charts'")
    points = driver.execute_script("return Object.fromEntries([...document.querySelectorAll("
                                   "'.chart[data-key=\"train/loss\"] table.summary tr')].map(r => "
                                   "[r.dataset.nonce, +r.dataset.points]))")
    assert points == {n: len(store.find().nonce(n).columns(keys=["train/loss"])["train/loss"]) for n in picked}


def test_charts_keep_their_view_in_the_url(driver, synthetic, tmp_path):
    from selenium.webdriver.common.by import By

    root, url = synthetic
    store = Store(root)
    nonces = [r["nonce"] for r in store.runs().head(4).iter_rows(named=True)]
    view = f"{url}/#/charts?runs={','.join(nonces)}&keys=train/loss,val/loss&x=train/tokens&smooth=0.6&log=1"
    open_page(driver, view, "charts")
    driver.save_screenshot(str(tmp_path / "charts.png"))
    assert driver.find_element(By.ID, "x-axis").get_attribute("value") == "train/tokens"
    assert driver.find_element(By.ID, "smooth").get_attribute("value") == "0.6"
    assert driver.find_element(By.ID, "log-scale").is_selected()
    assert driver.execute_script("return document.querySelectorAll('.chart canvas').length") == 2
    last = driver.execute_script("return [...document.querySelectorAll('.chart[data-key=\"val/loss\"] "
                                 "table.summary tr')].map(r => [r.dataset.nonce, +r.dataset.last])")
    for nonce, value in last:
        assert value == store.find().nonce(nonce).columns(keys=["val/loss"])["val/loss"][-1]
    plot = "T.pages.charts.state().plots['train/loss']"
    legend = ("[...document.querySelectorAll('.chart[data-key=\"train/loss\"] .u-legend tr.u-series')]"
              ".filter(r => r.offsetParent !== null)")
    labels = driver.execute_script(f"return {legend}.map(r => r.querySelector('.u-label').textContent)")
    assert labels[0] == "train/tokens" and len(labels) == 5 and not any(x.endswith(" raw") for x in labels)
    driver.execute_script(f"const u = {plot}; u.setCursor({{left: u.bbox.width / devicePixelRatio / 2, top: 10}})")
    values = driver.execute_script(f"return {legend}.slice(1).map(r => r.querySelector('.u-value').textContent)")
    assert all("(raw " in v for v in values), values  # the smoothed value, then the raw one under the cursor
    driver.execute_script(f"{legend}[1].querySelector('.u-label').click()")  # hides the smoothed line and its raw one
    assert driver.execute_script(f"return {plot}.series.slice(1, 3).map(s => s.show)") == [False, False]
    ticks = "T.pages.charts.ticks"
    assert driver.execute_script(f"return {ticks}([40e6, 45e6, 50e6], 5e6, false)") == ["40M", "45M", "50M"]
    assert driver.execute_script(f"return {ticks}([1000000, 1000100, 1000200], 100, false)") == [
        "1M", "1.0001M", "1.0002M"]
    assert driver.execute_script(f"return {ticks}([0, 0.25, 0.5], 0.25, false)") == ["0", "0.25", "0.5"]
    driver.execute_script(f"{plot}.setScale('x', {{min: 10000, max: 10004}})")  # zoomed in: ticks stay distinct
    shown = driver.execute_script(f"return {plot}.axes[0]._values")  # (uPlot's drawn tick labels)
    assert len(shown) >= 2 and len(set(shown)) == len(shown) and all(shown), shown
    type_into(driver, "add-key", "train/tokens", enter=True)  # a third chart, kept in the URL
    wait_for(driver, "document.querySelectorAll('.chart canvas').length === 3")
    assert "keys=train%2Floss%2Cval%2Floss%2Ctrain%2Ftokens" in driver.current_url or \
        "keys=train/loss,val/loss,train/tokens" in driver.current_url


def test_run_and_node_pages_of_a_trained_root(driver, trained, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    root, url, built = trained
    store = Store(root)
    open_page(driver, f"{url}/#/run/{built.main}", "run")
    driver.save_screenshot(str(tmp_path / "run.png"))
    seqs = driver.execute_script("return [...document.querySelectorAll('#checkpoints tr[data-seq]')]"
                                 ".map(r => +r.dataset.seq)")
    assert seqs == [n.seq for n in store.find().nonce(built.main).checkpoint().all()]
    tree = driver.execute_script("return [...document.querySelectorAll('#lineage li')].map(l => l.dataset.nonce)")
    assert tree == [built.main, built.branch]
    assert "resumed in this lineage" in driver.find_element(By.ID, "lineage").text
    assert driver.find_element(By.ID, "config-yaml").text.startswith(store.run_record(built.main)["_config"][:20])
    Select(driver.find_element(By.ID, "diff-with")).select_by_value(built.branch)
    diff = wait_for(driver, "document.getElementById('diff-table')?.textContent")
    assert "optimization.lr" in diff
    assert "no process output" in wait_for(driver, "document.getElementById('log-list').textContent")

    open_page(driver, f"{url}/#/run/{built.failed}", "run")
    assert driver.find_element(By.ID, "run-error").text == store.run_record(built.failed)["_error"].strip()

    last = store.find().nonce(built.main).checkpoint().last()
    open_page(driver, f"{url}/#/node/{last.id}", "node")
    wait_for(driver, "document.querySelector('img.artifact')?.naturalWidth > 0")
    driver.save_screenshot(str(tmp_path / "node.png"))
    assert driver.find_element(By.ID, "node-id").get_attribute("value") == last.id
    shown = driver.execute_script("return document.querySelector('#record-table tr[data-key=\"train/loss\"] "
                                  ".value').textContent")
    assert float(shown) == pytest.approx(store.record(last)["train/loss"], rel=1e-4)
    commands = driver.execute_script("return [...document.querySelectorAll('pre.cmd')].map(p => p.dataset.k)")
    assert {"resume", "branch", "verify", "sample"} <= set(commands)


def test_a_live_run_reaches_the_table_and_the_chart(driver, trained, tmp_path):
    root, url, _ = trained
    store = Store(root)
    node = Node.start("live.watch.run")
    with store.writer() as w:
        w.job(node, "doc/live", "training:\n  tokens: 10\n")
        w.write(node, {"train/loss": 3.0, "train/tokens": 0})
    open_page(driver, f"{url}/#/runs", "runs")
    wait_for(driver, f"document.querySelector('tr[data-nonce=\"{node.nonce}\"]')", timeout=10)
    open_page(driver, f"{url}/#/charts?runs={node.nonce}&keys=train/loss", "charts")
    points = "+document.querySelector('.chart table.summary tr').dataset.points"
    assert driver.execute_script(f"return {points}") == 1
    latencies = []
    for k in range(1, 4):
        node = node.next()
        with store.writer() as w:
            w.write(node, {"train/loss": 3.0 - 0.5 * k, "train/tokens": 64 * k})
        flushed = time.perf_counter()
        wait_for(driver, f"{points} === {k + 1}", timeout=10)
        latencies.append(time.perf_counter() - flushed)
    driver.save_screenshot(str(tmp_path / "live.png"))
    print(f"live report shown in the chart {max(latencies):.2f} s after its flush at worst")
    assert max(latencies) < 5  # the bench measures the figure (2 s); a loaded CI machine gets slack


@pytest.mark.gcs
def test_the_runs_and_chart_pages_of_a_gcs_root(driver, gcs_emulator):
    from tests.conftest import gcs_bucket_root

    url = gcs_bucket_root(gcs_emulator)  # the server's process inherits the emulator's environment
    nonces = make_runs(url, runs=3, nodes=6, compact=False)
    with ui_server(url) as app:
        open_page(driver, f"{app}/#/runs", "runs")
        assert sorted(shown_rows(driver)) == sorted(nonces)
        assert cell(driver, nonces[0], "nodes") == "6"
        open_page(driver, f"{app}/#/charts?runs={nonces[0]}&keys=train/loss", "charts")
        assert driver.execute_script("return +document.querySelector('.chart table.summary tr').dataset.points") == 6
