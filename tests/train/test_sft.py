"""SFT end to end on a tiny imported model: import -> tokenize chat -> llama/train/sft; the masked loss falls and the
greedy answer to a training prompt moves to its target; `theseus sample --chat` renders the prompt in the template."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import yaml

from theseus.data.chat import chat_prompt, load_template
from theseus.errors import BadInput
from theseus.quick import quick
from theseus.store import Store

QA = [("Who jumps?", "The quick brown fox."), ("What does add return?", "return a + b"),
      ("Where is the dog?", "The lazy dog is over there."), ("What is imported?", "import os")]
CHATML = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """A tiny random Llama with a ChatML template and its special tokens, imported into a root."""
    import transformers

    from tests.hf._folders import tiny_folder
    from theseus.hf.importer import import_hf

    tmp = tmp_path_factory.mktemp("sft")
    folder = tmp / "hf"
    tiny_folder(str(folder), "llama")
    fast = transformers.PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"), eos_token="<|im_end|>",
                                                additional_special_tokens=["<|im_start|>"])
    fast.chat_template = CHATML
    fast.save_pretrained(str(folder))
    root = str(tmp / "root")
    node = import_hf(str(folder), root)
    tokenizer = yaml.safe_load(Store(root).record(node)["_config"])["tokenizer"]
    corpus = tmp / "chat.jsonl"
    corpus.write_text("".join(json.dumps({"messages": [{"role": "user", "content": q}, {"role": "assistant",
                                                                                           "content": a}]}) + "\n"
                              for _ in range(8) for q, a in QA))
    with quick(root) as q:
        q.build("data/tokenize/chat", "tokenize-chat")
        q.config.tokenizer.backend, q.config.tokenizer.name = tokenizer["backend"], tokenizer["name"]
        q.config.data.chat.paths = [str(corpus)]
        q.config.data.block_size, q.config.data.val_pct = 64, 0.25
        q.create()()
        q.build("data/tokenize/chat", "tokenize-chat-packed")
        q.config.tokenizer.backend, q.config.tokenizer.name = tokenizer["backend"], tokenizer["name"]
        q.config.data.chat.merge_with({"paths": [str(corpus)], "dataset": "packed"})
        q.config.data.merge_with({"block_size": 128, "val_pct": 0.25, "pack": True})
        q.create()()
    return root, node


def _answer_logprob(root, node, question: str, answer: str) -> tuple[float, str]:
    """The log-probability the checkpoint of ``node`` gives ``answer`` (and its end of turn) after the chat prompt
    of ``question``, and its greedy answer."""
    from theseus.replay.restore import restored_trainer

    trainer = restored_trainer(root, node)
    try:
        tok = trainer.tokenizer
        prompt, stops = chat_prompt(load_template(tok), question)
        ids, target = tok.encode(prompt), tok.encode(answer + stops[0])
        x = jnp.asarray([ids + target[:-1]], jnp.int32)
        logp = jax.nn.log_softmax(trainer.model.apply({"params": trainer.params}, x).astype(jnp.float32), -1)
        total = float(sum(logp[0, len(ids) - 1 + i, t] for i, t in enumerate(target)))
        [sample] = trainer.generate(prompt, max_new_tokens=len(target), temperature=0.0, stop=stops)
        return total, sample.text
    finally:
        trainer.close()


def sft_config(source, dataset: str, steps: int, batch_size: int, every: int) -> dict:
    """The config of an SFT run from ``source`` on ``dataset``: a report each step, a checkpoint and a validation
    every ``every`` steps."""
    return {"training": {"init_from": source.nonce, "batch_size": batch_size, "per_device_batch_size": batch_size,
                         "steps": steps, "validation_steps": 1},
            "data": {"dataset": dataset},
            "logging": {"report_interval": 1, "checkpoint_interval": every, "validation_interval": every}}


def run_sft(root, source, name: str, dataset: str, steps: int, batch_size: int, every: int, **sections):
    """A ``llama/train/sft`` run of `sft_config`, ``sections`` over it; its last node."""
    with quick(root) as q:
        q.build("llama/train/sft", name).config.merge_with({**sft_config(source, dataset, steps, batch_size, every),
                                                            **sections})
        return q.create()()


@pytest.mark.slow
def test_sft_lowers_the_masked_loss_and_moves_the_greedy_answer_to_its_target(imported):
    from theseus.replay.sample import sample

    root, node = imported
    # a random tiny model learns its answers in a few dozen steps at a high rate
    last = run_sft(root, node, "sft", "chat", steps=40, batch_size=8, every=40, optimization={"lr": 1e-2})
    store = Store(root)
    losses = [r["train/loss"] for r in store.find().nonce(last.nonce).has("train/loss").select(keys=["train/loss"])]
    record = store.record(last)
    assert losses[-1] < 0.3 * losses[0] and record["eval/chat-val/loss"] < 0.5 * losses[0]
    question, answer = QA[0]
    before, before_text = _answer_logprob(root, node, question, answer)
    after, after_text = _answer_logprob(root, last, question, answer)
    assert after > before + 10 and after_text == answer != before_text
    _, [chat] = sample(root, last.nonce, question, chat=True, temperature=0.0)
    assert chat.prompt == f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n" and chat.text == answer
    import typer
    from typer.testing import CliRunner

    from theseus.cli.sample import register

    app = typer.Typer()  # one command: invoked without its name
    register(app)
    printed = CliRunner().invoke(app, [root, last.nonce, question, "--chat", "--temperature", "0"])
    assert printed.exit_code == 0, printed.output
    assert printed.output.rstrip().endswith(f"<|im_start|>assistant\n{answer}")


@pytest.mark.slow
def test_a_resumed_packed_sft_run_replays_its_steps_bit_for_bit_and_verifies(imported):
    from theseus.replay.verify import verify

    root, node = imported
    end = run_sft(root, node, "sft-packed", "packed", steps=6, batch_size=2, every=3,
                  architecture={"block_size": 128})  # the packed rows' width; RoPE keeps the shapes
    store, keys = Store(root), ["train/loss", "train/grad_norm"]
    before = {r["train/step"]: r for r in store.find().nonce(end.nonce).has("train/loss")
              .select(keys=["train/step", *keys])}
    with quick(root) as q:
        q.find().nonce(end.nonce).checkpoint().where("train/step", "==", 3).resume()
        branch = q.build().create()()
    after = store.find().nonce(branch.nonce).has("train/loss").select(keys=["train/step", *keys])
    assert [r["train/step"] for r in after] == [4, 5, 6]
    assert all(r[k] == before[r["train/step"]][k] for r in after for k in keys)
    start = store.find().nonce(end.nonce).where("train/step", "==", 3).first()
    assert verify(root, start.id, steps=2).verdict.status == "bitwise"


@pytest.mark.slow
def test_an_sft_job_trains_on_a_mixture_of_packed_and_unpacked_chat_data(imported):
    from tests.conftest import scratch_registry
    from theseus.jobs import job
    from theseus.train.recipe import Sampling
    from theseus.train.sft import SFTLlama

    root, node = imported
    with scratch_registry():  # the subclass's key is registered for this test only

        @job("lab/train/sft-mix", "SFT on an even mixture of the unpacked and the packed chat data.")
        class SFTMix(SFTLlama):
            DATA = [Sampling("chat", 0.5), Sampling("packed", 0.5)]

        config = sft_config(node, "chat", steps=6, batch_size=4, every=6)
        config["data"] = {"seed": 0}  # the mixture's datasets come from DATA (data.mixture), not data.dataset
        with quick(root) as q:
            cfg = q.build("lab/train/sft-mix", "sft-mix").config
            assert [(s.dataset, s.rate) for s in cfg.data.mixture] == [("chat", 0.5), ("packed", 0.5)]
            # the packed rows' width; the unpacked rows are padded up to it, out of the loss
            cfg.merge_with({**config, "architecture": {"block_size": 128}, "optimization": {"lr": 1e-2}})
            last = q.create()()
    store = Store(root)
    losses = [r["train/loss"] for r in store.find().nonce(last.nonce).has("train/loss").select(keys=["train/loss"])]
    assert len(losses) == 6 and losses[-1] < 0.85 * losses[0]
    record = store.record(last)
    assert all(record[f"eval/{name}-val/loss"] < losses[0] for name in ("chat", "packed"))


def test_sft_without_init_from_is_refused(imported):
    root, _ = imported
    with quick(root) as q:
        q.build("llama/train/sft", "no-source")
        q.config.data.dataset = "chat"
        with pytest.raises(BadInput, match="set training.init_from"):
            q.create()
    assert Store(root).find().name("general.default.no-source").all() == []
    assert np.isclose(float(q.config.optimization.lr), 2e-5)


def test_sft_module_examples_run_and_cover_its_public_names():
    from tests.docstrings import examples_fail, names_without_examples

    failed, attempted = examples_fail("theseus.train.sft")
    assert attempted > 0 and failed == 0 and names_without_examples("theseus.train.sft") == []
