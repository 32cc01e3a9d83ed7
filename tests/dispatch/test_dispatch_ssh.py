"""SSH launches against a real sshd on 127.0.0.1 (the ``sshd_server`` fixture).

The "remote" host is this machine: the code ships as ``package_code``'s tarball
into a temporary work dir, the environment is ``uv sync``-ed there from this
user's uv cache, and the root is a local folder both sides see (a shared
filesystem, or gs://, in real use).
"""

from __future__ import annotations

import dataclasses
import glob
import io
import os
import subprocess

import pytest

from tests.conftest import free_port
from tests.dispatch.conftest import InterruptOn, leftover_processes, make_spec, seed_peak_cache, synthetic_root
from theseus.data.store import open_dataset
from theseus.dispatch.inventory import Cluster, SshHost
from theseus.dispatch.remote import HostUnreachable, LaunchFailed, Ssh
from theseus.dispatch.solver import Placement
from theseus.dispatch.spec import LaunchSpec
from theseus.dispatch.ssh import launch_ssh
from theseus.store import Node, Store


def loopback(server, root: str, work_dir: str, env: dict[str, str], processes: int = 1) -> Placement:
    host = SshHost(name="loopback", cluster="lab", chip="cpu", address=server.address, port=server.port,
                   user=server.user, identity_file=server.identity_file, chips=processes, groups=("cpu",), env=env)
    return Placement(host, Cluster(name="lab", root=root, work_dir=work_dir), 1, processes, 1)


def pydoc_small(config) -> None:
    config.data.max_samples = 40


def train_small(config, steps: int = 6) -> None:
    """A one-layer GPT for ``steps`` steps of 4 x 32 tokens on the pydoc dataset (cl100k_base's vocabulary)."""
    config.data.dataset = "pydoc"
    arch = config.architecture
    arch.n_embd, arch.n_layers, arch.n_head, arch.block_size = 32, 1, 2, 32
    arch.dtype.activation = "float32"
    config.training.batch_size = config.training.per_device_batch_size = 4
    config.training.tokens = steps * 4 * 32
    config.training.validation = False
    config.logging.report_interval = 2
    config.logging.checkpoint_interval = 3
    config.logging.validation_interval = 100


@pytest.mark.slow
def test_tokenize_then_train_over_loopback_ssh(sshd_server, code_tarball, remote_work_dir, uv_env, uv_binary,
                                               tmp_path):
    revision, tarball = code_tarball
    root = str(tmp_path / "root")
    seed_peak_cache(root)
    placement = loopback(sshd_server, root, remote_work_dir, uv_env)
    out = io.StringIO()
    launch = dict(uv=uv_binary, known_hosts=sshd_server.known_hosts, timeout=300, stream=out)

    tokenize = make_spec("data/tokenize/pydoc", "tokenize-pydoc", root, revision, pydoc_small)
    done = launch_ssh(tokenize, placement, tarball, **launch)
    assert done.ok and done.returncodes == (0,) and done.host == "loopback"
    assert done.stage.startswith(f"{remote_work_dir}/launches/{tokenize.nonce}-")
    train = make_spec("gpt/train/pretrain", "train-gpt", root, revision, train_small)
    done = launch_ssh(train, placement, tarball, **launch)
    assert done.node_id == Node("general.default.train-gpt", train.nonce, 0).id

    store = Store(root)  # the runs are queryable from the root, here
    assert {n.nonce for n in store.find().job("data/tokenize/pydoc").finished().all()} == {tokenize.nonce}
    assert open_dataset(root, "pydoc").tokens("train").shape[0] > 1000
    losses = store.find().nonce(train.nonce).has("train/loss").select(keys=["train/loss"])
    assert len(losses) == 3  # steps 2, 4, 6
    assert [n.seq for n in store.find().nonce(train.nonce).checkpoint().all()] == [3, 6]
    assert store.find().nonce(train.nonce).finished().all()
    assert store.run_record(train.nonce)["_job"] == "gpt/train/pretrain"
    # each launch published its process's output into the root; the stream got it live, prefixed
    log = open(f"{root}/objects/{train.first_node().id}/logs/process-0.log").read()
    assert "BOOTSTRAP | process 0/1 | gpt/train/pretrain train-gpt" in log
    assert "[loopback/0]" in out.getvalue() and "BOOTSTRAP" in out.getvalue()
    assert not leftover_processes(done.stage)


@pytest.mark.slow
def test_unknown_job_key_fails_clearly_and_writes_nothing(sshd_server, code_tarball, remote_work_dir, uv_env,
                                                          uv_binary, tmp_path):
    revision, tarball = code_tarball
    root = str(tmp_path / "root")
    spec = LaunchSpec("data/tokenize/pydocs", "tok", "{}\n", root, revision=revision, groups=("cpu",))
    with pytest.raises(LaunchFailed, match=r"(?s)exit status per process: \[2\].*data/tokenize/pydoc") as failed:
        launch_ssh(spec, loopback(sshd_server, root, remote_work_dir, uv_env), tarball, uv=uv_binary,
                   known_hosts=sshd_server.known_hosts, timeout=300, stream=None)
    assert failed.value.returncodes == (2,)
    assert not os.path.exists(root)


def endless(config) -> None:
    """Training far longer than any test: the tiny GPT on the synthetic dataset, 8 rows of 4 per device."""
    train_small(config)
    config.data.dataset = "fineweb"
    config.architecture.vocab_size = 256
    config.training.tokens = 4 * 32 * 1_000_000
    config.training.batch_size, config.training.per_device_batch_size = 8, 4


@pytest.mark.slow
def test_interrupt_stops_both_remote_processes_and_records_the_failure(sshd_server, code_tarball, remote_work_dir,
                                                                       uv_env, uv_binary, tmp_path):
    """Ctrl-C once two processes (jax.distributed over loopback, where workers ignore SIGTERM) are training."""
    revision, tarball = code_tarball
    root = synthetic_root(tmp_path)
    spec = make_spec("gpt/train/pretrain", "endless", root, revision, endless)
    stream = InterruptOn("synchronized and starting")
    with pytest.raises(KeyboardInterrupt):
        launch_ssh(spec, loopback(sshd_server, root, remote_work_dir, uv_env, processes=2), tarball, uv=uv_binary,
                   known_hosts=sshd_server.known_hosts, timeout=300, stream=stream)
    [stage] = glob.glob(f"{remote_work_dir}/launches/{spec.nonce}-*")
    assert not leftover_processes(stage), stream.text[-3000:]
    record = Store(root).run_record(spec.nonce)  # process 0's bootstrap saw its worker killed and recorded it
    assert record["_status"] == "failed", stream.text[-3000:]
    logs = os.listdir(f"{root}/objects/{spec.first_node().id}/logs")
    assert sorted(logs) == ["process-0.log", "process-1.log"]


@pytest.mark.slow
def test_deadline_stops_the_remote_processes(sshd_server, code_tarball, remote_work_dir, uv_env, uv_binary,
                                             tmp_path):
    revision, tarball = code_tarball
    root = synthetic_root(tmp_path)
    spec = make_spec("gpt/train/pretrain", "endless", root, revision, endless)
    with pytest.raises(LaunchFailed, match=r"ran past its deadline of 3 s \(exit status per process: \[None\]\)"
                                           ) as failed:
        launch_ssh(spec, loopback(sshd_server, root, remote_work_dir, uv_env), tarball, uv=uv_binary,
                   known_hosts=sshd_server.known_hosts, timeout=3, stream=None)
    assert failed.value.returncodes == (None,) and failed.value.stage.startswith(remote_work_dir)
    assert not leftover_processes(failed.value.stage), failed.value.tail


def test_unreachable_host_is_a_clear_error_before_anything_starts(tmp_path):
    root, work_dir = str(tmp_path / "root"), str(tmp_path / "work")
    host = SshHost(name="gone", cluster="lab", chip="cpu", address="127.0.0.1", port=free_port(), chips=1)
    placement = Placement(host, Cluster(name="lab", root=root, work_dir=work_dir), 1, 1, 1)
    spec = LaunchSpec("data/tokenize/pydoc", "tok", "{}\n", root, revision="abc", groups=("cpu",))
    with pytest.raises(HostUnreachable, match=rf"cannot reach ssh host 'gone' \(127.0.0.1:{host.port}\): "
                                              r"ssh: connect to host 127.0.0.1 port \d+: Connection refused; "
                                              "nothing was shipped or started"):
        launch_ssh(spec, placement, b"not shipped", known_hosts=str(tmp_path / "known_hosts"))
    assert not os.path.exists(root) and not os.path.exists(work_dir)


def test_probe_names_a_missing_interpreter(sshd_server, tmp_path):
    ssh = Ssh(sshd_server.address, sshd_server.port, sshd_server.user, sshd_server.identity_file,
              sshd_server.known_hosts)
    home, port = ssh.probe()
    assert home.startswith("/") and 0 < port < 65536
    with pytest.raises(HostUnreachable, match="answers, but `python9` could not run there"):
        ssh.probe("python9", "box")
    # a host whose key is not the one on record is refused, never trusted anew
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True, timeout=30)
    kind, key = (tmp_path / "other_key.pub").read_text().split()[:2]
    (tmp_path / "known_hosts").write_text(f"[127.0.0.1]:{sshd_server.port} {kind} {key}\n")
    with pytest.raises(HostUnreachable, match="Host key verification failed"):
        dataclasses.replace(ssh, known_hosts=str(tmp_path / "known_hosts")).probe()


def test_wrong_host_type_and_accelerator_processes_are_refused(tmp_path):
    from theseus.dispatch.inventory import SlurmHost

    cluster = Cluster(name="lab", root=str(tmp_path), work_dir=str(tmp_path))
    spec = LaunchSpec("data/tokenize/pydoc", "tok", "{}\n", str(tmp_path), revision="abc")
    slurm = SlurmHost(name="hpc", cluster="lab", chip="cpu", chips=4)
    with pytest.raises(ValueError, match="launch_ssh needs an ssh host, got 'slurm' host 'hpc'"):
        launch_ssh(spec, Placement(slurm, cluster, 1, 1, 4), b"")
    gpu = SshHost(name="gpu", cluster="lab", chip="h100", address="127.0.0.1", chips=8)
    with pytest.raises(ValueError, match="2 processes of h100 chips on one host"):
        launch_ssh(spec, Placement(gpu, cluster, 1, 2, 4), b"")

