"""`theseus ui` on a stranger's root, in a real browser (headless Chromium): markup put in every
free-text field a root can hold (job key and source, config keys and values, string metric values,
status, error text, a run's note and tags, process output, artifact and analysis names) and in the page's URL never runs
and never becomes an element on any page, and no page trips the Content-Security-Policy. These are
the guarantees docs/ui.md states ("On a stranger's root")."""

from __future__ import annotations

import json
import os
import shutil
import urllib.parse
from pathlib import Path

import pytest
import yaml

from tests.system_packages import skip_or_fail
from tests.ui._browser import browser, chromium_paths, ui_server, wait_for
from theseus.store import Node, Store

pytestmark = pytest.mark.slow

# breaks out of a double- or single-quoted attribute, and is an element in text; runs only if injected
PAYLOAD = "\"'><img src=x onerror=window.__xss=1>"
ELEMENT = PAYLOAD[3:]  # the element itself, as text
PLAIN = '<i class="planted">planted</i>'  # harmless markup: shown as its text, never as an element
WATCH = ("window.__csp = []; document.addEventListener('securitypolicyviolation', "
         "e => window.__csp.push(e.effectiveDirective + ' ' + e.blockedURI));")
DOCS = Path(__file__).resolve().parents[2] / "docs" / "ui.md"


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    if chromium_paths() is None:
        skip_or_fail("chromium and chromium-driver are missing: apt-get install chromium chromium-driver")
    with browser(str(tmp_path_factory.mktemp("downloads"))) as d:
        d.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": WATCH})
        yield d


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """A root holding PAYLOAD in every free-text field, served: ``(url, nonces, node ids)``."""
    from theseus.dispatch.bootstrap import publish_log
    from theseus.dispatch.spec import LaunchSpec

    base = tmp_path_factory.mktemp("hostile")
    root = str(base / "root")
    store, apart = Store(root), Store(str(base / "apart"))  # a root holds one type per key: str ones apart
    strings, failed, numbers = Node.start("p.g.strings"), Node.start("p.g.failed"), Node.start("p.g.numbers")
    config = yaml.safe_dump({PAYLOAD: PAYLOAD, "optimization": {"lr": PAYLOAD, "name": PLAIN}})
    spec = LaunchSpec("data/tokenize/pydoc", "launched", "", root, nonce="abcdef")
    with store.writer() as w:
        w.job(failed, PAYLOAD, yaml.safe_dump({"optimization": {"lr": 0.1, "name": "x"}}))
        w.write(failed, {"train/loss": 1.0, "train/tokens": 10})
        w.failed(failed.next(), PAYLOAD)
        w.job(numbers, "doc/job", "lr: 0.1\n")
        for k in range(3):
            w.write(numbers if k == 0 else Node(numbers.name, numbers.nonce, k), {"train/loss": 1.0 / (k + 1)})
        w.job(spec.first_node(), PAYLOAD, "")
    with apart.writer() as w:
        w.job(strings, PAYLOAD, config, source=PAYLOAD)
        w.write(strings, {"train/loss": PAYLOAD, "val/loss": PAYLOAD, "train/tokens": PAYLOAD,
                          "eval/sums/exact": PAYLOAD, "note": PAYLOAD})
        w.status(strings, PAYLOAD)
    shutil.copytree(apart.path("log"), store.path("log"), dirs_exist_ok=True)  # a stranger's root: two roots' logs
    publish_log(spec, 0, f"{PAYLOAD}\n{PLAIN}\n".encode())
    folder = store.objects(strings)
    for rel in (f"{PAYLOAD}.png", f"{PAYLOAD}.txt", f"analysis/{PAYLOAD}/half.npy"):  # the last: interrupted
        os.makedirs(os.path.dirname(f"{folder}/{rel}"), exist_ok=True)
        with open(f"{folder}/{rel}", "wb") as f:
            f.write(b"\x89PNG not really")
    with store.writer() as w:
        w.artifacts(strings, f"objects/{strings.id}")
        w.marks(failed, tags=json.dumps(["ok", PAYLOAD]), note=PAYLOAD)  # a tag and note by hand
    with ui_server(root) as url:
        yield url, {"strings": strings.nonce, "failed": failed.nonce, "numbers": numbers.nonce,
                    "launched": "abcdef"}, {"strings": strings.id}


def visit(driver, url: str, ready: str | None) -> None:
    driver.get("about:blank")
    driver.get(url)
    wait_for(driver, f"document.body.dataset.ready === '{ready}'" if ready
             else "document.getElementById('page-error') || document.getElementById('chart-error')?.textContent")


def assert_inert(driver, where: str) -> None:
    """No payload ran or became an element, and nothing tripped the page's policy."""
    state = driver.execute_script(
        "return {ran: window.__xss, injected: document.querySelectorAll('img[src=\"x\"], .planted').length,"
        " csp: window.__csp}")
    assert state["ran"] is None and state["injected"] == 0, (where, state)
    assert state["csp"] == [], (where, state["csp"])


def test_markup_from_the_root_never_runs_on_any_page(driver, hostile):
    from selenium.webdriver.support.ui import Select

    url, nonces, ids = hostile
    visit(driver, f"{url}/#/runs", "runs")
    assert PAYLOAD in driver.execute_script("return document.getElementById('runs-table').textContent")
    assert_inert(driver, "runs")
    for view in ("group=job&cols=note", "group=status", f"q={urllib.parse.quote(PAYLOAD)}",
                 f"tag={urllib.parse.quote(PAYLOAD)}&all=1", "tag=ok"):
        visit(driver, f"{url}/#/runs?{view}", "runs")
        assert_inert(driver, f"runs?{view}")

    visit(driver, f"{url}/#/charts?runs={nonces['numbers']},{nonces['failed']},{nonces['strings']}&keys=train/loss",
          "charts")
    wait_for(driver, "document.querySelector('.chart[data-ready=\"1\"]')")
    assert_inert(driver, "charts")

    visit(driver, f"{url}/#/run/{nonces['strings']}", "run")
    wait_for(driver, "!document.getElementById('log-list').classList.contains('muted') || "
                     "document.getElementById('log-note')")
    shown = driver.execute_script("return ['run-loss', 'config-yaml', 'summary', 'evals']"
                                  ".map(id => document.getElementById(id).textContent)")
    assert shown[0] == PAYLOAD and all(ELEMENT in text for text in shown), shown  # YAML quotes the quotes
    assert_inert(driver, "run page")
    Select(driver.find_element("id", "diff-with")).select_by_value(nonces["failed"])
    diff = wait_for(driver, "document.getElementById('diff-table')?.textContent")
    assert PAYLOAD in diff and PLAIN in diff
    assert_inert(driver, "run page, config diff")

    visit(driver, f"{url}/#/run/{nonces['failed']}", "run")
    assert driver.execute_script("return document.getElementById('run-error').textContent") == PAYLOAD
    assert driver.execute_script("return document.getElementById('run-note').textContent") == PAYLOAD
    assert driver.execute_script("return document.getElementById('run-tags').textContent") == "ok"  # markup: no tag
    assert_inert(driver, "failed run page")

    visit(driver, f"{url}/#/run/{nonces['launched']}", "run")
    logs = wait_for(driver, "document.querySelector('#log-list pre.log')?.textContent")
    assert PAYLOAD in logs and PLAIN in logs
    assert_inert(driver, "launched run page")

    visit(driver, f"{url}/#/node/{ids['strings']}", "node")
    artifacts = driver.execute_script("return document.getElementById('artifacts').textContent")
    assert f"{PAYLOAD}.png" in artifacts and f"{PAYLOAD}.txt" in artifacts
    interrupted = driver.execute_script("return document.getElementById('interrupted').textContent")
    assert f"analysis/{PAYLOAD}" in interrupted and "half.npy" not in artifacts
    assert PAYLOAD in driver.execute_script("return document.getElementById('record-table').textContent")
    assert_inert(driver, "node page")


def test_markup_in_the_url_never_runs(driver, hostile):
    url, nonces, _ = hostile
    bad = urllib.parse.quote(PAYLOAD, safe="")
    for hash_ in (f"#/charts?runs={bad}&keys=train/loss", f"#/charts?runs={nonces['numbers']}&smooth={bad}",
                  f"#/charts?runs={nonces['numbers']}&keys={bad}&x={bad}", f"#/charts?runs={bad},{bad}&smooth=2"):
        visit(driver, f"{url}/{hash_}", "charts")
        assert_inert(driver, hash_)
    assert driver.execute_script("return document.getElementById('smooth').value") == "0.99"
    for hash_ in (f"#/run/{bad}", f"#/node/{bad}"):
        visit(driver, f"{url}/{hash_}", None)
        assert_inert(driver, hash_)


def test_the_docs_state_what_these_tests_check():
    text = DOCS.read_text()
    section = text.split("## On a stranger's root", 1)[1].split("\n## ", 1)[0]
    for promise in ("read-only", "never runs", "outside the root", "Host", "Content-Security-Policy",
                    "hard link", "MANIFEST.json"):
        assert promise in section, promise
