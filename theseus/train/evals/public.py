"""Public benchmarks in their published formats: HellaSwag, ARC-Easy/Challenge, PIQA, MMLU, LAMBADA and GSM8K.

Each is an evaluation part reading the Hugging Face dataset's own columns, from a local
folder or file of its parquet / jsonl files, or by hub name (`theseus.train.evals.rows`);
``eval.<task>.{path, subset, split}`` say where (the defaults name the hub dataset, so
an offline machine sets ``path`` to a local copy). Prompts follow lm-evaluation-harness's
zero-shot formats:

=============  ==========================================  =======================================
task           columns                                     metrics (``eval/<task>/...``)
=============  ==========================================  =======================================
hellaswag      ctx (or ctx_a, ctx_b), endings, label       acc, acc_norm (multiple choice)
arc-easy       question, choices{text,label}, answerKey    acc, acc_norm
arc-challenge  (same)                                      acc, acc_norm
piqa           goal, sol1, sol2, label                     acc, acc_norm
mmlu           question, subject, choices, answer          acc, acc_norm
lambada        text (its last word is the target)          acc (greedy), perplexity
gsm8k          question, answer ('... #### N')             exact_match (generated, extracted)
=============  ==========================================  =======================================

>>> arc_question({"question": "Which is a gas?", "choices": {"text": ["ice", "steam"], "label": ["A", "B"]},
...               "answerKey": "B"})
Question(context='Question: Which is a gas?\\nAnswer:', choices=(' ice', ' steam'), label=1)
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np

from theseus.errors import BadInput
from theseus.train.evals.choice import MultipleChoice, Question
from theseus.train.evals.exact_match import ANSWER_MARKER, Example, exact_match, normalize
from theseus.train.evals.likelihood import loglikelihood
from theseus.train.evals.rows import load_rows
from theseus.train.evaluations import EvalContext, Evaluation, architecture_sizes, first_examples
from theseus.train.generate import tokenizer_of
from theseus.train.parts import part

__all__ = ["GSM8K", "ARCChallenge", "ARCEasy", "HellaSwag", "Lambada", "MMLU", "PIQA", "PublicSource",
           "arc_question", "gsm8k_example", "hellaswag_question", "lambada_example", "mmlu_question",
           "piqa_question"]


@dataclasses.dataclass
class PublicSource:
    """``eval.<task>``: where a public task's rows come from: ``path`` (a local folder or file, or a hub name),
    ``subset`` (the hub config, e.g. ``ARC-Easy``; in a local folder, a part of the files' paths) and ``split``.

    >>> PublicSource("allenai/ai2_arc", "ARC-Easy", "test").subset
    'ARC-Easy'
    """

    path: str = ""
    subset: str = ""
    split: str = "test"


def _section(field: str, path: str, subset: str, split: str) -> type:
    """The config dataclass of one task: ``eval.<field>``, a `PublicSource` with the task's defaults."""
    source = PublicSource(path, subset, split)
    return dataclasses.make_dataclass(f"{field}_section", [
        (field, PublicSource, dataclasses.field(default_factory=lambda: dataclasses.replace(source)))])


def _hellaswag_text(text: str) -> str:
    """lm-evaluation-harness's HellaSwag clean-up: WikiHow's bracketed markers out, double spaces single."""
    text = text.strip().replace(" [title]", ". ")
    text = re.sub(r"\[.*?\]", "", text)
    return text.replace("  ", " ")


def hellaswag_question(row: Mapping[str, Any]) -> Question:
    """A HellaSwag row (``activity_label``, ``ctx_a``/``ctx_b`` or ``ctx``, ``endings``, ``label``) as a question.

    >>> hellaswag_question({"activity_label": "Baking", "ctx": "She mixes the flour [title] and", "endings":
    ...                     ["bakes it.", "sings."], "label": "0"}).context
    'Baking: She mixes the flour. and'
    """
    if row.get("ctx_a") is not None and row.get("ctx_b") is not None:
        ctx = f"{row['ctx_a']} {str(row['ctx_b']).capitalize()}"
    else:
        ctx = str(row["ctx"])
    label = row.get("activity_label")
    context = _hellaswag_text(f"{label}: {ctx}" if label else ctx)
    return Question(context, tuple(" " + _hellaswag_text(str(e)) for e in row["endings"]), int(row["label"]))


def arc_question(row: Mapping[str, Any]) -> Question:
    """An ARC row (``question``, ``choices`` {``text``, ``label``}, ``answerKey``) as a question.

    >>> arc_question({"question": "2+2?", "choices": {"text": ["3", "4"], "label": ["1", "2"]}, "answerKey": "2"}).label
    1
    """
    choices = row["choices"]
    labels = [str(x) for x in choices["label"]]
    if str(row["answerKey"]) not in labels:
        raise BadInput(f"ARC answerKey {row['answerKey']!r} is not one of the choice labels {labels}")
    return Question(f"Question: {row['question']}\nAnswer:", tuple(f" {t}" for t in choices["text"]),
                    labels.index(str(row["answerKey"])))


def piqa_question(row: Mapping[str, Any]) -> Question:
    """A PIQA row (``goal``, ``sol1``, ``sol2``, ``label``) as a question.

    >>> piqa_question({"goal": "Open a jar", "sol1": "twist the lid", "sol2": "eat the lid", "label": 0}).choices
    (' twist the lid', ' eat the lid')
    """
    return Question(f"Question: {row['goal']}\nAnswer:", (f" {row['sol1']}", f" {row['sol2']}"), int(row["label"]))


def mmlu_question(row: Mapping[str, Any]) -> Question:
    """An MMLU row (``question``, ``subject``, ``choices``, ``answer``): the lettered choices in the context, the
    letters as the choices.

    >>> q = mmlu_question({"question": "2+2?", "subject": "elementary_mathematics", "choices": ["3", "4"],
    ...                    "answer": 1})
    >>> print(q.context); q.choices, q.label
    The following are multiple choice questions (with answers) about elementary mathematics.
    <BLANKLINE>
    2+2?
    A. 3
    B. 4
    Answer:
    ((' A', ' B'), 1)
    """
    letters = "ABCDEFGHIJ"[:len(row["choices"])]
    subject = str(row.get("subject") or "").replace("_", " ")
    lines = [f"{letter}. {str(c).strip()}" for letter, c in zip(letters, row["choices"])]
    context = (f"The following are multiple choice questions (with answers) about {subject}.\n\n"
               f"{str(row['question']).strip()}\n" + "\n".join(lines) + "\nAnswer:")
    return Question(context, tuple(f" {letter}" for letter in letters), int(row["answer"]))


def lambada_example(row: Mapping[str, Any]) -> tuple[str, str]:
    """A LAMBADA row (``text``) as ``(context, target)``: the target is its last word, with its space.

    >>> lambada_example({"text": "he opened the door and saw his dog"})
    ('he opened the door and saw his', ' dog')
    """
    context, _, word = str(row["text"]).strip().rpartition(" ")
    if not context:
        raise BadInput(f"a LAMBADA text needs at least two words, got {row['text']!r}")
    return context, f" {word}"


def gsm8k_example(row: Mapping[str, Any]) -> Example:
    """A GSM8K row (``question``, ``answer`` ending in ``#### N``) as an exact-match example with answer N.

    >>> gsm8k_example({"question": "1+1?", "answer": "One and one make 2.\\n#### 2"})
    Example(prompt='Question: 1+1?\\nAnswer:', answer='2')
    """
    answer = str(row["answer"])
    if ANSWER_MARKER not in answer:
        raise BadInput(f"a GSM8K answer ends with '{ANSWER_MARKER} N', got {answer[-60:]!r}")
    return Example(f"Question: {row['question']}\nAnswer:", normalize(answer.rsplit(ANSWER_MARKER, 1)[1]))


class PublicTask(Evaluation):
    """A task whose examples are the rows of ``eval.<field>``'s data, each turned into an example by ``convert``.

    >>> HellaSwag.field, HellaSwag.Config().hellaswag.path
    ('hellaswag', 'Rowan/hellaswag')
    """

    section = "eval"
    field: ClassVar[str] = ""
    convert: ClassVar[Callable[[Mapping[str, Any]], Any]]

    @classmethod
    def source(cls, config: Any) -> Any:
        """The ``eval.<field>`` settings."""
        return config.eval[cls.field]

    @classmethod
    def check(cls, config: Any) -> None:
        """A path is given."""
        source = cls.source(config)
        if not source.path:
            raise BadInput(f"eval.{cls.field}.path is empty: give a local folder or file, or a hub name")

    @classmethod
    def rows(cls, config: Any) -> list[Any]:
        """The task's examples, the first ``eval.length`` of them (rows are converted only as far as needed)."""
        source = cls.source(config)
        rows = first_examples(load_rows(str(source.path), str(source.split), str(source.subset)), config)
        out = []
        for i, row in enumerate(rows):
            try:
                out.append(cls.convert(row))
            except KeyError as e:
                raise BadInput(f"{cls.name}: row {i} of {source.path} has no {e.args[0]!r} column; is it "
                                 f"{cls.name}'s published format?") from None
        return out


class PublicChoice(PublicTask, MultipleChoice):
    """A public multiple-choice task (`MultipleChoice` over `PublicTask.rows`).

    >>> issubclass(ARCEasy, MultipleChoice)
    True
    """

    @classmethod
    def questions(cls, config: Any) -> list[Question]:
        """The task's questions (already capped at ``eval.length``)."""
        return cls.rows(config)


@part("evaluation", "hellaswag", "HellaSwag (ctx, endings, label): eval/hellaswag/{acc,acc_norm}.")
class HellaSwag(PublicChoice):
    """HellaSwag's validation split, lm-evaluation-harness's prompt.

    >>> HellaSwag.Config().hellaswag.split
    'validation'
    """

    field = "hellaswag"
    Config = _section("hellaswag", "Rowan/hellaswag", "", "validation")
    convert = staticmethod(hellaswag_question)


@part("evaluation", "arc-easy", "ARC-Easy (question, choices, answerKey): eval/arc-easy/{acc,acc_norm}.")
class ARCEasy(PublicChoice):
    """ARC-Easy's test split.

    >>> ARCEasy.Config().arc_easy.subset
    'ARC-Easy'
    """

    field = "arc_easy"
    Config = _section("arc_easy", "allenai/ai2_arc", "ARC-Easy", "test")
    convert = staticmethod(arc_question)


@part("evaluation", "arc-challenge", "ARC-Challenge (question, choices, answerKey): "
                                     "eval/arc-challenge/{acc,acc_norm}.")
class ARCChallenge(PublicChoice):
    """ARC-Challenge's test split.

    >>> ARCChallenge.Config().arc_challenge.subset
    'ARC-Challenge'
    """

    field = "arc_challenge"
    Config = _section("arc_challenge", "allenai/ai2_arc", "ARC-Challenge", "test")
    convert = staticmethod(arc_question)


@part("evaluation", "piqa", "PIQA (goal, sol1, sol2, label): eval/piqa/{acc,acc_norm}.")
class PIQA(PublicChoice):
    """PIQA's validation split.

    >>> PIQA.Config().piqa.split
    'validation'
    """

    field = "piqa"
    Config = _section("piqa", "ybisk/piqa", "", "validation")
    convert = staticmethod(piqa_question)


@part("evaluation", "mmlu", "MMLU (question, subject, choices, answer), zero-shot: eval/mmlu/{acc,acc_norm}.")
class MMLU(PublicChoice):
    """MMLU's test split, every subject (``all``).

    >>> MMLU.Config().mmlu.subset
    'all'
    """

    field = "mmlu"
    Config = _section("mmlu", "cais/mmlu", "all", "test")
    convert = staticmethod(mmlu_question)


@part("evaluation", "lambada", "LAMBADA (text): the last word greedy and its likelihood: "
                               "eval/lambada/{acc,perplexity}.")
class Lambada(PublicTask):
    """LAMBADA (OpenAI's version): ``acc`` is the fraction of texts whose last word is the greedy continuation,
    ``perplexity`` exp of minus the mean log-likelihood of the last words.

    >>> Lambada.Config().lambada.path
    'EleutherAI/lambada_openai'
    """

    field = "lambada"
    Config = _section("lambada", "EleutherAI/lambada_openai", "default", "test")
    convert = staticmethod(lambada_example)

    @classmethod
    def run(cls, context: EvalContext) -> dict[str, float]:
        """Score each text's last word given the rest."""
        tokenizer = tokenizer_of(context.config, root=context.root)
        pairs = []
        for text, word in cls.rows(context.config):
            ids = list(tokenizer.encode(text + word))
            head = list(tokenizer.encode(text))
            tail = ids[len(head):] if ids[:len(head)] == head else list(tokenizer.encode(word))
            pairs.append((head, tail))
        if not pairs:
            raise BadInput("lambada: no texts to score")
        scored = loglikelihood(context.model, context.params, pairs, sizes=architecture_sizes(context.config))
        return {"eval/lambada/acc": float(np.mean([s.greedy for s in scored])),
                "eval/lambada/perplexity": math.exp(-float(np.mean([s.logprob for s in scored])))}


@dataclasses.dataclass
class GSM8KSettings(PublicSource):
    """``eval.gsm8k``: where its rows are, and the new tokens per answer (cut to what the block leaves).

    >>> GSM8KSettings().max_new_tokens
    256
    """

    path: str = "openai/gsm8k"
    subset: str = "main"
    split: str = "test"
    max_new_tokens: int = 256
    batch_size: int = 16


@dataclasses.dataclass
class GSM8KSection:
    """What the ``gsm8k`` part adds to ``eval``.

    >>> GSM8KSection().gsm8k.subset
    'main'
    """

    gsm8k: GSM8KSettings = dataclasses.field(default_factory=GSM8KSettings)


@part("evaluation", "gsm8k", "GSM8K (question, answer '#### N'): greedy answers, extracted: "
                             "eval/gsm8k/exact_match.")
class GSM8K(PublicTask):
    """GSM8K's test split, zero-shot: the model continues ``Question: ...\\nAnswer:`` greedily until
    ``Question:`` or a blank line, and the answer after ``####`` (else the last number) is compared.

    >>> GSM8K.stop
    ('Question:', '\\n\\n')
    """

    field = "gsm8k"
    Config = GSM8KSection
    convert = staticmethod(gsm8k_example)
    stop: ClassVar[tuple[str, ...]] = ("Question:", "\n\n")

    @classmethod
    def check(cls, config: Any) -> None:
        """A path; positive sizes."""
        super().check(config)
        for key in ("max_new_tokens", "batch_size"):
            value = config.eval.gsm8k[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise BadInput(f"eval.gsm8k.{key} must be a positive integer, got {value!r}")

    @classmethod
    def run(cls, context: EvalContext) -> dict[str, float]:
        """Generate, extract and score the first ``eval.length`` questions."""
        settings = cls.source(context.config)
        examples = cls.rows(context.config)
        tokenizer = tokenizer_of(context.config, root=context.root)
        longest = max(len(tokenizer.encode(e.prompt)) for e in examples)
        room = int(context.model.config.block_size) - longest
        if room < 1:
            raise BadInput(f"gsm8k: a question of {longest} tokens leaves no room to answer in the model's "
                             f"block_size ({context.model.config.block_size})")
        result = exact_match(context.model, context.params, tokenizer, examples,
                             max_new_tokens=min(int(settings.max_new_tokens), room),
                             batch_size=int(settings.batch_size), stop=cls.stop)
        return {"eval/gsm8k/exact_match": result.score}
