"""Generation from a trainer and a job: text and tokens per prompt, stop strings and end-of-text, seeds, the
run's tokenizer, a resumed checkpoint, and 8 devices (FSDP, tensor parallel) generating what 1 device does."""

from __future__ import annotations

import pathlib

import pytest

from tests.train._helpers import config, write_dataset
from tests.train._subproc import run_python
from theseus.quick import quick
from theseus.train.generate import Sample
from theseus.train.trainer import Trainer

# prompts whose cl100k tokens are all below the tiny models' vocabulary of 256
PROMPTS = ["1+2=", "(3", "7*"]


class ByteTokenizer:
    """A tokenizer of single bytes with ``eot`` chosen by the test (the interface of theseus.data.tokenizer)."""

    name, vocab_size = "bytes", 256

    def __init__(self, eot: int):
        self.eot = eot

    def encode(self, text: str) -> list[int]:
        return list(text.encode())

    def decode(self, ids) -> str:
        return bytes(int(i) for i in ids).decode(errors="replace")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A trainer of the tiny float32 config after 20 steps (its samples are not uniform noise)."""
    root = str(tmp_path_factory.mktemp("gen"))
    write_dataset(root, tokens=12_000)
    cfg = config(architecture={"dtype": {"activation": "float32"}}, training={"tokens": 8 * 32 * 20},
                 logging={"report_interval": 20, "validation_interval": 20})
    trainer = Trainer(cfg, root, peak_flops=1e12, progress=False)
    trainer.train()
    return trainer


def test_generate_returns_a_sample_per_prompt_greedy_cached_equals_uncached(trained):
    samples = trained.generate(PROMPTS, max_new_tokens=12, temperature=0.0)
    assert [s.prompt for s in samples] == PROMPTS
    assert all(isinstance(s, Sample) and len(s.tokens) == 12 and s.stop == "length" for s in samples)
    assert all(s.text == trained.tokenizer.decode(s.tokens) for s in samples)
    assert samples == trained.generate(PROMPTS, max_new_tokens=12, temperature=0.0, cache=False)
    assert trained.generate(PROMPTS[1], max_new_tokens=12, temperature=0.0) == samples[1:2]  # one by one


def test_a_seed_gives_the_same_text_and_another_seed_other_text(trained):
    options = dict(max_new_tokens=16, temperature=1.5, top_k=50, top_p=0.95)
    a = trained.generate(PROMPTS, seed=3, **options)
    assert a == trained.generate(PROMPTS, seed=3, **options)
    assert [s.tokens for s in a] != [s.tokens for s in trained.generate(PROMPTS, seed=4, **options)]


def test_stop_strings_cut_the_text_and_the_tokens(trained):
    [free] = trained.generate(PROMPTS[0], max_new_tokens=16, temperature=1.5, seed=1)
    cut = next(i for i in range(1, len(free.text)) if free.text[i] not in free.text[:i] and free.text[i].strip())
    stop = free.text[cut]
    [sample] = trained.generate(PROMPTS[0], max_new_tokens=16, temperature=1.5, seed=1, stop=["@@never@@", stop])
    assert sample.stop == "stop" and sample.text == free.text[:cut]
    assert sample.tokens == free.tokens[:len(sample.tokens)] and len(sample.tokens) < len(free.tokens)
    assert stop in trained.tokenizer.decode(sample.tokens) and stop not in trained.tokenizer.decode(sample.tokens[:-1])


def test_a_sample_ends_at_the_end_of_text_token(trained):
    from theseus.train.generate import generate

    free = generate(trained.model, trained.params, ByteTokenizer(eot=255), "1+2=", max_new_tokens=10,
                    temperature=0.0)[0]
    at = next(i for i in range(1, 10) if free.tokens[i] not in free.tokens[:i])
    [sample] = generate(trained.model, trained.params, ByteTokenizer(eot=free.tokens[at]), "1+2=", max_new_tokens=10,
                        temperature=0.0)
    assert sample.stop == "eot" and sample.tokens == free.tokens[:at]  # the end-of-text token is left out
    assert sample.text == bytes(free.tokens[:at]).decode(errors="replace")


def test_bad_input_is_a_clear_error(trained):
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        trained.generate(["1", ""], max_new_tokens=2)
    with pytest.raises(ValueError, match=r"plus max_new_tokens \(40\) is 44, more than the model's block_size \(32\)"):
        trained.generate("1+2=", max_new_tokens=40)
    with pytest.raises(ValueError, match="token id 15339, outside the model's vocabulary of 256"):
        trained.generate("hello", max_new_tokens=2)
    with pytest.raises(ValueError, match="a stop string must be a non-empty string"):
        trained.generate("1", max_new_tokens=2, stop=[""])
    with pytest.raises(ValueError, match="top_p must be in"):
        trained.generate("1", max_new_tokens=2, top_p=1.5)


def test_the_tokenizer_must_be_the_one_the_data_recorded(tmp_path):
    from theseus.data.store import DatasetWriter

    root = str(tmp_path)
    with DatasetWriter(root, "fineweb", "contiguous") as w:
        w.set_tokenizer({"backend": "huggingface", "name": "/somewhere/tok", "vocab_size": 200, "eot": 0})
        w.append("train", list(range(200)) * 20)
        w.append("val", list(range(200)) * 4)
    trainer = Trainer(config(), root, peak_flops=1e12, progress=False)
    with pytest.raises(ValueError, match="tokenized with huggingface '/somewhere/tok'"):
        trainer.generate("1", max_new_tokens=2)


def test_a_job_generates_and_a_resumed_checkpoint_generates_the_same(tmp_path):
    root = str(tmp_path)
    write_dataset(root, tokens=12_000)
    with quick(root) as q:
        q.build("gpt/train/pretrain", "gen").config.merge_with(
            config(training={"tokens": 8 * 32 * 4}, logging={"checkpoint_interval": 4, "validation_interval": 4}))
        job = q.create()
        nonce = job.node.nonce
        job()
        before = job.generate(PROMPTS, max_new_tokens=8, seed=2)
        job.close()
    with quick(root) as q:
        q.find().nonce(nonce).checkpoint().resume()
        resumed = q.build().create()
        assert resumed.generate(PROMPTS, max_new_tokens=8, seed=2) == before
        resumed.close()


MULTI = r"""
import sys, tempfile
sys.path.insert(0, {repo!r})
import jax
from tests.train._helpers import write_dataset, config
from theseus.train.trainer import Trainer

root = tempfile.mkdtemp()
write_dataset(root, tokens=12_000)
prompts = {prompts!r}

def make(devices, per_device, **shard):
    cfg = config(architecture={{"dtype": {{"activation": "float32"}}}}, training={{"tokens": 8 * 32 * 10}},
                 logging={{"report_interval": 1, "validation_interval": 100}}, shard=shard)
    cfg["training"]["per_device_batch_size"] = per_device
    return Trainer(cfg, root, devices=devices, peak_flops=1e12, progress=False)

def samples(trainer):
    greedy = trainer.generate(prompts, max_new_tokens=10, temperature=0.0)
    drawn = trainer.generate(prompts, max_new_tokens=10, temperature=1.0, top_k=40, seed=9)
    return [[list(s.tokens) for s in greedy], [list(s.tokens) for s in drawn]]

one = make(jax.devices()[:1], 8)
for _ in range(3):
    one.tick()
folder = tempfile.mkdtemp() + "/step-3"
one.save(folder); one.wait()
out = {{"one": samples(one)}}
for name, devices, per_device, shard in (("fsdp", jax.devices(), 1, dict(fsdp=True)),
                                         ("tp", jax.devices(), 2, dict(tp=2, fsdp=False))):
    other = make(devices, per_device, **shard)
    other.restore(folder)
    out[name] = samples(other)
    out[name + "_devices"] = other.mesh.devices.size
emit(out)
"""


@pytest.mark.slow
def test_generation_on_8_devices_with_fsdp_or_tp_equals_1_device():
    repo = str(pathlib.Path(__file__).resolve().parents[2])
    out = run_python(MULTI.format(repo=repo, prompts=PROMPTS), devices=8, timeout=600)
    assert out["fsdp_devices"] == out["tp_devices"] == 8
    assert out["fsdp"] == out["one"]
    assert out["tp"] == out["one"]
