"""The UI's runs API and run marks: hidden and evaluation runs only with ``all=1``, ``tag=`` selects by
tag, every row carries its tags and note, and a run hidden while the page polls leaves the table."""

from __future__ import annotations

import time

import pytest
from starlette.testclient import TestClient

from theseus.store import Node, Store, marks
from theseus.ui import create_app


def make(root) -> dict[str, str]:
    store = Store(str(root))
    nonces = {}
    for name, job in (("p.g.a", "gpt/train/pretrain"), ("p.g.b", "gpt/train/pretrain"), ("p.g.eval", "gpt/evaluate")):
        node = Node.start(name)
        with store.writer() as w:
            w.job(node, job, "lr: 0.1\n")
            w.write(node, {"train/loss": 1.0})
        nonces[name] = node.nonce
    return nonces


def rows(client: TestClient, query: str = "") -> dict[str, dict]:
    answer = client.get(f"/api/runs?{query}")
    assert answer.status_code == 200, answer.text
    return {r["nonce"]: r for r in answer.json()["rows"]}


def test_runs_api_honours_hidden_evaluation_runs_and_tags(tmp_path):
    nonces = make(tmp_path)
    a, b, ev = nonces["p.g.a"], nonces["p.g.b"], nonces["p.g.eval"]
    store = Store(str(tmp_path))
    marks.mark(store, a, tags=["baseline", "keep"], note="<b>first</b>")
    marks.mark(store, b, tags=["keep"], hidden=True)
    client = TestClient(create_app(str(tmp_path)), base_url="http://127.0.0.1")
    shown = rows(client)
    assert set(shown) == {a}  # b hidden, the evaluation run listed only when asked
    assert shown[a]["tags"] == ["baseline", "keep"] and shown[a]["note"] == "<b>first</b>"
    every = rows(client, "all=1")
    assert set(every) == {a, b, ev} and every[b]["hidden"] is True and every[ev]["hidden"] is False
    assert set(rows(client, "all=1&tag=keep")) == {a, b}
    assert set(rows(client, "tag=keep,baseline")) == {a}
    assert rows(client, "tag=nope") == {}
    bad = client.get("/api/runs?tag=%3Cb%3E")
    assert bad.status_code == 400 and "invalid tag" in bad.json()["error"]


def test_a_run_hidden_while_the_page_polls_is_not_sent_back(tmp_path):
    nonces = make(tmp_path)
    client = TestClient(create_app(str(tmp_path)), base_url="http://127.0.0.1")
    token = client.get("/api/runs").json()["token"]
    marks.mark(Store(str(tmp_path)), nonces["p.g.a"], hidden=True)
    deadline = time.monotonic() + 30  # the app reads the root again at most every MIN_POLL_S
    while nonces["p.g.a"] not in (polled := client.get(f"/api/poll?since={token}").json())["changed"]:
        assert time.monotonic() < deadline, polled
        time.sleep(0.2)
    # the page drops a changed run it is not sent back
    assert nonces["p.g.a"] not in {r["nonce"] for r in polled["rows"]}
    polled = client.get(f"/api/poll?since={token}&all=1").json()
    assert nonces["p.g.a"] in {r["nonce"] for r in polled["rows"]}


@pytest.mark.slow
def test_the_runs_page_filters_by_tag_and_shows_hidden_runs_when_asked(tmp_path):
    """In a browser: the tags column, the tag box and the "hidden too" box (the URL keeps both)."""
    from tests.system_packages import skip_or_fail
    from tests.ui._browser import browser, chromium_paths, ui_server, wait_for

    if chromium_paths() is None:
        skip_or_fail("chromium and chromium-driver are missing: apt-get install chromium chromium-driver")
    nonces = make(tmp_path)
    store = Store(str(tmp_path))
    marks.mark(store, nonces["p.g.a"], tags=["keep"], note="why")
    marks.mark(store, nonces["p.g.b"], hidden=True)
    shown = "return [...document.querySelectorAll('#runs-table tbody tr')].map(r => r.dataset.nonce).sort()"
    with ui_server(str(tmp_path)) as url, browser(str(tmp_path / "downloads")) as driver:
        for query, expected in (("", [nonces["p.g.a"]]), ("tag=keep", [nonces["p.g.a"]]), ("tag=other", []),
                                ("all=1", sorted(nonces.values()))):
            driver.get("about:blank")
            driver.get(f"{url}/#/runs?{query}")
            wait_for(driver, "document.body.dataset.ready === 'runs'")
            assert driver.execute_script(shown) == expected, query
        cell = driver.execute_script(f"return document.querySelector('tr[data-nonce=\"{nonces['p.g.a']}\"] "
                                     "td[data-col=tags]').textContent")
        assert "keep" in cell and "note" in cell
        driver.find_element("id", "show-all").click()  # off again: the hidden run leaves the table
        wait_for(driver, f"!document.querySelector('tr[data-nonce=\"{nonces['p.g.b']}\"]')")
        assert "all=1" not in driver.current_url
