"""The public benchmarks' loaders read small local files written in exactly the Hugging Face datasets' formats
(parquet with nested columns, jsonl), laid out as their hub repositories are; each part runs on a toy model and
reports its keys; nothing downloads. Bad files and settings are refused clearly."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf

from theseus.data.tokenizer import get_tokenizer
from theseus.model.config import GPTConfig
from theseus.model.gpt import GPT
from theseus.train.evals.choice import MultipleChoiceFiles, Question
from theseus.train.evals.exact_match import Example
from theseus.train.evals.public import GSM8K, MMLU, PIQA, ARCChallenge, ARCEasy, HellaSwag, Lambada
from theseus.train.evaluations import EvalContext
from theseus.train.parts import parts

HELLASWAG = {"ind": 24, "activity_label": "Roof shingle removal", "ctx_a": "A man is sitting on a roof.",
             "ctx_b": "he", "ctx": "A man is sitting on a roof. he",
             "endings": ["is using wrap to wrap a pair of skis.", "is ripping level tiles off.",
                         "is holding a rubik's cube.", "starts pulling up roofing on a roof."],
             "source_id": "activitynet~v_-JhWjGDPHMY", "split": "val", "split_type": "indomain", "label": "3"}
ARC = {"id": "Mercury_7175875", "question": "An astronomer observes that a planet rotates faster after a meteorite "
       "impact. Which is the most likely effect of this increase in rotation?",
       "choices": {"text": ["Planetary density will decrease.", "Planetary years will become longer.",
                            "Planetary days will become shorter.", "Planetary gravity will become stronger."],
                   "label": ["A", "B", "C", "D"]}, "answerKey": "C"}
PIQA_ROW = {"goal": "When boiling butter, when it's ready, you can", "sol1": "Pour it onto a plate",
            "sol2": "Pour it into a jar", "label": 1}
MMLU_ROW = {"question": "Find the degree for the given field extension Q(sqrt(2)) over Q.",
            "subject": "abstract_algebra", "choices": ["0", "2", "1", "3"], "answer": 1}
LAMBADA_ROW = {"text": "In my palm is a clear stone, and inside it is a small ivory statuette. a guardian angel"}
GSM8K_ROW = {"question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips "
             "in May. How many clips did Natalia sell altogether in April and May?",
             "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips "
             "altogether in April and May.\n#### 72"}


def jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def parquet(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), str(path))


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """A folder per task, in the hub repositories' layouts and formats."""
    root = tmp_path_factory.mktemp("published")
    jsonl(root / "hellaswag" / "hellaswag_val.jsonl", [HELLASWAG] * 3)  # validation is 'val' in rowan's files
    parquet(root / "ai2_arc" / "ARC-Easy" / "test-00000-of-00001.parquet", [ARC] * 2)
    parquet(root / "ai2_arc" / "ARC-Challenge" / "test-00000-of-00001.parquet", [ARC])
    parquet(root / "ai2_arc" / "ARC-Challenge" / "train-00000-of-00001.parquet", [ARC] * 5)
    jsonl(root / "piqa" / "valid.jsonl", [PIQA_ROW] * 2)
    parquet(root / "mmlu" / "all" / "test-00000-of-00001.parquet", [MMLU_ROW] * 4)
    jsonl(root / "lambada" / "lambada_test.jsonl", [LAMBADA_ROW] * 2)
    parquet(root / "gsm8k" / "main" / "test-00000-of-00001.parquet", [GSM8K_ROW] * 2)
    return root


def settings(published, length=-1):
    return OmegaConf.create({"eval": {
        "length": length,
        "hellaswag": {"path": str(published / "hellaswag"), "subset": "", "split": "val"},
        "arc_easy": {"path": str(published / "ai2_arc"), "subset": "ARC-Easy", "split": "test"},
        "arc_challenge": {"path": str(published / "ai2_arc"), "subset": "ARC-Challenge", "split": "test"},
        "piqa": {"path": str(published / "piqa" / "valid.jsonl"), "subset": "", "split": ""},
        "mmlu": {"path": str(published / "mmlu"), "subset": "all", "split": "test"},
        "lambada": {"path": str(published / "lambada"), "subset": "", "split": "test"},
        "gsm8k": {"path": str(published / "gsm8k"), "subset": "main", "split": "test", "max_new_tokens": 4,
                  "batch_size": 2},
    }, "tokenizer": {"backend": "tiktoken", "name": "cl100k_base",
                     "huggingface": {"use_fast": True, "use_remote_code": False}}})


def test_every_benchmark_is_a_registered_evaluation_part():
    known = parts("evaluation")
    for name in ("hellaswag", "arc-easy", "arc-challenge", "piqa", "mmlu", "lambada", "gsm8k", "pydoc", "addition",
                 "bits-per-byte", "multiple-choice"):
        assert name in known


def test_loaders_read_the_published_columns(published):
    config = settings(published)
    [h, *_] = HellaSwag.questions(config)
    assert h.context == "Roof shingle removal: A man is sitting on a roof. He" and h.label == 3
    assert h.choices[3] == " starts pulling up roofing on a roof."
    assert ARCEasy.questions(config)[0] == Question(f"Question: {ARC['question']}\nAnswer:",
                                                    tuple(" " + t for t in ARC["choices"]["text"]), 2)
    assert len(ARCEasy.questions(config)) == 2 and len(ARCChallenge.questions(config)) == 1  # subset and split
    assert PIQA.questions(config)[0].choices == (" Pour it onto a plate", " Pour it into a jar")
    mmlu = MMLU.questions(config)[0]
    assert mmlu.context.startswith("The following are multiple choice questions (with answers) about abstract "
                                   "algebra.\n\nFind the degree") and mmlu.context.endswith("D. 3\nAnswer:")
    assert mmlu.choices == (" A", " B", " C", " D") and mmlu.label == 1
    assert Lambada.rows(config)[0] == ("In my palm is a clear stone, and inside it is a small ivory statuette. "
                                       "a guardian", " angel")
    assert GSM8K.rows(config)[0] == Example(f"Question: {GSM8K_ROW['question']}\nAnswer:", "72")
    assert len(MMLU.questions(settings(published, length=3))) == 3  # eval.length caps the examples


@pytest.fixture(scope="module")
def toy():
    model = GPT(GPTConfig(n_embd=32, n_head=4, n_layers=1, vocab_size=100288, block_size=128))
    params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32))["params"]
    return model, params


@pytest.mark.parametrize("part, keys", [
    (HellaSwag, ["acc", "acc_norm"]), (ARCEasy, ["acc", "acc_norm"]), (PIQA, ["acc", "acc_norm"]),
    (MMLU, ["acc", "acc_norm"]), (Lambada, ["acc", "perplexity"]), (GSM8K, ["exact_match"]),
])
def test_each_part_runs_on_a_model_and_reports_its_keys(published, toy, part, keys):
    model, params = toy
    context = EvalContext(step=0, params=params, config=settings(published), sources=(), mean_loss=lambda d: 0.0,
                          model=model)
    metrics = part.run(context)
    assert sorted(metrics) == sorted(f"eval/{part.name}/{k}" for k in keys)
    assert all(v >= 0 for v in metrics.values())


def test_bad_data_is_refused_with_a_clear_message(published, tmp_path):
    config = settings(published)
    config.eval.hellaswag.path = str(published / "piqa")  # PIQA's columns where HellaSwag's are expected
    with pytest.raises(ValueError, match="hellaswag: row 0 of .* has no 'ctx' column; is it hellaswag's"):
        HellaSwag.questions(config)
    config.eval.hellaswag.path = str(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="not found"):
        HellaSwag.questions(config)
    config.eval.hellaswag.path = ""
    with pytest.raises(ValueError, match="eval.hellaswag.path is empty"):
        HellaSwag.check(config)
    config.eval.gsm8k.max_new_tokens = 0
    with pytest.raises(ValueError, match="eval.gsm8k.max_new_tokens must be a positive integer"):
        GSM8K.check(config)
    jsonl(tmp_path / "q" / "q.jsonl", [{"context": "a", "choices": ["b", "c"], "label": 2}])
    with pytest.raises(ValueError, match="label 2 is not an index of the 2 choices"):
        MultipleChoiceFiles.questions(OmegaConf.create({"eval": {"multiple_choice": {"path": str(tmp_path / "q")}}}))


def test_offline_hub_names_fail_naming_the_local_alternative(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    config = OmegaConf.create({"eval": {"length": -1, "piqa": {"path": "nobody/no-such-dataset", "subset": "",
                                                               "split": "validation"}}})
    with pytest.raises(FileNotFoundError, match="give a local folder of its parquet / jsonl files instead"):
        PIQA.questions(config)


def test_choices_split_where_the_context_ends():
    from theseus.train.evals.choice import choice_pairs

    tok = get_tokenizer()
    [(context, choice)] = choice_pairs(tok, "Question: 2+2?\nAnswer:", [" 4"])
    assert tok.decode(context) == "Question: 2+2?\nAnswer:" and tok.decode(choice) == " 4"
