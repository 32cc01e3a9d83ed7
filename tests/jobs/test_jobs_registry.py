"""The job registry and the Job lifecycle, with small test jobs registered under test/..."""

import dataclasses
import os

import pytest

from theseus.jobs import Job, UnknownJobError, get_job, job, registry
from theseus.store import Node, Store

TOKENIZE_JOBS = ["data/tokenize/addition", "data/tokenize/alpaca", "data/tokenize/chat", "data/tokenize/fineweb",
                 "data/tokenize/preference", "data/tokenize/pydoc", "data/tokenize/text"]


@dataclasses.dataclass
class StepsSection:
    count: int = 3
    fail_at: int = -1


@dataclasses.dataclass
class StepsConfig:
    steps: StepsSection = dataclasses.field(default_factory=StepsSection)


def register_steps():
    @job("test/steps", "Count steps, one node each; optionally fail.")
    class Steps(Job):
        Config = StepsConfig

        def setup(self):
            super().setup()
            if self.config.steps.count < 1:
                raise ValueError(f"steps.count must be >= 1, got {self.config.steps.count}")
            self.seen = []

        def run(self):
            for i in range(self.config.steps.count):
                if i == self.config.steps.fail_at:
                    raise RuntimeError(f"boom at step {i}")
                self.tick()
                self.writer.write(self.node, {"test/step": i, "test/loss": 1.0 / (i + 1)})
                self.seen.append(self.node.seq)
            return self.node.seq

    return Steps


def test_registry_lists_the_tokenize_jobs_with_descriptions():
    reg = registry("data/tokenize/")
    assert list(reg) == TOKENIZE_JOBS
    assert all(cls.description and "\n" not in cls.description for cls in reg.values())
    assert registry("data/tokenize/f") == {"data/tokenize/fineweb": reg["data/tokenize/fineweb"]}
    assert registry("nothing/") == {}


@pytest.mark.parametrize("key, suggestion", [
    ("data/tokenize/finweb", "data/tokenize/fineweb"),
    ("data/tokenise/fineweb", "data/tokenize/fineweb"),
    ("fineweb", "data/tokenize/fineweb"),
    ("data/tokenize/alpacca", "data/tokenize/alpaca"),
])
def test_unknown_job_names_close_matches(key, suggestion):
    with pytest.raises(UnknownJobError) as e:
        get_job(key)
    assert f"unknown job {key!r}" in str(e.value) and suggestion in str(e.value)
    assert isinstance(e.value, KeyError) and isinstance(e.value, ValueError)


def test_unknown_job_without_close_match():
    with pytest.raises(UnknownJobError, match="unknown job 'zzz/qqq' \\(`theseus jobs` lists them all\\)"):
        get_job("zzz/qqq")


def test_job_decorator_checks(scratch_registry):
    Steps = register_steps()
    assert get_job("test/steps") is Steps and Steps.key == "test/steps"
    with pytest.raises(ValueError, match="invalid job key"):
        job("Bad Key")
    with pytest.raises(TypeError, match="subclass of theseus.jobs.Job"):
        job("test/notajob")(object)

    class NoConfig(Job):
        pass

    with pytest.raises(TypeError, match="Config must be a dataclass"):
        job("test/noconfig")(NoConfig)

    class Other(Job):
        """Another job."""
        Config = StepsConfig

    with pytest.raises(ValueError, match="already registered"):
        job("test/steps")(Other)
    assert job("test/other")(Other).description == "Another job."

    class Unregistered(Steps):
        pass

    with pytest.raises(TypeError, match="not registered"):
        Unregistered.create("/nonexistent-root", "r")


def test_lifecycle_records_job_progress_and_finish(tmp_path, scratch_registry, logs, log_files):
    Steps = register_steps()
    store = Store(tmp_path)
    j = Steps.create(store, "count-steps", {"steps": {"count": 3}})
    assert (j.node.seq, j.node.parent, j.base, j.writer) == (0, None, None, None)
    assert j.name == "general.default.count-steps" and j.store is store and j.seen == []
    assert log_files(tmp_path) == []  # created, set up, nothing written
    first = j.node
    assert j() == 3 and j.seen == [1, 2, 3] and j.writer is None

    nodes = store.find().job("test/steps").all()
    assert [n.seq for n in nodes] == [0, 1, 2, 3] and nodes[0] == first
    assert [n.parent for n in nodes[1:]] == [n.id for n in nodes[:-1]]
    rec0 = store.record(first)
    assert rec0["_job"] == "test/steps" and "count: 3" in rec0["_config"]
    last = store.record(nodes[-1])
    assert last["_status"] == "finished" and last["_finished"] is True and last["test/step"] == 2
    assert store.find().job("test/steps").finished().last() == nodes[-1]

    assert "JOB count-steps | building state" in logs and "JOB count-steps | starting anew" in logs
    assert "JOB count-steps | starting" in logs and "JOB count-steps | finished" in logs
    assert f"JOB count-steps | synchronized and starting with nodeid={first.id}" in logs
    assert logs.index("JOB count-steps | starting") < logs.index("JOB count-steps | finished")

    with pytest.raises(RuntimeError, match="already run"):
        j()


def test_failure_records_the_exception_text_and_reraises(tmp_path, scratch_registry, logs):
    Steps = register_steps()
    store = Store(tmp_path)
    j = Steps.create(store, "fails", overrides=["steps.fail_at=2"])
    with pytest.raises(RuntimeError, match="boom at step 2"):
        j()
    rec = store.record(j.node)
    assert rec["_status"] == "failed" and rec["_finished"] is False
    assert "RuntimeError: boom at step 2" in rec["_error"] and "Traceback" in rec["_error"]
    assert store.find().job("test/steps").finished(False).last() == j.node
    assert store.find().job("test/steps").finished().all() == []
    assert any("failed" in m and "boom at step 2" in m for m in logs)


def test_bad_config_fails_in_create_and_writes_nothing(tmp_path, scratch_registry):
    Steps = register_steps()
    root = str(tmp_path / "root")
    for kwargs, error in [
        ({"config": {"steps": {"count": 0}}}, ValueError),  # setup() refuses
        ({"config": {"steps": {"cnt": 1}}}, ValueError),  # unknown key
        ({"overrides": ["steps.count=many"]}, ValueError),  # wrong type
        ({"config": "steps: {count: 2}\nextra: 1\n"}, ValueError),  # unknown key in YAML
    ]:
        with pytest.raises(error):
            Steps.create(root, "bad", **kwargs)
    with pytest.raises(ValueError, match="run name"):
        Steps.create(root, "bad/name")
    assert not os.path.exists(root)


def test_config_is_read_only_once_created(tmp_path, scratch_registry):
    Steps = register_steps()
    j = Steps.create(tmp_path, "ro")
    with pytest.raises(Exception, match="read-only"):
        j.config.steps.count = 5


def test_restore_hook(tmp_path, scratch_registry):
    Steps = register_steps()
    j = Steps.create(tmp_path, "base-run")
    j()
    base = j.node
    with pytest.raises(NotImplementedError, match="cannot be restored"):
        Steps.create(tmp_path, "base-run", base=base)  # the default setup() refuses a base

    @job("test/restorable")
    class Restorable(Steps):
        def setup(self):
            self.restored_from = self.base

    r = Restorable.create(tmp_path, "ignored", base=base)
    assert r.node == base.next() and r.restored_from == base
    b = Restorable.create(tmp_path, "branched", base=base.id, branch=True)
    assert (b.node.seq, b.node.parent, b.node.name) == (0, base.id, "general.default.branched")
    assert b.node.nonce != base.nonce


def test_tick_and_save(tmp_path, scratch_registry):
    Steps = register_steps()
    j = Steps.create(tmp_path, "saver", {"steps": {"count": 2}})
    n0 = j.node
    assert j.tick() == n0.next() and j.node.parent == n0.id
    folder = j.save()
    assert folder == j.store.objects(j.node)
    assert sorted(os.listdir(folder)) == ["config.yaml", "job.json"]
    assert "count: 2" in open(os.path.join(folder, "config.yaml")).read()


def test_node_from_job_matches_design_id():
    # the id scheme the seed prints: name:nonce:seq, url-safe base64 without padding
    assert Node("general.default.train-gpt", "949e88", 0).id == "Z2VuZXJhbC5kZWZhdWx0LnRyYWluLWdwdDo5NDllODg6MA"


def test_non_primary_process_writes_no_records(tmp_path, scratch_registry, log_files):
    Steps = register_steps()
    j = Steps.create(tmp_path, "worker")
    j.primary = False  # e.g. jax.process_index() != 0
    assert j() == 3 and j.seen == [1, 2, 3]
    assert log_files(str(tmp_path)) == []
