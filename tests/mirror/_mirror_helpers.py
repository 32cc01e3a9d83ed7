"""Helpers of the mirror tests: a tiny training run with a mirror on, and the store's reports to compare with."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from tests.train._helpers import config, write_dataset
from theseus.quick import quick
from theseus.store import Store


def mirrored_run(root, backend: str, folder, name: str = "mirrored", **logging):
    """Train a 6-step run on a tiny dataset in ``root`` with ``logging.remote`` on; returns the job."""
    if not (Path(root) / "data" / "fineweb").exists():
        write_dataset(root, tokens=5000)
    cfg = config(training={"tokens": 8 * 32 * 6},
                 logging={"report_interval": 1, "checkpoint_interval": 3, "validation_interval": 3, "remote": True,
                          "remote_backend": backend, "remote_dir": str(folder), **logging})
    with quick(str(root)) as q:
        q.build("gpt/train/pretrain", name)
        q.config.merge_with(OmegaConf.create(cfg))
        job = q.create()
        job()
    return job


def reports(root, nonce: str) -> dict[int, dict[str, float]]:
    """``{seq: {key: value}}``: every numeric user value the store holds for the run (its seq is its step)."""
    out = {}
    for row in Store(str(root)).find().nonce(nonce).frame().collect().iter_rows(named=True):
        values = {k: float(v) for k, v in row.items()
                  if k not in ("node", "name", "nonce", "seq", "parent") and isinstance(v, int | float)}
        if values:
            out[row["seq"]] = values
    return out


def tensorboard_scalars(folder) -> dict[int, dict[str, float]]:
    """``{step: {tag: value}}`` of the event files in ``folder``, read with TensorBoard's EventAccumulator."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    out: dict[int, dict[str, float]] = {}
    for tag in events.Tags()["scalars"]:
        for event in events.Scalars(tag):
            out.setdefault(event.step, {})[tag] = event.value
    return out


def tensorboard_texts(folder) -> dict[str, str]:
    """``{tag: text}`` of the text summaries in ``folder``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder), size_guidance={"tensors": 0})
    events.Reload()
    return {tag: events.Tensors(tag)[0].tensor_proto.string_val[0].decode() for tag in events.Tags()["tensors"]}


def wandb_records(path):
    """The protobuf records of a wandb run file (``run-<id>.wandb``): a LevelDB-style log of 32 KiB blocks, each
    record a 7-byte header (checksum, length, type: 1 full, 2 first, 3 middle, 4 last) and its bytes, after the
    file's 7-byte header (``:W&B``, magic 0xBEE1, version)."""
    import struct

    from wandb.proto import wandb_internal_pb2

    data = Path(path).read_bytes()
    ident, magic, _ = struct.unpack("<4sHB", data[:7])
    assert (ident, magic) == (b":W&B", 0xBEE1), (ident, magic)
    block, header, pos, parts = 32768, 7, 7, []
    while pos + header <= len(data):
        if block - pos % block < header:  # the rest of a block too short for a header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + header])
        if length == 0 and kind == 0:
            break
        parts.append(data[pos + header:pos + header + length])
        pos += header + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(b"".join(parts))
            parts = []
            yield record


def wandb_offline_run(folder) -> tuple[dict[int, dict[str, float]], dict]:
    """``(history by step, run record)`` of the one offline wandb run under ``folder``."""
    import json

    (path,) = Path(folder).glob("wandb/offline-run-*/run-*.wandb")
    history: dict[int, dict[str, float]] = {}
    run = None
    for record in wandb_records(path):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            row = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            step = row.pop("_step")
            history.setdefault(step, {}).update({k: v for k, v in row.items() if not k.startswith("_")})
        elif kind == "run":
            run = record.run
    return history, run


def comet_offline_archive(folder) -> tuple[dict[int, dict[str, float]], dict, dict]:
    """``(metrics by step, parameters, others)`` of the one offline Comet archive (a zip) in ``folder``."""
    import json
    import zipfile

    (path,) = Path(folder).glob("*.zip")
    metrics: dict[int, dict[str, float]] = {}
    params, others = {}, {}
    with zipfile.ZipFile(path) as archive:
        for line in archive.read("messages.json").decode().splitlines():
            message = json.loads(line)
            payload = message.get("payload", {})
            if message.get("type") == "metric_msg" and payload["metric"]["step"] is not None \
                    and not payload["metric"]["metricName"].startswith(("sys.", "process")):
                metrics.setdefault(payload["metric"]["step"], {})[payload["metric"]["metricName"]] = \
                    payload["metric"]["metricValue"]
            elif message.get("type") == "parameter_msg" and payload["param"]["source"] == "manual":
                params[payload["param"]["paramName"]] = payload["param"]["paramValue"]
            elif message.get("type") == "log_other":
                others[payload["key"]] = payload["value"]
    return metrics, params, others
