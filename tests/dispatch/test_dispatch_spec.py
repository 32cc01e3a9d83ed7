"""Launch specs (plain JSON, checked on load), code packaging, process info, and the remote bootstrap script."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from theseus.dispatch.bootstrap import BadInput, bootstrap_script, check_spec, process_info
from theseus.dispatch.package import DirtyTreeError, package_code
from theseus.dispatch.spec import LaunchSpec
from theseus.quick import build_spec, quick, spec_from_quick
from theseus.store import Store
from theseus.store.node import Node

# --- the spec ---------------------------------------------------------------------------


def spec(**changes) -> LaunchSpec:
    fields = {"job_key": "gpt/train/pretrain", "run_name": "proj.grp.run", "config_yaml": "training:\n  tokens: 9\n",
              "root": "gs://bucket/root", "nonce": "0a1b2c", "revision": "f" * 40, "groups": ("cuda12",),
              "env": {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.9"}}
    return LaunchSpec(**{**fields, **changes})


def test_spec_round_trips_through_json_as_plain_data():
    s = spec(base_node=Node("proj.grp.run", "0a1b2c", 7).id, resume=True)
    text = s.to_json()
    data = json.loads(text)
    assert data["format"] == "theseus.launch/1" and data["groups"] == ["cuda12"] and data["resume"] is True
    assert LaunchSpec.from_json(text) == s and LaunchSpec.from_json(text.encode()) == s
    assert s.first_node() == Node("proj.grp.run", "0a1b2c", 8, Node("proj.grp.run", "0a1b2c", 7).id)


def test_fresh_and_resumed_specs_choose_their_nonce():
    base = Node("a.b.c", "123abc", 3)
    assert spec(nonce="").nonce != spec(nonce="").nonce  # fresh each time
    assert spec(nonce="", base_node=base.id, resume=True).nonce == "123abc"  # continues the lineage
    branch = spec(nonce="", base_node=base.id)
    assert branch.nonce != "123abc" and branch.first_node().parent == base.id and branch.first_node().seq == 0


@pytest.mark.parametrize(("changes", "message"), [
    ({"job_key": ""}, "'job_key' must not be empty"),
    ({"root": 3}, "'root' must be str"),
    ({"resume": "yes"}, "'resume' must be bool"),
    ({"resume": True}, "resume=True needs a base_node"),
    ({"base_node": "not-an-id!"}, "field 'base_node'"),
    ({"base_node": Node("a.b.c", "123abc", 3).id, "resume": True, "nonce": "0a1b2c"}, "the nonce must be '123abc'"),
    ({"nonce": "XYZ"}, "field 'nonce'"),
    ({"run_name": "a..b"}, "field 'run_name'"),
    ({"groups": ("cpu", "rm -rf /")}, "is not a uv dependency group"),
    ({"groups": "cpu"}, "'groups' must be tuple"),
    ({"env": {"A B": "1"}}, "is not NAME=string"),
    ({"env": {"A": 1}}, "is not NAME=string"),
])
def test_bad_specs_are_refused_naming_the_field(changes, message):
    with pytest.raises(ValueError, match=None) as error:
        spec(**changes)
    assert message in str(error.value)


@pytest.mark.parametrize(("text", "message"), [
    ("{", "must be JSON"),
    ("[]", "is a JSON object"),
    ('{"format": "pickle"}', "not a theseus launch spec"),
    ('{"format": "theseus.launch/1", "job_key": "k/x"}', "missing field(s) config_yaml, root, run_name"),
    ('{"format": "theseus.launch/1", "job_key": "k/x", "run_name": "r", "config_yaml": "", "root": "/r", '
     '"code": "import os"}', "unknown field(s) code"),
])
def test_loading_a_bad_spec_names_the_problem(text, message):
    with pytest.raises(ValueError) as error:
        LaunchSpec.from_json(text)
    assert message in str(error.value)


def test_check_spec_refuses_what_would_fail_remotely():
    good = build_spec("/tmp/nowhere", "gpt/train/pretrain", "r", ["training.per_device_batch_size=2"])
    cls, cfg = check_spec(good, 4)
    assert cls.key == "gpt/train/pretrain" and cfg.training.per_device_batch_size == 2
    with pytest.raises(BadInput, match="unknown job 'gpt/train/pretrane'"):
        check_spec(good.replace(job_key="gpt/train/pretrane"))
    with pytest.raises(BadInput, match="training.tokenz"):
        check_spec(good.replace(config_yaml="training:\n  tokenz: 3\n"))
    autobatch = good.replace(
        config_yaml=good.config_yaml.replace("per_device_batch_size: 2", "per_device_batch_size: -1"))
    for processes in (1, 2):  # resolved by the job: each process probes, all use the smallest size
        assert check_spec(autobatch, processes)[1].training.per_device_batch_size == -1


def test_build_spec_resumes_the_tip_and_branches_elsewhere(tmp_path):
    root = str(tmp_path / "root")
    first = Node.start("exp.a.run")
    nodes = [first]
    with Store(root).writer() as w:
        w.job(first, "data/tokenize/pydoc", "data:\n  max_samples: 4\n")
        for _ in range(3):
            nodes.append(nodes[-1].next())
            w.write(nodes[-1], {"train/loss": 1.0})
    tip = build_spec(root, "data/tokenize/pydoc", "exp.a.run", ["data.max_samples=5"], base_node=nodes[3].id)
    assert (tip.resume, tip.nonce, tip.first_node().seq) == (True, first.nonce, 4)
    assert "max_samples: 5" in tip.config_yaml  # the recorded config, overrides on top
    middle = build_spec(root, "data/tokenize/pydoc", "exp.a.run", base_node=nodes[1].id)
    assert not middle.resume and middle.nonce != first.nonce and middle.first_node().parent == nodes[1].id
    other = build_spec(root, "data/tokenize/pydoc", "forked", base_node=nodes[3].id, branch=True)
    assert other.first_node().name == "general.default.forked" and other.first_node().parent == nodes[3].id
    with pytest.raises(ValueError, match="is a run of job 'data/tokenize/pydoc', not 'gpt/train/pretrain'"):
        build_spec(root, "gpt/train/pretrain", "exp.a.run", base_node=nodes[3].id)
    with pytest.raises(ValueError, match="continues run 'exp.a.run'; got run name 'other'"):
        build_spec(root, "data/tokenize/pydoc", "other", base_node=nodes[3].id)
    with pytest.raises(ValueError, match="has no records"):
        build_spec(root, "data/tokenize/pydoc", "exp.a.run", base_node=Node("exp.a.run", "ffffff", 1).id)


def test_a_resume_that_skips_checksums_is_not_launched(tmp_path):
    """resume(verify=False) is not part of a launch spec: launching it is refused, not silently verified."""
    root = str(tmp_path / "root")
    first = Node.start("exp.a.run")
    with Store(root).writer() as w:
        w.job(first, "data/tokenize/pydoc", "data:\n  max_samples: 4\n")
    with quick(root) as q:
        q.find().nonce(first.nonce).resume(verify=False)
        with pytest.raises(ValueError, match=r"resume\(verify=False\) is not carried to a launch"):
            spec_from_quick(q)
        q.find().nonce(first.nonce).resume()
        assert spec_from_quick(q).resume


# --- process info -------------------------------------------------------------------------


def test_process_info_comes_from_arguments_then_theseus_then_slurm():
    env = {"THESEUS_NUM_PROCESSES": "4", "THESEUS_PROCESS_ID": "3", "THESEUS_COORDINATOR": "h0:1234",
           "SLURM_NTASKS": "8", "SLURM_PROCID": "7"}
    assert process_info([], env) == process_info(["--num-processes", "4", "--process-id", "3"], env)
    assert process_info(["--process-id", "1", "--coordinator", "x:1"], env).args() == [
        "--coordinator", "x:1", "--num-processes", "4", "--process-id", "1"]
    slurm = {k: v for k, v in env.items() if k.startswith("SLURM")} | {"THESEUS_COORDINATOR": "n1:99"}
    assert (process_info([], slurm).process_id, process_info([], slurm).num_processes) == (7, 8)
    nodelist = {"SLURM_NTASKS": "2", "SLURM_PROCID": "0", "SLURM_JOB_NODELIST": "gpu[07-09]",
                "THESEUS_COORDINATOR_PORT": "4567", "PATH": "/nonexistent"}  # no scontrol: the plain first name
    assert process_info([], nodelist).coordinator == "gpu07:4567"


@pytest.mark.parametrize(("args", "env", "message"), [
    (["--num-processes", "2", "--process-id", "2", "--coordinator", "h:1"], {}, "process id 2 is not in [0, 2)"),
    ([], {"THESEUS_NUM_PROCESSES": "two"}, "process count must be an integer"),
    (["--num-processes", "3"], {}, "3 processes need a coordinator address"),
    (["--num-processes", "2", "--coordinator", "nohost"], {}, "coordinator must be HOST:PORT"),
])
def test_bad_process_info_is_bad_input(args, env, message):
    with pytest.raises(BadInput) as error:
        process_info(args, env)
    assert message in str(error.value)


# --- packaging ----------------------------------------------------------------------------


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          check=True, capture_output=True, text=True).stdout


def names(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


@pytest.fixture
def repo(tmp_path) -> Path:
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "a.py").write_text("A = 1\n")
    (repo / "README.md").write_text("hi\n")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "one")
    return repo


def test_package_is_the_commit_reproducibly(repo):
    revision, data = package_code(repo)
    assert revision == git(repo, "rev-parse", "HEAD").strip()
    assert names(data) == {"README.md": b"hi\n", "pkg/a.py": b"A = 1\n"}
    (repo / "notes.txt").write_text("untracked, never shipped\n")
    assert package_code(repo) == (revision, data)  # untracked files do not make the tree dirty
    assert package_code(repo / "pkg")[0] == revision  # from a subfolder: the whole repository


def test_dirty_tree_is_refused_unless_allowed(repo):
    revision, _ = package_code(repo)
    (repo / "pkg" / "a.py").write_text("A = 2\nfrom pkg.b import B\n")
    (repo / "pkg" / "b.py").write_text("B = 1\n")  # new, not committed yet: the changed code needs it
    (repo / ".gitignore").write_text("*.log\n")
    (repo / "debug.log").write_text("ignored\n")
    with pytest.raises(DirtyTreeError, match=r"uncommitted changes \(pkg/a.py\).*allow_dirty=True"):
        package_code(repo)
    dirty, data = package_code(repo, allow_dirty=True)
    assert dirty.startswith(revision + "-dirty-")
    assert sorted(names(data)) == [".gitignore", "README.md", "pkg/a.py", "pkg/b.py"]
    assert names(data)["pkg/a.py"] == b"A = 2\nfrom pkg.b import B\n"
    assert package_code(repo, allow_dirty=True) == (dirty, data)
    (repo / "pkg" / "a.py").write_text("A = 3\n")
    assert package_code(repo, allow_dirty=True)[0] != dirty  # another content, another revision
    os.remove(repo / "README.md")
    assert "README.md" not in names(package_code(repo, allow_dirty=True)[1])  # deleted: not shipped


def test_package_outside_a_repository_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="git rev-parse --show-toplevel` failed"):
        package_code(tmp_path)
    with pytest.raises(FileNotFoundError, match="no repository folder"):
        package_code(tmp_path / "missing")


# --- the remote bootstrap script ----------------------------------------------------------

FAKE_BOOTSTRAP = """
import json, os, sys
print(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(), "flag": os.environ.get("FLAG"),
                  "extra": os.environ.get("EXTRA"), "file": __file__}))
"""


@pytest.fixture
def shipped(tmp_path):
    """A packaged project whose theseus.dispatch.bootstrap prints what it was started with."""
    repo = tmp_path / "project"
    (repo / "theseus" / "dispatch").mkdir(parents=True)
    (repo / "theseus" / "__init__.py").write_text("")
    (repo / "theseus" / "dispatch" / "__init__.py").write_text("")
    (repo / "theseus" / "dispatch" / "bootstrap.py").write_text(FAKE_BOOTSTRAP)
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "fake")
    revision, data = package_code(repo)
    tarball = tmp_path / "code.tar.gz"
    tarball.write_bytes(data)
    return spec(revision=revision, env={"FLAG": "it's quoted; $HOME"}, groups=("cpu", "dev")), str(tarball)


def run_script(text: str, tmp_path: Path, env: dict | None = None) -> subprocess.Popen:
    path = tmp_path / f"boot-{os.urandom(3).hex()}.sh"
    path.write_text(text)
    return subprocess.Popen(["bash", str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})


def test_bootstrap_script_unpacks_once_and_runs_the_shipped_code(shipped, tmp_path):
    s, tarball = shipped
    work = tmp_path / "work dir"
    script = bootstrap_script(s, str(work), tarball, "/stage/spec.json", args=["--process-id", "1"],
                              python=sys.executable, env={"EXTRA": "x y"}, sync=False)
    procs = [run_script(script, tmp_path) for _ in range(3)]  # three processes of one host at once
    results = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        results.append(json.loads(out))
    code = work / s.revision
    for r in results:
        assert r["argv"] == ["/stage/spec.json", "--process-id", "1"]
        assert (r["cwd"], r["file"]) == (str(code), str(code / "theseus/dispatch/bootstrap.py"))
        assert (r["flag"], r["extra"]) == ("it's quoted; $HOME", "x y")
    assert sorted(os.listdir(work)) == [s.revision]  # one unpacked copy, no temporary folder left


def test_bootstrap_script_syncs_the_groups_with_uv(shipped, tmp_path):
    s, tarball = shipped
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "uv").write_text('#!/bin/bash\necho "uv $*" >> "$UV_LOG"\n')
    (fake / "uv").chmod(0o755)
    log = tmp_path / "uv.log"
    script = bootstrap_script(s, str(tmp_path / "work"), tarball, "/stage/spec.json", args=["--num-processes", "2"])
    p = run_script(script, tmp_path, {"PATH": f"{fake}:{os.environ['PATH']}", "UV_LOG": str(log)})
    _, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert log.read_text().splitlines() == [
        "uv sync --no-default-groups --group cpu --group dev",
        "uv run --no-sync python -m theseus.dispatch.bootstrap /stage/spec.json --num-processes 2",
    ]


def test_bootstrap_script_needs_a_revision():
    with pytest.raises(ValueError, match="no revision"):
        bootstrap_script(spec(revision=""), "/w", "/w/c.tar.gz", "/w/s.json")
