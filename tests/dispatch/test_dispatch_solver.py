"""The solver: priority, preferred and forbidden clusters, memory and CPUs, multi-node splits, and why nothing fits."""

from __future__ import annotations

import pytest

from theseus.dispatch.inventory import parse_inventory
from theseus.dispatch.solver import NoFit, Request, reject_reason, solve

INVENTORY = """\
clusters:
  - {name: lab, root: /lab/runs, work_dir: /lab/work}
  - {name: cloud, root: gs://bucket/runs, work_dir: /tmp/theseus}
  - {name: hpc, root: /hpc/runs, work_dir: /hpc/work}
hosts:
  - {name: laptop, type: ssh, cluster: lab, chip: cpu, address: 127.0.0.1, chips: 4, memory_gb: 16, cpus: 8}
  - {name: workstation, type: ssh, cluster: lab, chip: h100, address: 10.0.0.2, chips: 2, memory_gb: 256, cpus: 32}
  - {name: gpu-vm, type: ssh, cluster: cloud, chip: h100, address: 10.1.0.2, chips: 8}
  - {name: slurm, type: slurm, cluster: hpc, chip: h100, chips: 4, nodes: 4, cpus_per_task: 16, memory_gb: 400}
  - {name: k8s, type: volcano, cluster: cloud, chip: h100, namespace: ml, image: img, chips: 8, nodes: 2,
     volume: {claim: runs, mount_path: /mnt}}
  - {name: pod, type: tpu, cluster: cloud, chip: v5p, zone: z, project: p, accelerator_type: v5p-16, version: v}
"""


@pytest.fixture
def inv():
    return parse_inventory(INVENTORY, "inv.yaml")


def test_the_first_host_in_inventory_order_that_fits_wins(inv):
    p = solve(inv, Request(chip="h100", n=2))
    assert (p.host.name, p.cluster.name, p.nodes, p.processes, p.chips_per_process) == ("workstation", "lab", 1, 1, 2)
    assert solve(inv, Request(chip="h100", n=4)).host.name == "gpu-vm"  # the workstation has only 2
    assert solve(inv, Request(chip="cpu", n=3)).chips_per_process == 3


def test_preferred_clusters_come_first_in_the_order_given(inv):
    assert solve(inv, Request(chip="h100", n=2, prefer=("hpc",))).host.name == "slurm"
    assert solve(inv, Request(chip="h100", n=2, prefer=("cloud", "hpc"))).host.name == "gpu-vm"
    # a preference orders, it does not restrict: with nothing preferred fitting, the rest still count
    assert solve(inv, Request(chip="cpu", n=1, prefer=("hpc",))).host.name == "laptop"


def test_forbidden_clusters_are_never_chosen(inv):
    p = solve(inv, Request(chip="h100", n=2, forbid=("lab",)))
    assert p.host.name == "gpu-vm"
    with pytest.raises(NoFit) as e:
        solve(inv, Request(chip="cpu", n=1, forbid=("lab",)))
    assert "laptop (ssh, cluster lab): cluster lab is forbidden" in str(e.value)


def test_memory_and_cpus_per_process(inv):
    assert solve(inv, Request(chip="h100", n=2, memory_gb=200)).host.name == "workstation"
    # too little memory on the workstation, none declared on gpu-vm: the SLURM nodes have 400 GB
    p = solve(inv, Request(chip="h100", n=2, memory_gb=300))
    assert p.host.name == "slurm"
    assert solve(inv, Request(chip="h100", n=2, cpus=24)).host.name == "workstation"
    with pytest.raises(NoFit, match=r"workstation \(ssh, cluster lab\): cpus 33 asked per process, has 32"):
        solve(inv, Request(chip="h100", n=2, cpus=33))
    with pytest.raises(NoFit) as e:
        solve(inv, Request(chip="h100", n=2, memory_gb=500))
    reasons = e.value.reasons
    assert reasons["workstation (ssh, cluster lab)"] == "memory_gb 500 asked per process, has 256"
    assert reasons["gpu-vm (ssh, cluster cloud)"] == "memory_gb 500 asked but the inventory gives none for this host"
    assert reasons["slurm (slurm, cluster hpc)"] == "memory_gb 500 asked per process, has 400"


def test_cpus_are_compared_with_slurm_cpus_per_task(inv):
    p = solve(inv, Request(chip="h100", n=4, cpus=16, forbid=("cloud",)))
    assert p.host.name == "slurm"
    with pytest.raises(NoFit, match=r"slurm \(slurm, cluster hpc\): cpus 17 asked per process, has 16"):
        solve(inv, Request(chip="h100", n=4, cpus=17, forbid=("cloud",)))


def test_more_chips_than_a_node_has_take_whole_nodes(inv):
    p = solve(inv, Request(chip="h100", n=16, prefer=("hpc",)))
    assert (p.host.name, p.nodes, p.processes, p.chips_per_process, p.chips) == ("slurm", 4, 4, 4, 16)
    p = solve(inv, Request(chip="h100", n=16, forbid=("hpc",)))
    assert (p.host.name, p.nodes, p.chips_per_process) == ("k8s", 2, 8)
    assert reject_reason(inv.host("slurm"), Request(chip="h100", n=6)) == "6 h100 chips do not fill whole 4-chip nodes"
    assert (reject_reason(inv.host("slurm"), Request(chip="h100", n=20))
            == "20 h100 chips need 5 nodes of 4, has at most 4")


def test_a_tpu_slice_runs_whole_one_process_per_worker(inv):
    p = solve(inv, Request(chip="v5p", n=8))
    assert (p.host.name, p.nodes, p.processes, p.chips_per_process) == ("pod", 2, 2, 4)
    assert (reject_reason(inv.host("pod"), Request(chip="v5p", n=4))
            == "slice v5p-16 has 8 chips and runs whole, 4 asked")


def test_nofit_lists_every_host_and_why(inv):
    with pytest.raises(NoFit) as e:
        solve(inv, Request(chip="h100", n=64, forbid=("lab",)))
    message = str(e.value)
    assert message.splitlines()[0] == "no host fits 64 x h100:"
    assert message.splitlines()[1:] == [
        "  laptop (ssh, cluster lab): cluster lab is forbidden",
        "  workstation (ssh, cluster lab): cluster lab is forbidden",
        "  gpu-vm (ssh, cluster cloud): has 8 h100 chips, 64 asked",
        "  slurm (slurm, cluster hpc): 64 h100 chips need 16 nodes of 4, has at most 4",
        "  k8s (volcano, cluster cloud): 64 h100 chips need 8 nodes of 8, has at most 2",
        "  pod (tpu, cluster cloud): has v5p chips, h100 asked",
    ]
    assert isinstance(e.value, ValueError)


def test_an_empty_inventory_says_so():
    with pytest.raises(NoFit, match="the inventory lists no hosts"):
        solve(parse_inventory("clusters: []\nhosts: []\n"), Request(chip="cpu", n=1))


def test_an_unknown_cluster_in_the_request_is_a_typo_not_an_empty_answer(inv):
    with pytest.raises(ValueError, match=r"unknown cluster 'colud' in the request; did you mean 'cloud'\? "
                                         r"\(clusters in inv.yaml: lab, cloud, hpc\)"):
        solve(inv, Request(chip="h100", n=1, prefer=("colud",)))
    with pytest.raises(ValueError, match="unknown cluster 'nowhere'"):
        solve(inv, Request(chip="h100", n=1, forbid=("nowhere",)))


@pytest.mark.parametrize("kwargs,says", [
    (dict(chip="h100", n=0), "at least one chip, got n=0"),
    (dict(chip="h100", n="2"), "at least one chip, got n='2'"),
    (dict(chip="", n=1), "needs a chip kind"),
    (dict(chip="h100", n=1, memory_gb=-1), "memory_gb must be a positive number"),
    (dict(chip="h100", n=1, prefer="lab"), "Request.prefer is a list of cluster names, got the string 'lab'"),
    (dict(chip="h100", n=1, prefer=("lab",), forbid=("lab",)), "lab both preferred and forbidden"),
])
def test_a_malformed_request_is_refused(kwargs, says):
    with pytest.raises(ValueError, match=says.replace("(", r"\(").replace(")", r"\)")):
        Request(**kwargs)
