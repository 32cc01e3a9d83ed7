"""`theseus ui` on a stranger's root, through HTTP: artifacts are never served as markup or script,
every response carries the Content-Security-Policy, only the bound host names are answered, nothing
outside the root is listed or served (symbolic links, hard links, a walk of the whole filesystem),
nothing is written (a corrupt view present), and an interrupted analysis is not listed as published."""

from __future__ import annotations

import os

import pytest
from starlette.testclient import TestClient

from theseus.store import Node, Store
from theseus.store.layout import MANIFEST
from theseus.ui import create_app
from theseus.ui.node import MAX_ENTRIES

MARKUP = ("page.xhtml", "page.xht", "data.xml", "proc.xpdl", "pic.svg", "page.html", "page.htm", "feed.rss",
          "sheet.xsl", "doc.mml")


def _root(tmp_path, name: str = "p.g.a") -> tuple[str, Store, Node]:
    root = str(tmp_path / "root")
    store = Store(root)
    node = Node.start(name)
    with store.writer() as w:
        w.job(node, "doc/job", "lr: 0.1\n")
        w.write(node, {"train/loss": 1.0})
    return root, store, node


def _client(root: str, **kwargs) -> TestClient:
    return TestClient(create_app(root, **kwargs), base_url="http://127.0.0.1:8765")


def _publish(folder: str, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        os.makedirs(os.path.dirname(f"{folder}/{rel}"), exist_ok=True)
        with open(f"{folder}/{rel}", "wb") as f:
            f.write(data)


def test_artifacts_are_served_as_pictures_text_or_downloads_never_as_markup(tmp_path):
    root, store, node = _root(tmp_path)
    script = b'<html xmlns="http://www.w3.org/1999/xhtml"><script>window.__xss=1</script></html>'
    _publish(store.objects(node), {**{name: script for name in MARKUP}, "weights.bin": b"\0\1",
                                   "loss.png": b"\x89PNG fake", "notes.txt": b"hello"})
    client = _client(root)
    for name in (*MARKUP, "weights.bin", "loss.png", "notes.txt"):
        got = client.get(f"/api/file/{node.id}/{name}")
        assert got.status_code == 200, (name, got.text)
        kind = got.headers["content-type"].split(";")[0]
        assert kind in ("text/plain", "application/octet-stream", "image/png"), (name, kind)
        assert got.headers["x-content-type-options"] == "nosniff"
        policy = got.headers["content-security-policy"]
        assert "sandbox" in policy and "default-src 'none'" in policy, (name, policy)
        if kind == "application/octet-stream":
            assert got.headers["content-disposition"].startswith("attachment;"), name
    assert client.get(f"/api/file/{node.id}/loss.png").headers["content-type"] == "image/png"
    assert client.get(f"/api/file/{node.id}/page.xhtml").headers["content-disposition"] == (
        'attachment; filename="page.xhtml"')


def test_every_response_carries_the_content_security_policy(tmp_path):
    root, _, node = _root(tmp_path)
    client = _client(root)
    for path in ("/", "/static/app.js", "/static/style.css", "/api/runs", f"/api/run/{node.nonce}",
                 "/api/run/zzzzzz", "/api/run/abcdef", "/static/nothing.js"):
        got = client.get(path)
        policy = got.headers.get("content-security-policy", "")
        for rule in ("default-src 'self'", "script-src 'self'", "object-src 'none'", "base-uri 'none'",
                     "frame-ancestors 'none'"):
            assert rule in policy, (path, policy)
        assert "unsafe-inline" not in policy and got.headers["x-content-type-options"] == "nosniff", path
    assert "<script>" not in client.get("/").text  # no inline script: the policy would refuse it


def test_only_the_bound_host_names_are_answered(tmp_path):
    root, _, _ = _root(tmp_path)
    client = _client(root)
    assert client.get("/api/runs", headers={"host": "evil.example"}).status_code == 400
    assert client.get("/", headers={"host": "evil.example:8765"}).status_code == 400
    assert client.get("/api/runs", headers={"host": "127.0.0.1.evil.example"}).status_code == 400
    for host in ("127.0.0.1:8765", "localhost:8765", "LOCALHOST", "[::1]:8765"):
        assert client.get("/api/runs", headers={"host": host}).status_code == 200, host
    assert client.get("/api/runs", headers={"host": "box.lan:8765"}).status_code == 400
    served = _client(root, hosts=["box.lan"])
    assert served.get("/api/runs", headers={"host": "box.lan:8765"}).status_code == 200
    assert served.get("/api/runs", headers={"host": "evil.example"}).status_code == 400


def test_nothing_outside_the_root_is_listed_or_served(tmp_path):
    root, store, node = _root(tmp_path)
    outside = tmp_path / "outside"
    _publish(str(outside), {"secret.txt": b"outside the root", "deep/secret.png": b"\x89PNG outside"})
    folder = store.objects(node)
    _publish(folder, {"mine.txt": b"mine"})
    os.link(outside / "secret.txt", f"{folder}/hard.txt")  # a hard link: a regular file, two names
    os.symlink("/", f"{folder}/everything")
    client = _client(root)
    page = client.get(f"/api/node/{node.id}").json()
    assert [a["path"] for a in page["artifacts"]] == ["mine.txt"] and not page["artifacts_cut"]
    refused = client.get(f"/api/file/{node.id}/hard.txt")
    assert refused.status_code == 400 and "2 hard links" in refused.json()["error"]
    assert client.get(f"/api/file/{node.id}/everything/etc/hostname").status_code == 400

    linked = Node(node.name, node.nonce, 1)  # its whole folder is a link out of the root
    with store.writer() as w:
        w.write(linked, {"train/loss": 0.5})
    os.symlink(outside, store.objects(linked))
    page = client.get(f"/api/node/{linked.id}").json()
    assert page["artifacts"] == [] and "symbolic link" in page["artifacts_refused"]
    assert client.get(f"/api/file/{linked.id}/secret.txt").status_code == 400
    assert client.get(f"/api/file/{linked.id}/deep/secret.png").status_code == 400

    crowded = Node(node.name, node.nonce, 2)
    with store.writer() as w:
        w.write(crowded, {"train/loss": 0.25})
    _publish(store.objects(crowded), {f"many/{k:05d}.txt": b"" for k in range(MAX_ENTRIES + 5)})
    page = client.get(f"/api/node/{crowded.id}").json()
    assert page["artifacts_cut"] and len(page["artifacts"]) < MAX_ENTRIES


def test_a_process_log_linked_out_of_the_root_is_not_read(tmp_path):
    from theseus.dispatch.bootstrap import publish_log
    from theseus.dispatch.spec import LaunchSpec

    root = str(tmp_path / "root")
    spec = LaunchSpec("data/tokenize/pydoc", "launched", "", root, nonce="abcdef")
    with Store(root).writer() as w:
        w.job(spec.first_node(), spec.job_key, "")
    path = publish_log(spec, 0, b"hello\n")
    (tmp_path / "secret.txt").write_bytes(b"SECRET")
    os.unlink(path)
    os.link(tmp_path / "secret.txt", path)
    logs = _client(root).get("/api/run/abcdef/logs").json()["logs"]
    assert len(logs) == 1 and "SECRET" not in logs[0]["text"] and "hard links" in logs[0]["text"]


def _snapshot(root: str) -> dict[str, tuple[int, int]]:
    """Every name under the root with its size and modification time."""
    found = {}
    for top, folders, files in os.walk(root):
        for name in (*folders, *files):
            st = os.lstat(os.path.join(top, name))
            found[os.path.relpath(os.path.join(top, name), root)] = (st.st_size, st.st_mtime_ns)
    return found


def test_no_route_writes_to_the_root_even_with_a_corrupt_view(tmp_path):
    root, store, node = _root(tmp_path)
    other = Node.start("p.g.b")
    with store.writer() as w:
        w.job(other, "doc/job", "lr: 0.2\n")
        for k in range(3):
            w.write(node.next() if k else node, {"train/loss": 1.0 / (k + 1)})
            w.write(other, {"train/loss": 2.0})
            w.write(other, {"train/loss": 1.5})
    _publish(store.objects(node), {"a.txt": b"x"})
    store.compact()
    [view] = [v for v in os.listdir(f"{root}/view") if v.endswith(".parquet")]
    with open(f"{root}/view/{view}", "r+b") as f:  # damaged in the middle: audit calls it corrupt
        f.seek(os.path.getsize(f"{root}/view/{view}") // 2)
        f.write(b"\xff" * 64)
    before = _snapshot(root)
    client = _client(root)
    gets = ["/", "/static/app.js", "/api/runs?extra=train/loss", "/api/poll?since=0", "/api/keys",
            f"/api/series?runs={node.nonce},{other.nonce}&keys=train/loss", f"/api/run/{node.nonce}",
            f"/api/run/{other.nonce}", f"/api/run/{node.nonce}/logs", f"/api/diff?run={node.nonce}&other={other.nonce}",
            f"/api/node/{node.id}", f"/api/file/{node.id}/a.txt"]
    for path in gets:
        assert client.get(path).status_code == 200, path
    assert client.post("/api/filter", json={"conditions": ["train/loss < 2"]}).status_code == 200
    assert client.post("/api/csv", json={"nonces": None, "columns": ["nonce"]}).status_code == 200
    assert _snapshot(root) == before
    audited = client.get(f"/api/run/{node.nonce}").json()["audit"]  # the damage is reported, not marked
    assert "not marked rejected" in " ".join(p["message"] for p in audited["problems"]), audited


def test_an_interrupted_analysis_is_not_listed_as_published(tmp_path):
    root, store, node = _root(tmp_path)
    _publish(store.objects(node), {"analysis/norms/norms.npy": b"half written",  # no MANIFEST.json: interrupted
                                   "analysis/attention/attention.png": b"\x89PNG",
                                   f"analysis/attention/{MANIFEST}": b"{}", "analysis/loss.png": b"\x89PNG"})
    client = _client(root)
    page = client.get(f"/api/node/{node.id}").json()
    assert page["interrupted"] == ["analysis/norms"]
    assert sorted(a["path"] for a in page["artifacts"]) == [
        "analysis/attention/MANIFEST.json", "analysis/attention/attention.png", "analysis/loss.png"]
    refused = client.get(f"/api/file/{node.id}/analysis/norms/norms.npy")
    assert refused.status_code == 400 and "interrupted" in refused.json()["error"]
    assert client.get(f"/api/file/{node.id}/analysis/attention/attention.png").status_code == 200


@pytest.mark.parametrize("field", ["train/loss", "val/loss", "train/tokens", "eval/sums/exact"])
def test_string_values_reach_the_pages_as_data(tmp_path, field):
    """The API hands a string metric to the page as a JSON string (the page escapes it; the browser
    test checks that)."""
    root, node, payload = str(tmp_path / "root"), Node.start("p.g.s"), "<img src=x onerror=alert(1)>"
    with Store(root).writer() as w:
        w.write(node, {field: payload})
    page = _client(root).get(f"/api/run/{node.nonce}").json()
    shown = page["row"].get(field) if not field.startswith("eval/") else page["evals"][0]["value"]
    assert shown == payload
