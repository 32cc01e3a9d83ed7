"""Bad input: each a clear error before any compute, with nothing written to the root."""

from __future__ import annotations

import os

import pytest

from tests.train._helpers import config
from theseus.data.store import DatasetNotFound


def listing(root):
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)


@pytest.mark.parametrize(
    "cfg, error, pattern",
    [
        (config(architecture={"n_embd": 30, "n_head": 4}), ValueError,
         r"n_embd \(30\) must be divisible by n_head \(4\)"),
        (config(training={"batch_size": 8, "per_device_batch_size": 3}), ValueError,
         r"batch_size 8 does not split into micro-batches of per_device_batch_size 3 x 1 data-parallel devices = 3"),
        (config(training={"per_device_batch_size": 0}), ValueError, r"per_device_batch_size must be -1"),
        (config(architecture={"block_size": 50_000}, training={"tokens": 8 * 50_000}), ValueError,
         r"block_size 50000 is too long for dataset 'fineweb' train"),
        (config(data={"dataset": "nope"}), DatasetNotFound, r"data/tokenize/nope"),
        (config(data={"suffix": "-v2"}), DatasetNotFound, r"'fineweb-v2' not found.*data/tokenize/fineweb"),
        (config(shard={"tp": 3}), ValueError, r"tp=3 does not divide n_head=4"),
        (config(shard={"tp": 2}, architecture={"n_head": 2}), ValueError, r"tp=2 does not divide the device count 1"),
        (config(training={"tokens": 100}), ValueError, r"less than one step of batch_size 8 \* block_size 32"),
        (config(training={"batch_sise": 8}), ValueError, r"'training.batch_sise'.*did you mean training.batch_size"),
        (config(training={"batch_size": "many"}), ValueError, r"training.batch_size"),
        (config(logging={"report_interval": 0}), ValueError, r"logging.report_interval must be a positive"),
    ],
    ids=["heads", "micro-split", "micro-zero", "block-too-long", "no-dataset", "suffix", "tp-heads", "tp-devices",
         "no-step", "typo", "type", "interval"],
)
def test_bad_input_fails_before_compute(make_trainer, data_root, cfg, error, pattern):
    before = listing(data_root)
    with pytest.raises(error, match=pattern):
        make_trainer(cfg)
    assert listing(data_root) == before


def test_vocab_smaller_than_dataset_tokenizer(make_trainer, tmp_path):
    import numpy as np

    from theseus.data.store import DatasetWriter

    with DatasetWriter(str(tmp_path), "fineweb", "contiguous") as w:
        w.set_tokenizer({"backend": "tiktoken", "name": "cl100k_base", "vocab_size": 100277, "eot": 100257})
        w.append("train", np.arange(10_000) % 50)
        w.append("val", np.arange(1_000) % 50)
    with pytest.raises(ValueError, match="vocabulary of 100277 tokens, more than architecture.vocab_size 256"):
        make_trainer(root=str(tmp_path))


def test_val_split_too_short(make_trainer, tmp_path):
    import numpy as np

    from theseus.data.store import DatasetWriter

    with DatasetWriter(str(tmp_path), "fineweb", "contiguous") as w:
        w.append("train", np.arange(10_000) % 50)
        w.append("val", np.arange(20) % 50)
    with pytest.raises(ValueError, match="block_size 32 is too long for dataset 'fineweb' val"):
        make_trainer(root=str(tmp_path))
    # without validation and evaluations (which read the val split too) the short val split is fine
    with pytest.raises(ValueError, match="block_size 32 is too long for dataset 'fineweb' val"):
        make_trainer(config(training={"validation": False}), root=str(tmp_path))
    make_trainer(config(training={"validation": False, "evaluate": False}), root=str(tmp_path))


def test_autobatch_without_a_dividing_candidate(make_trainer, monkeypatch):
    monkeypatch.setenv("THESEUS_AUTOBATCH_SIZE_CANDIDATES", "16 3")
    with pytest.raises(ValueError, match=r"batch_size 8 does not split into micro-batches of any autobatch candidate"):
        make_trainer(config(training={"per_device_batch_size": -1}))
