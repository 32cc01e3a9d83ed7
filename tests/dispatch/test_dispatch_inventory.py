"""The inventory: every host type read with its defaults, and every malformed file refused with file, line and field."""

from __future__ import annotations

import pytest

from theseus.dispatch.inventory import (
    InventoryError,
    SlurmHost,
    SshHost,
    TpuHost,
    VolcanoHost,
    VolcanoVolume,
    load_inventory,
)

GOOD = """\
x-gpu: &gpu  # x- keys are ignored: a place for YAML anchors
  chip: h100
  groups: [cuda12]
clusters:
  - name: lab
    root: /shared/runs
    work_dir: /scratch/theseus
    data_dir: /shared/data
  - name: gcp
    root: gs://bucket/runs
    work_dir: ~/theseus
hosts:
  - name: box
    type: ssh
    cluster: lab
    chip: cpu
    address: 127.0.0.1
    port: 2222
    user: me
    identity_file: /home/me/.ssh/id_ed25519
    chips: 4
    memory_gb: 16
    cpus: 8
    env: {OMP_NUM_THREADS: 4, TAG: "v1"}
  - name: hpc
    type: slurm
    cluster: lab
    <<: *gpu
    login: login.hpc.example
    partitions: [gpu, gpu-long]
    account: proj
    qos: normal
    time: 12:00:00
    chips: 4
    nodes: 16
    cpus_per_task: 32
    memory_gb: 480
  - name: k8s
    type: volcano
    cluster: lab
    <<: *gpu
    namespace: ml
    queue: research
    image: ghcr.io/me/theseus:1
    volume: {claim: runs, mount_path: /shared}
    chips: 8
    nodes: 4
  - name: pod
    type: tpu
    cluster: gcp
    chip: v5p
    groups: [tpu]
    zone: us-east5-a
    project: my-project
    accelerator_type: v5p-16
    version: v2-alpha-tpuv5
    spot: true
"""


def write(tmp_path, text: str):
    path = tmp_path / "inventory.yaml"
    path.write_text(text)
    return path


def line_of(text: str, needle: str) -> int:
    """1-based line of the first line containing ``needle``."""
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_every_host_type_is_read_with_its_fields_and_defaults(tmp_path):
    inv = load_inventory(write(tmp_path, GOOD))
    assert [c.name for c in inv.clusters] == ["lab", "gcp"]
    assert inv.cluster("lab").data_dir == "/shared/data" and inv.cluster("gcp").checkpoint_dir is None
    assert inv.cluster("gcp").work_dir == "~/theseus"  # resolved against the remote home by the launchers
    box, hpc, k8s, pod = inv.hosts
    assert isinstance(box, SshHost) and box.type == "ssh"
    assert (box.address, box.port, box.user, box.chips, box.memory_gb, box.cpus) == (
        "127.0.0.1", 2222, "me", 4, 16.0, 8)
    assert box.env == {"OMP_NUM_THREADS": "4", "TAG": "v1"} and box.python == "python3" and box.groups == ()
    assert isinstance(hpc, SlurmHost) and hpc.chip == "h100" and hpc.groups == ("cuda12",)
    assert hpc.partitions == ("gpu", "gpu-long") and hpc.time == "12:00:00"  # unquoted HH:MM:SS stays text
    assert (hpc.login, hpc.port, hpc.account, hpc.qos, hpc.chips, hpc.nodes) == (
        "login.hpc.example", 22, "proj", "normal", 4, 16)
    assert isinstance(k8s, VolcanoHost) and k8s.volume == VolcanoVolume(claim="runs", mount_path="/shared")
    assert (k8s.namespace, k8s.queue, k8s.chips, k8s.nodes, k8s.chip_resource) == (
        "ml", "research", 8, 4, "nvidia.com/gpu")
    assert isinstance(pod, TpuHost) and pod.spot is True and (pod.chips, pod.workers) == (8, 2)
    assert inv.host("pod") is pod and inv.path == str(tmp_path / "inventory.yaml")


def test_the_default_inventory_is_in_the_home_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"no inventory at .*\.theseus\.yaml.*--inventory"):
        load_inventory()
    (tmp_path / ".theseus.yaml").write_text(GOOD)
    assert load_inventory().host("box").address == "127.0.0.1"


def test_tpu_accelerator_types_map_to_devices_and_workers():
    def shape(accelerator_type):
        host = TpuHost(name="t", cluster="c", chip="x", zone="z", project="p", accelerator_type=accelerator_type,
                       version="v")
        return host.chips, host.workers

    assert shape("v4-8") == (4, 1) and shape("v4-32") == (16, 4)
    assert shape("v3-8") == (8, 1) and shape("v3-32") == (32, 4)
    assert shape("v5litepod-4") == (4, 1) and shape("v5litepod-8") == (8, 1) and shape("v5litepod-16") == (16, 4)
    assert shape("v6e-256") == (256, 64)


def test_lookup_of_an_unknown_name_lists_the_known_ones(tmp_path):
    inv = load_inventory(write(tmp_path, GOOD))
    with pytest.raises(KeyError, match="no host 'bx' in the inventory .hosts: box, hpc, k8s, pod"):
        inv.host("bx")


# (case, text, the text on the offending line, what the message must say)
HOST = GOOD.split("  - name: hpc")[0]
BAD = [
    ("bad YAML", HOST.replace("cpus: 8", "cpus: 8: 9"), "cpus: 8: 9",
     "invalid YAML: mapping values are not allowed here"),
    ("unclosed YAML", HOST + "    groups: [cpu\n", "groups: [cpu", "invalid YAML: expected ',' or ']'"),
    ("unknown host type", HOST.replace("type: ssh", "type: shh"), "type: shh",
     "host 'box' field 'type': unknown host type 'shh'; did you mean 'ssh'?"),
    ("missing field", HOST.replace("    chips: 4\n", ""), "- name: box", "host 'box': missing field 'chips'"),
    ("missing type", HOST.replace("    type: ssh\n", ""), "- name: box", "host 'box': missing field 'type'"),
    ("wrong type", HOST.replace("chips: 4", "chips: four"), "chips: four",
     "host 'box' field 'chips': expected an integer, got 'four'"),
    ("bool for an int", HOST.replace("cpus: 8", "cpus: yes"), "cpus: yes", "field 'cpus': expected an integer"),
    ("list expected", HOST.replace("cpus: 8", "cpus: 8\n    groups: cuda12"), "groups: cuda12",
     "field 'groups': expected a list, got 'cuda12'"),
    ("unknown field", HOST.replace("memory_gb: 16", "memroy_gb: 16"), "memroy_gb",
     "host 'box' field 'memroy_gb': unknown field; did you mean 'memory_gb'?"),
    ("unknown cluster", HOST.replace("cluster: lab", "cluster: lba"), "cluster: lba",
     "host 'box' field 'cluster': unknown cluster 'lba'; did you mean 'lab'?"),
    ("port out of range", HOST.replace("port: 2222", "port: 70000"), "port: 70000",
     "field 'port': must be a port number"),
    ("zero chips", HOST.replace("chips: 4", "chips: 0"), "chips: 0", "field 'chips': must be positive, got 0"),
    ("env value not text", HOST.replace('TAG: "v1"', "TAG: true"), "TAG: true",
     "field 'env' key 'TAG': expected a string, got 'true' (quote it)"),
    ("field given twice", HOST.replace("cpus: 8", "cpus: 8\n    cpus: 9"), "cpus: 9", "field 'cpus': given twice"),
    ("duplicate host", HOST + "  - {name: box, type: ssh, cluster: lab, chip: cpu, address: b, chips: 1}\n",
     "{name: box", "host 'box': duplicate host name"),
    ("relative work_dir", HOST.replace("work_dir: /scratch/theseus", "work_dir: theseus"), "work_dir: theseus",
     "cluster 'lab' field 'work_dir': must be an absolute path or start with ~/"),
    ("relative root", HOST.replace("root: /shared/runs", "root: runs"), "root: runs",
     "cluster 'lab' field 'root': must be an absolute path"),
    ("unknown top-level key", HOST.replace("hosts:", "hostz:"), "hostz:",
     "inventory field 'hostz': unknown field; did you mean 'hosts'?"),
    ("hosts not a list", HOST.split("hosts:")[0] + "hosts: {box: 1}\n", "hosts: {box",
     "hosts: expected a list, got a mapping"),
    ("volcano volume incomplete",
     HOST + "  - {name: v, type: volcano, cluster: lab, chip: cpu, namespace: n, image: i, chips: 1, "
            "volume: {claim: c}}\n",
     "name: v, type: volcano", "host 'v' field 'volume': missing field 'mount_path'"),
    ("unknown TPU type",
     HOST + "  - {name: t, type: tpu, cluster: gcp, chip: v9, zone: z, project: p, accelerator_type: v9-8, "
            "version: v}\n",
     "name: t, type: tpu", "host 't' field 'accelerator_type': unknown TPU accelerator type 'v9-8'"),
    ("SLURM time", HOST + "  - {name: s, type: slurm, cluster: lab, chip: cpu, chips: 1, time: 90}\n",
     "name: s, type: slurm", "field 'time': must be HH:MM:SS"),
]


@pytest.mark.parametrize("case,text,offending,says", BAD, ids=[b[0] for b in BAD])
def test_a_malformed_inventory_names_file_line_and_field(tmp_path, case, text, offending, says):
    path = write(tmp_path, text)
    with pytest.raises(InventoryError) as e:
        load_inventory(path)
    message = str(e.value)
    line = line_of(text, offending)
    assert message.startswith(f"{path}:{line}: "), message
    assert says in message, message


def test_an_empty_inventory_says_what_it_needs(tmp_path):
    path = write(tmp_path, "# nothing yet\n")
    with pytest.raises(InventoryError,
                       match=r"inventory.yaml:1: inventory: the file is empty .expected 'clusters:' and 'hosts:'"):
        load_inventory(path)


@pytest.mark.parametrize("change,offending,says", [
    (("nodes: 4", "nodes: many"), "nodes: many", "host 'k8s' field 'nodes': expected an integer, got 'many'"),
    (("claim: runs", "claim: [runs]"), "claim: [runs]",
     "host 'k8s' field 'volume' field 'claim': expected a string, got a list"),
    (("groups: [tpu]", "groups: [tpu, [cpu]]"), "groups: [tpu, [cpu]]",
     "host 'pod' field 'groups' item #2: expected a string, got a list"),
])
def test_an_error_deep_in_the_file_names_its_own_line_and_field(tmp_path, change, offending, says):
    text = GOOD.replace(*change)
    path = write(tmp_path, text)
    with pytest.raises(InventoryError) as e:
        load_inventory(path)
    assert str(e.value) == f"{path}:{line_of(text, offending)}: {says}"


def test_text_fields_keep_what_was_written_and_own_keys_override_merged_ones(tmp_path):
    text = GOOD.replace("version: v2-alpha-tpuv5", "version: 2.0").replace(
        "    login: login.hpc.example", "    chip: a100\n    login: login.hpc.example")
    inv = load_inventory(write(tmp_path, text))
    assert inv.host("pod").version == "2.0"  # a YAML float, read as the text written
    assert inv.host("hpc").chip == "a100" and inv.host("k8s").chip == "h100"


def test_an_alias_that_contains_itself_is_refused(tmp_path):
    text = HOST + "    groups: &g [cpu, *g]\n"
    path = write(tmp_path, text)
    with pytest.raises(InventoryError, match=r"alias that contains itself"):
        load_inventory(path)


def test_the_inventory_schema_is_valid_json_schema():
    import json
    from importlib import resources

    import jsonschema

    schema = json.loads(resources.files("theseus.dispatch").joinpath("schemas/inventory.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
