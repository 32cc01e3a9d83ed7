"""Multiple choice by log-likelihood: a context and its choices in, ``acc`` and ``acc_norm`` out (the shape of
HellaSwag, ARC, PIQA and MMLU).

Each choice is scored as the continuation of the context (`loglikelihood`); the prediction
is the choice of highest log-likelihood (``acc``), or of highest log-likelihood per character
of the choice's text (``acc_norm``, as lm-evaluation-harness normalises: its choices are
counted without the space that separates them from the context, which the loaders here put
at the start of each choice; `choice_length`). The context
and a choice are encoded together and split where the context's tokens end, so a choice
starting with a space tokenizes as it would in running text; whitespace ending the
context moves to the start of the choices.

The ``multiple-choice`` part reads questions from local ``.jsonl`` / ``.parquet`` files
with ``context``, ``choices`` (a list of strings) and ``label`` (the right choice's index):
``eval/<eval.multiple_choice.name>/{acc,acc_norm}``.

>>> Question("The sky is", (" blue", " green"), 0).choices[0]
' blue'
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from theseus.errors import BadInput
from theseus.train.evals.likelihood import loglikelihood
from theseus.train.evals.rows import load_rows
from theseus.train.evaluations import EvalContext, Evaluation, architecture_sizes, first_examples
from theseus.train.generate import tokenizer_of
from theseus.train.parts import part

__all__ = ["ChoiceResult", "MultipleChoice", "MultipleChoiceFiles", "MultipleChoiceSettings", "Question",
           "choice_length", "choice_pairs", "multiple_choice"]


@dataclasses.dataclass(frozen=True)
class Question:
    """One multiple-choice question: the ``context``, the ``choices`` (continuations of it, in order) and the
    ``label`` (index of the right one).

    >>> Question("2+2=", ("4", "5"), 0).label
    0
    """

    context: str
    choices: tuple[str, ...]
    label: int

    def __post_init__(self):
        object.__setattr__(self, "choices", tuple(self.choices))
        if len(self.choices) < 2:
            raise BadInput(f"a question needs at least two choices, got {len(self.choices)}: {self.context[:60]!r}")
        if isinstance(self.label, bool) or not isinstance(self.label, (int, np.integer)) \
                or not 0 <= self.label < len(self.choices):
            raise BadInput(f"label {self.label!r} is not an index of the {len(self.choices)} choices of "
                             f"{self.context[:60]!r}")
        object.__setattr__(self, "label", int(self.label))


@dataclasses.dataclass(frozen=True)
class ChoiceResult:
    """What `multiple_choice` returns: per question the ``loglikelihoods`` of its choices, the ``predictions``
    (raw) and ``predictions_norm`` (per character, `choice_length`), and the accuracies ``acc`` and ``acc_norm``.

    >>> ChoiceResult(((-1.0, -2.0),), (0,), (0,), 1.0, 1.0).acc
    1.0
    """

    loglikelihoods: tuple[tuple[float, ...], ...]
    predictions: tuple[int, ...]
    predictions_norm: tuple[int, ...]
    acc: float
    acc_norm: float

    @property
    def metrics(self) -> dict[str, float]:
        """``{"acc": ..., "acc_norm": ...}``."""
        return {"acc": self.acc, "acc_norm": self.acc_norm}


def choice_pairs(tokenizer: Any, context: str, choices: Sequence[str]) -> list[tuple[list[int], list[int]]]:
    """The ``(context tokens, choice tokens)`` of each choice: encoded together, split where the context ends.

    >>> from theseus.data.tokenizer import get_tokenizer
    >>> tok = get_tokenizer()
    >>> [(tok.decode(c), tok.decode(x)) for c, x in choice_pairs(tok, "The sky is ", ["blue", "red"])]
    [('The sky is', ' blue'), ('The sky is', ' red')]
    """
    stripped = context.rstrip()
    moved = context[len(stripped):]
    context_ids = list(tokenizer.encode(stripped)) if stripped else [int(tokenizer.eot)]
    pairs = []
    for choice in choices:
        whole = list(tokenizer.encode(stripped + moved + choice))
        if stripped and whole[:len(context_ids)] == context_ids:
            pairs.append((context_ids, whole[len(context_ids):]))
        else:  # the context's last token merged into the choice's first: encode the choice alone
            pairs.append((context_ids, list(tokenizer.encode(moved + choice))))
    return pairs


def choice_length(choice: str) -> int:
    """The length ``acc_norm`` divides a choice's log-likelihood by: its characters, less one leading space (the
    delimiter between context and choice, which lm-evaluation-harness's ``acc_norm`` does not count); at least 1.

    >>> choice_length(" blue"), choice_length("blue"), choice_length(" ")
    (4, 4, 1)
    """
    return max(len(choice[1:] if choice.startswith(" ") else choice), 1)


def multiple_choice(model: Any, params: Any, tokenizer: Any, questions: Sequence[Question], *,
                    batch_size: int = 16, sizes: tuple[int, int] | None = None) -> ChoiceResult:
    """Score every choice of every question and pick the likeliest (raw and per character, `choice_length`).
    ``sizes``: ``(block_size, vocab_size)`` of a model without a ``config``.

    >>> import jax, jax.numpy as jnp
    >>> from theseus.data.tokenizer import get_tokenizer
    >>> from theseus.model.config import GPTConfig
    >>> from theseus.model.gpt import GPT
    >>> model = GPT(GPTConfig(n_embd=32, n_head=4, n_layers=1, vocab_size=100288, block_size=16))
    >>> params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 16), jnp.int32))["params"]
    >>> result = multiple_choice(model, params, get_tokenizer(), [Question("The sky is", (" blue", " red"), 0)])
    >>> len(result.loglikelihoods[0]), result.acc in (0.0, 1.0)
    (2, True)
    """
    questions = list(questions)
    if not questions:
        raise BadInput("no questions: a multiple-choice evaluation needs at least one")
    pairs, owners = [], []
    for q, question in enumerate(questions):
        for pair in choice_pairs(tokenizer, question.context, question.choices):
            pairs.append(pair)
            owners.append(q)
    scored = iter(loglikelihood(model, params, pairs, batch_size=batch_size, sizes=sizes))
    lls = tuple(tuple(next(scored).logprob for _ in question.choices) for question in questions)
    raw = tuple(int(np.argmax(ll)) for ll in lls)
    norm = tuple(int(np.argmax([v / choice_length(c) for v, c in zip(ll, question.choices)]))
                 for ll, question in zip(lls, questions))
    labels = [question.label for question in questions]
    acc = float(np.mean([p == label for p, label in zip(raw, labels)]))
    acc_norm = float(np.mean([p == label for p, label in zip(norm, labels)]))
    return ChoiceResult(lls, raw, norm, acc, acc_norm)


class MultipleChoice(Evaluation):
    """Base of the multiple-choice evaluations: ``questions(config)`` scored by `multiple_choice`, the first
    ``eval.length`` of them, under ``eval/<key(config)>/{acc,acc_norm}`` (the part's name by default).

    >>> MultipleChoice.questions(None)
    Traceback (most recent call last):
    ...
    NotImplementedError: MultipleChoice must implement questions()
    """

    @classmethod
    def questions(cls, config: Any) -> list[Question]:
        """Every question of the task (override)."""
        raise NotImplementedError(f"{cls.__name__} must implement questions()")

    @classmethod
    def key(cls, config: Any) -> str:
        """The ``<name>`` of the ``eval/<name>/...`` keys: the part's name."""
        return cls.name

    @classmethod
    def run(cls, context: EvalContext) -> dict[str, float]:
        """``acc`` and ``acc_norm`` of the current parameters on the first ``eval.length`` questions."""
        questions = first_examples(cls.questions(context.config), context.config)
        tokenizer = tokenizer_of(context.config, root=context.root)
        result = multiple_choice(context.model, context.params, tokenizer, questions,
                                 sizes=architecture_sizes(context.config))
        return {f"eval/{cls.key(context.config)}/{metric}": value for metric, value in result.metrics.items()}


@dataclasses.dataclass
class MultipleChoiceSettings:
    """``eval.multiple_choice``: the questions' files (``path``: ``.jsonl`` / ``.parquet`` or a folder of them)
    and the ``name`` their results are keyed under.

    >>> MultipleChoiceSettings().name
    'multiple-choice'
    """

    path: str = ""
    name: str = "multiple-choice"


@dataclasses.dataclass
class MultipleChoiceSection:
    """What the ``multiple-choice`` part adds to ``eval``.

    >>> MultipleChoiceSection().multiple_choice.path
    ''
    """

    multiple_choice: MultipleChoiceSettings = dataclasses.field(default_factory=MultipleChoiceSettings)


@part("evaluation", "multiple-choice", "Questions from files (context, choices, label) scored by log-likelihood: "
                                       "eval/<name>/{acc,acc_norm}.")
class MultipleChoiceFiles(MultipleChoice):
    """The questions of ``eval.multiple_choice.path``: rows with ``context``, ``choices`` and ``label``.

    >>> import json, tempfile, os
    >>> from omegaconf import OmegaConf
    >>> folder = tempfile.mkdtemp()
    >>> with open(os.path.join(folder, "q.jsonl"), "w") as f:
    ...     _ = f.write(json.dumps({"context": "1+1=", "choices": ["2", "3"], "label": 0}) + "\\n")
    >>> MultipleChoiceFiles.questions(OmegaConf.create({"eval": {"multiple_choice": {"path": folder}}}))
    [Question(context='1+1=', choices=('2', '3'), label=0)]
    """

    section = "eval"
    Config = MultipleChoiceSection

    @classmethod
    def check(cls, config: Any) -> None:
        """A path is given."""
        if not config.eval.multiple_choice.path:
            raise BadInput("eval.multiple_choice.path is empty: name the .jsonl / .parquet files of the questions")

    @classmethod
    def key(cls, config: Any) -> str:
        """``eval.multiple_choice.name``."""
        return str(config.eval.multiple_choice.name)

    @classmethod
    def questions(cls, config: Any) -> list[Question]:
        """Every row of the files as a `Question`."""
        cls.check(config)
        rows = load_rows(config.eval.multiple_choice.path, split="")
        try:
            return [Question(str(r["context"]), tuple(str(c) for c in r["choices"]), int(r["label"])) for r in rows]
        except KeyError as e:
            raise BadInput(f"{config.eval.multiple_choice.path}: a row has no {e.args[0]!r} column (rows need "
                             "context, choices and label)") from None
