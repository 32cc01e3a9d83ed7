"""`theseus tag / untag / note / hide / unhide`: records a run's marks, shown and honoured by `ls`, refused
for a run that is not there, and never changing or deleting a file of the root."""

from __future__ import annotations

import json
import os

from typer.testing import CliRunner

from theseus.cli import app
from theseus.store import Node, Store

runner = CliRunner()


def invoke(*args):
    result = runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})
    return result.exit_code, result.output


def make_runs(root) -> dict[str, Node]:
    store = Store(str(root))
    made = {}
    for name, job in (("p.g.kept", "gpt/train/pretrain"), ("p.g.other", "gpt/train/pretrain"),
                      ("p.g.scored", "gpt/evaluate")):
        node = Node.start(name)
        with store.writer() as w:
            w.job(node, job, "optimization:\n  lr: 0.1\n")
            w.write(node, {"train/loss": 2.0})
            w.finished(node)
        made[name] = node
    return made


def files(root) -> dict[str, tuple[int, int]]:
    """Every file under the root with its size and mtime."""
    found = {}
    for folder, _, names in os.walk(root):
        for name in names:
            stat = os.stat(os.path.join(folder, name))
            found[os.path.relpath(os.path.join(folder, name), root)] = (stat.st_size, stat.st_mtime_ns)
    return found


def listed(root, *options) -> list[dict]:
    code, out = invoke("ls", root, "--json", *options)
    assert code == 0, out
    return json.loads(out)


def test_tags_add_up_and_ls_selects_and_shows_them(tmp_path):
    runs = make_runs(tmp_path)
    kept = runs["p.g.kept"].nonce
    assert invoke("tag", tmp_path, kept, "baseline")[0] == 0
    code, out = invoke("tag", tmp_path, kept, "lr-sweep", "baseline")
    assert code == 0 and "baseline, lr-sweep" in out
    [row] = listed(tmp_path, "--tag", "lr-sweep")
    assert row["nonce"] == kept and row["tags"] == ["baseline", "lr-sweep"]
    assert listed(tmp_path, "--tag", "baseline", "--tag", "nope") == []
    code, out = invoke("ls", tmp_path)
    assert "baseline,lr-sweep" in next(line for line in out.splitlines() if line.startswith("p.g.kept"))
    assert invoke("untag", tmp_path, kept, "baseline")[0] == 0
    assert [r["tags"] for r in listed(tmp_path, "--tag", "lr-sweep")] == [["lr-sweep"]]
    assert Store(str(tmp_path)).find().tag("baseline").all() == []


def test_a_note_is_shown_and_replaced_by_the_next(tmp_path):
    kept = make_runs(tmp_path)["p.g.kept"].nonce
    assert invoke("note", tmp_path, kept, "diverged after warmup")[0] == 0
    assert invoke("note", tmp_path, kept, "fixed: lower lr")[0] == 0
    row = next(r for r in listed(tmp_path) if r["nonce"] == kept)
    assert row["note"] == "fixed: lower lr"
    code, out = invoke("ls", tmp_path, "--wide")
    assert "fixed: lower lr" in out
    code, out = invoke("show", tmp_path, kept)
    assert code == 0 and "fixed: lower lr" in out


def test_hidden_and_evaluation_runs_are_listed_only_with_all(tmp_path):
    runs = make_runs(tmp_path)
    kept, other = runs["p.g.kept"].nonce, runs["p.g.other"].nonce
    assert sorted(r["nonce"] for r in listed(tmp_path)) == sorted([kept, other])  # gpt/evaluate: out
    code, out = invoke("hide", tmp_path, kept)
    assert code == 0 and "hidden" in out
    assert [r["nonce"] for r in listed(tmp_path)] == [other]
    every = {r["nonce"]: r for r in listed(tmp_path, "--all")}
    assert set(every) == {n.nonce for n in runs.values()} and every[kept]["hidden"] is True
    assert invoke("unhide", tmp_path, kept)[0] == 0
    assert sorted(r["nonce"] for r in listed(tmp_path)) == sorted([kept, other])


def test_a_run_that_is_not_there_or_a_bad_tag_is_refused_and_nothing_is_written(tmp_path):
    make_runs(tmp_path)
    before = files(tmp_path)
    for args, named in ((("tag", tmp_path, "abcdef", "x"), "'abcdef'"), (("hide", tmp_path, "abcdef"), "'abcdef'"),
                        (("note", tmp_path, "xyz", "text"), "'xyz'"),
                        (("tag", tmp_path, make_runs(tmp_path)["p.g.kept"].nonce, "two words"), "'two words'")):
        before = files(tmp_path)
        code, out = invoke(*args)
        assert code == 2 and named in out, (args, out)
        assert files(tmp_path) == before, args


def test_marks_only_add_files(tmp_path):
    kept = make_runs(tmp_path)["p.g.kept"].nonce
    before = files(tmp_path)
    for args in (("tag", kept, "a", "b"), ("note", kept, "n"), ("hide", kept), ("unhide", kept), ("untag", kept, "a")):
        assert invoke(args[0], tmp_path, *args[1:])[0] == 0, args
    after = files(tmp_path)
    assert len(after) > len(before)
    assert {path: after[path] for path in before} == before  # every file there before, unchanged
