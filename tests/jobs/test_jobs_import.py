"""A user's experiment in a file of their own: import it (once), build it by key or class, record where its
class came from, and refuse to resume, branch or verify a run whose job is not registered, naming what to import."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from tests.experiment_files import KEY, write_experiment
from theseus import experiments
from theseus.experiments import ExperimentError, import_experiment, job_source
from theseus.jobs import Job, UnknownJobError, get_job, job, key_of, registry
from theseus.quick import quick
from theseus.store import Node, Store

pytestmark = pytest.mark.usefixtures("scratch_experiments")


def loaded_from(path) -> list[str]:
    """Names of the modules imported from the file ``path``."""
    real = os.path.realpath(path)
    return [name for name, m in list(sys.modules.items())
            if isinstance(getattr(m, "__file__", None), str) and os.path.realpath(m.__file__) == real]


def test_a_file_registers_its_jobs_once_however_it_is_named(tmp_path, monkeypatch):
    path = write_experiment(tmp_path / "lab")
    module = import_experiment(path)
    assert get_job(KEY) is module.Count and key_of(module.Count) == KEY
    assert KEY in registry("mylab/")
    monkeypatch.chdir(tmp_path)
    for spelling in (str(path), "lab/my_experiments.py", tmp_path / "lab" / ".." / "lab" / "my_experiments.py"):
        assert import_experiment(spelling) is module  # one module: nothing registered twice
    assert loaded_from(path) == [module.__name__]


def test_a_file_already_imported_by_name_is_reused(tmp_path, monkeypatch):
    path = write_experiment(tmp_path, name="plain_experiments.py")
    monkeypatch.syspath_prepend(str(tmp_path))
    import plain_experiments  # a user's plain import first, then --import of the same file

    assert import_experiment(path) is plain_experiments
    assert job_source(plain_experiments.Count) == f"{os.path.realpath(path)}:Count"


def test_a_dotted_module_name_is_imported_by_name(tmp_path, monkeypatch):
    write_experiment(tmp_path / "mylab_pkg", name="__init__.py")
    monkeypatch.syspath_prepend(str(tmp_path))
    before = experiments.imported()  # the process's registry: doctests run earlier may have imported modules
    module = import_experiment("mylab_pkg")
    assert module.__name__ == "mylab_pkg" and job_source(get_job(KEY)) == "mylab_pkg:Count"
    assert [e.module for e in experiments.imported() if e not in before] == ["mylab_pkg"]


def test_missing_and_failing_experiments_are_clear_errors_that_leave_nothing_behind(tmp_path):
    missing = tmp_path / "nowhere.py"
    with pytest.raises(ExperimentError, match=f"cannot import experiment {missing}: no such file"):
        import_experiment(missing)
    with pytest.raises(ExperimentError, match="not a file"):
        import_experiment(tmp_path)
    with pytest.raises(ExperimentError, match="cannot import experiment module mylab_nowhere: ModuleNotFoundError"):
        import_experiment("mylab_nowhere")
    with pytest.raises(ExperimentError, match="not a Python file .* nor a dotted module name"):
        import_experiment("my experiments")
    broken = write_experiment(tmp_path, name="broken.py", source="X = 1\nraise RuntimeError('boom')\n")
    with pytest.raises(ExperimentError, match=f"cannot import experiment {broken}: RuntimeError: boom"):
        import_experiment(broken)
    assert loaded_from(broken) == []
    bad = write_experiment(tmp_path, name="bad_syntax.py", source="def f(:\n")
    with pytest.raises(ExperimentError, match=r"SyntaxError: .*line 1"):
        import_experiment(bad)
    write_experiment(tmp_path, name="broken.py")  # fixed: imports now
    assert import_experiment(broken).Count.key == KEY


def test_two_files_registering_one_key_are_refused(tmp_path):
    import_experiment(write_experiment(tmp_path / "a"))
    with pytest.raises(ExperimentError, match=f"job key '{KEY}' is already registered by theseus_experiment_"):
        import_experiment(write_experiment(tmp_path / "b"))


def test_build_takes_the_registered_class_and_the_run_records_its_source(tmp_path):
    path = write_experiment(tmp_path)
    count = import_experiment(path).Count
    with quick(tmp_path / "root") as q:
        q.build(count, "count").config.n = 2
        assert q.job_key == KEY
        assert q() == 2
        nonce = q.find().job(KEY).last().nonce
    record = Store(tmp_path / "root").run_record(nonce)
    assert record["_job"] == KEY and record["_job_source"] == f"{os.path.realpath(path)}:Count"


def test_build_refuses_classes_that_are_not_registered_jobs(tmp_path):
    count = import_experiment(write_experiment(tmp_path)).Count

    class Unregistered(count):
        pass

    with quick(tmp_path / "root") as q:
        with pytest.raises(ValueError, match=f"Unregistered is not registered: .*registered as '{KEY}'"):
            q.build(Unregistered, "x")
        with pytest.raises(TypeError, match="expected a job key .* got <class 'dict'>"):
            q.build(dict, "x")
        with pytest.raises(ValueError, match="no job built yet"):
            q.config  # nothing half-built


def test_a_job_of_the_package_records_its_module(tmp_path):
    @dataclasses.dataclass
    class NoConfig:
        pass

    @job("test/import/local", "A job of a test module.")
    class Local(Job):
        Config = NoConfig

        def run(self):
            return None

    with quick(tmp_path) as q:
        q.build(Local, "local")()
        nonce = q.find().job("test/import/local").last().nonce
    assert Store(tmp_path).run_record(nonce)["_job_source"] == f"{__name__}:{Local.__qualname__}"


def count_run(root, source: str | None, config: str = "n: 2\n") -> Node:
    """A finished run of the count job written straight into ``root`` (no class needed), with ``source``."""
    node = Node.start("count")
    with Store(root).writer() as w:
        w.job(node, KEY, config, source=source)
        w.write(node, {"count/i": 0})
        w.finished(node.next())
    return node.next()


def test_resume_and_branch_of_an_unregistered_job_name_the_file_and_import_nothing(tmp_path):
    path = write_experiment(tmp_path / "lab")
    source = f"{os.path.realpath(path)}:Count"
    root = tmp_path / "root"
    tip = count_run(root, source)
    with quick(root) as q:
        for restore in ("resume", "branch"):
            with pytest.raises(UnknownJobError) as refused:
                getattr(q.find().nonce(tip.nonce), restore)()
            assert str(refused.value) == (
                f"job '{KEY}' is not registered in this process (its run records it as {source}): import "
                f"{os.path.realpath(path)} first: `theseus --import {os.path.realpath(path)} ...` on the command "
                f"line, `theseus.experiments.import_experiment({os.path.realpath(path)!r})` in Python")
            assert q.job_key is None
        assert loaded_from(path) == [] and KEY not in registry()  # the root named the file; nothing imported it

        import_experiment(path)
        q.find().nonce(tip.nonce).resume()
        job = q.build().create()
        assert (q.job_key, job.node) == (KEY, tip.next())
        assert job() == tip.seq + 3  # continued the lineage, counting to 2 again
        q.find().nonce(tip.nonce).branch()
        assert q.branched and q.create().node.parent == q.base.id


def test_a_run_without_a_recorded_source_still_resumes_and_an_unknown_one_says_so(tmp_path):
    import_experiment(write_experiment(tmp_path / "lab"))
    old = count_run(tmp_path / "root", source=None)  # a root written before runs recorded their source
    with quick(tmp_path / "root") as q:
        q.find().nonce(old.nonce).resume()
        assert q.build().create().node == old.next()
    other = tmp_path / "other"
    node = Node.start("x")
    with Store(other).writer() as w:
        w.job(node, "mylab/test/gone", "{}\n")
    with quick(other) as q, pytest.raises(UnknownJobError, match="unknown job 'mylab/test/gone'"):
        q.find().resume()


def test_verify_names_the_file_to_import_before_it_loads_a_trainer(tmp_path):
    from theseus.replay.verify import verify

    path = write_experiment(tmp_path / "lab")
    source = f"{os.path.realpath(path)}:Count"
    root = tmp_path / "root"
    tip = count_run(root, source)
    with Store(root).writer() as w:
        w.checkpoint(tip, f"objects/{tip.id}")
        w.write(tip.next(), {"train/loss": 2.5})
    with pytest.raises(ValueError, match=f"not registered in this process .*`theseus --import {path} ...`"):
        verify(str(root), tip.id, 1)
    assert loaded_from(path) == []
    import_experiment(path)
    with pytest.raises(FileNotFoundError, match="no MANIFEST.json"):  # past the job check: on to the checkpoint
        verify(str(root), tip.id, 1)


def test_audit_warns_of_a_job_not_registered_here_without_importing_it_or_jax(tmp_path):
    path = write_experiment(tmp_path / "lab")
    root = tmp_path / "root"
    mine = count_run(root, f"{os.path.realpath(path)}:Count")
    count_run(root, None)  # no source recorded: nothing to name, no finding
    builtin = Node.start("tok")
    with Store(root).writer() as w:  # a built-in job's module is loaded on demand: not a finding either
        w.job(builtin, "data/tokenize/pydoc", "{}\n", source="theseus.data.jobs:TokenizePydoc")
        w.finished(builtin)
    code = ("import json, sys; from theseus.audit import audit; r = audit(sys.argv[1]); "
            "print(json.dumps({'problems': [[p.kind, p.severity, p.message] for p in r.problems], 'ok': r.ok, "
            "'jax': 'jax' in sys.modules}))")
    out = json.loads(subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True,
                                    check=True, timeout=120).stdout)
    assert (out["ok"], out["jax"]) == (True, False)
    [(kind, severity, message)] = out["problems"]
    assert (kind, severity) == ("unregistered-job", "warning")
    assert message.startswith(f"general.default.count:{mine.nonce}: job '{KEY}' is not registered")
    assert f"`theseus --import {os.path.realpath(path)} ...`" in message
    assert loaded_from(path) == []
