"""Exact match after answer extraction: generate an answer per question, extract it, compare (the shape of GSM8K).

A task is a list of `Example` (a prompt and its reference answer). The model continues
each prompt greedily (``eval.exact_match.max_new_tokens`` new tokens, ending at the
end-of-text token or a newline); `extract_answer` takes what follows the last ``####``
(GSM8K's answer marker) or else the last number of the continuation; a prediction
counts when it equals the reference after `normalize` (no commas, ``$`` or trailing
zeros). ``eval.length`` caps the examples (-1: all of the task's).

The built-in task ``addition`` asks the sums of `theseus.data.sources.addition` in the
format the ``data/tokenize/addition`` dataset trains on (``"63+4="``, answer ``"67"``),
drawn with their own seed (``eval.exact_match.addition``). A job lists the part to get
``eval/<task>/exact_match`` on its validation steps::

    class Sums(Pretrain):
        EVALUATION = [ValidationLoss, ExactMatch]

>>> extract_answer("so she has 3 + 4 = 7 apples"), extract_answer("... #### 1,234"), extract_answer("none")
('7', '1234', None)
>>> score(["7", None, "12"], ["7", "8", "12.0"])
0.6666666666666666
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from typing import Any

from theseus.data import sources
from theseus.errors import BadInput
from theseus.train.evaluations import EvalContext, Evaluation, first_examples
from theseus.train.generate import generate, tokenizer_of
from theseus.train.parts import part

__all__ = ["TASKS", "Addition", "AdditionTask", "Example", "ExactMatch", "ExactMatchResult", "ExactMatchSettings",
           "exact_match", "extract_answer", "normalize", "score", "task"]

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
#: GSM8K's marker: the answer follows it
ANSWER_MARKER = "####"


@dataclasses.dataclass(frozen=True)
class Example:
    """One question of a task: the ``prompt`` the model continues and the reference ``answer``.

    >>> Example("2+2=", "4").answer
    '4'
    """

    prompt: str
    answer: str


def normalize(answer: str) -> str:
    """An answer compared as text: stripped, without commas, ``$`` or a trailing period; a decimal without
    trailing zeros (``"12.50"`` -> ``"12.5"``, ``"12.0"`` -> ``"12"``).

    >>> normalize(" $1,200.00. "), normalize("-3.10")
    ('1200', '-3.1')
    """
    text = answer.strip().replace(",", "").replace("$", "").rstrip(".").strip()
    if re.fullmatch(r"-?\d+\.\d+", text):
        text = text.rstrip("0").rstrip(".")
    return text


def extract_answer(text: str) -> str | None:
    """The answer in a continuation: the first line after the last ``####`` if there is one, else the last
    number; None when there is none. Normalized (`normalize`).

    >>> extract_answer("67"), extract_answer("48/2 = 24 ... #### 24\\nnext"), extract_answer("#### ")
    ('67', '24', None)
    """
    if ANSWER_MARKER in text:
        lines = text.rsplit(ANSWER_MARKER, 1)[1].strip().splitlines()
        found = normalize(lines[0]) if lines else ""
        return found or None
    numbers = _NUMBER.findall(text)
    return normalize(numbers[-1]) if numbers else None


def score(predictions: Sequence[str | None], answers: Sequence[str]) -> float:
    """The fraction of predictions equal to their reference after `normalize` (None never is).

    >>> score(["4", "5"], ["4", "6"])
    0.5
    """
    if len(predictions) != len(answers):
        raise BadInput(f"{len(predictions)} predictions for {len(answers)} answers")
    if not answers:
        raise BadInput("no examples to score")
    hits = sum(p is not None and normalize(p) == normalize(a) for p, a in zip(predictions, answers))
    return hits / len(answers)


@dataclasses.dataclass(frozen=True)
class ExactMatchResult:
    """What `exact_match` returns: the ``examples``, the model's ``continuations``, the extracted
    ``predictions`` (None: no answer found) and the ``score``.

    >>> ExactMatchResult((Example("1+1=", "2"),), ("2",), ("2",), 1.0).score
    1.0
    """

    examples: tuple[Example, ...]
    continuations: tuple[str, ...]
    predictions: tuple[str | None, ...]
    score: float


def exact_match(model: Any, params: Any, tokenizer: Any, examples: Sequence[Example], *, max_new_tokens: int = 8,
                batch_size: int = 64, stop: Sequence[str] = ("\n",)) -> ExactMatchResult:
    """Continue each example's prompt greedily (``batch_size`` prompts per decoding loop), extract the answers
    and score them against the references.

    >>> import jax, jax.numpy as jnp
    >>> from theseus.data.tokenizer import get_tokenizer
    >>> from theseus.model.config import GPTConfig
    >>> from theseus.model.gpt import GPT
    >>> model = GPT(GPTConfig(n_embd=32, n_head=4, n_layers=1, vocab_size=128, block_size=16))
    >>> params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 16), jnp.int32))["params"]
    >>> result = exact_match(model, params, get_tokenizer(), [Example("1+2=", "3")], max_new_tokens=3)
    >>> len(result.continuations), 0.0 <= result.score <= 1.0
    (1, True)
    """
    examples = tuple(examples)
    if not examples:
        raise BadInput("no examples: an exact-match evaluation needs at least one")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise BadInput(f"batch_size must be a positive integer, got {batch_size!r}")
    continuations: list[str] = []
    for start in range(0, len(examples), batch_size):
        chunk = [e.prompt for e in examples[start:start + batch_size]]
        samples = generate(model, params, tokenizer, chunk, max_new_tokens=max_new_tokens, temperature=0.0,
                           stop=list(stop))
        continuations += [s.text for s in samples]
    predictions = tuple(extract_answer(text) for text in continuations)
    return ExactMatchResult(examples, tuple(continuations), predictions,
                            score(predictions, [e.answer for e in examples]))


#: tasks by name: a function of the ``eval.exact_match`` section returning the task's examples
TASKS: dict[str, Callable[[Any], list[Example]]] = {}


def task(name: str) -> Callable[[Callable[[Any], list[Example]]], Callable[[Any], list[Example]]]:
    """Decorator: register a function ``settings -> [Example]`` as the exact-match task ``name``.

    >>> @task("doc-doubling")
    ... def doubling(settings):
    ...     return [Example(f"2*{i}=", str(2 * i)) for i in range(3)]
    >>> TASKS["doc-doubling"](None)[1]
    Example(prompt='2*1=', answer='2')
    """
    def register(fn: Callable[[Any], list[Example]]) -> Callable[[Any], list[Example]]:
        prior = TASKS.get(name)
        if prior is not None and (prior.__module__, prior.__qualname__) != (fn.__module__, fn.__qualname__):
            raise BadInput(f"exact-match task {name!r} is already registered by "
                             f"{prior.__module__}.{prior.__qualname__}")
        TASKS[name] = fn
        return fn

    return register


@dataclasses.dataclass
class AdditionTask:
    """``eval.exact_match.addition``: how many sums, their operands' digits, and the seed they are drawn with.

    >>> AdditionTask().examples, AdditionTask().max_digits
    (256, 3)
    """

    examples: int = 256
    max_digits: int = 3
    seed: int = 1


@task("addition")
def addition(settings: Any) -> list[Example]:
    """The sums ``"a+b="`` of `theseus.data.sources.addition` with their answers, as the addition dataset
    writes them.

    >>> from omegaconf import OmegaConf
    >>> addition(OmegaConf.structured(ExactMatchSettings(addition=AdditionTask(examples=2, max_digits=2))))
    [Example(prompt='9+4=', answer='13'), Example(prompt='7+70=', answer='77')]
    """
    config = settings.addition
    return [Example(prompt, answer) for prompt, answer in
            sources.addition(int(config.examples), seed=int(config.seed), max_digits=int(config.max_digits))]


@dataclasses.dataclass
class ExactMatchSettings:
    """``eval.exact_match``: the ``task`` (a name of `TASKS`), the new tokens per answer, the prompts per
    decoding loop and the ``addition`` task's settings.

    >>> ExactMatchSettings().task, ExactMatchSettings().max_new_tokens
    ('addition', 8)
    """

    task: str = "addition"
    max_new_tokens: int = 8
    batch_size: int = 64
    addition: AdditionTask = dataclasses.field(default_factory=AdditionTask)


@dataclasses.dataclass
class ExactMatchSection:
    """What the part adds to the ``eval`` section: ``exact_match``.

    >>> ExactMatchSection().exact_match.task
    'addition'
    """

    exact_match: ExactMatchSettings = dataclasses.field(default_factory=ExactMatchSettings)


def _positive(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadInput(f"{name} must be a positive integer, got {value!r}")


@part("evaluation", "exact-match", "Greedy answers, extracted (after '####' or the last number) and compared: "
                                   "eval/<task>/exact_match; addition built in.")
class ExactMatch(Evaluation):
    """``eval/<task>/exact_match`` of the current parameters on ``eval.exact_match.task``'s first
    ``eval.length`` examples (-1: all), through the job's tokenizer.

    >>> from omegaconf import OmegaConf
    >>> config = OmegaConf.create({"eval": {"length": -1, "exact_match": {"task": "nope"}}})
    >>> ExactMatch.check(config)
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: eval.exact_match.task 'nope' is not a task; known: addition...
    """

    section = "eval"
    Config = ExactMatchSection

    @classmethod
    def check(cls, config: Any) -> None:
        """A known task; positive sizes."""
        settings = config.eval.exact_match
        if cls.task_name(config) not in TASKS:
            raise BadInput(f"eval.exact_match.task {settings.task!r} is not a task; "
                             f"known: {', '.join(sorted(TASKS))}")
        _positive("eval.exact_match.max_new_tokens", settings.max_new_tokens)
        _positive("eval.exact_match.batch_size", settings.batch_size)
        if cls.task_name(config) == "addition":
            _positive("eval.exact_match.addition.examples", settings.addition.examples)
            _positive("eval.exact_match.addition.max_digits", settings.addition.max_digits)

    @classmethod
    def examples(cls, config: Any) -> list[Example]:
        """The task's examples, the first ``eval.length`` of them (-1: all).

        >>> from omegaconf import OmegaConf
        >>> settings = OmegaConf.structured(ExactMatchSettings())
        >>> config = OmegaConf.create({"eval": {"length": 3, "exact_match": settings}})
        >>> len(ExactMatch.examples(config)), ExactMatch.examples(config)[0].prompt
        (3, '...+...=')
        """
        cls.check(config)
        return first_examples(TASKS[cls.task_name(config)](config.eval.exact_match), config)

    @classmethod
    def task_name(cls, config: Any) -> str:
        """The task this part scores: ``eval.exact_match.task``.

        >>> from omegaconf import OmegaConf
        >>> ExactMatch.task_name(OmegaConf.create({"eval": {"exact_match": {"task": "gsm8k"}}}))
        'gsm8k'
        """
        return str(config.eval.exact_match.task)

    @classmethod
    def run(cls, context: EvalContext) -> dict[str, float]:
        """Generate, extract and score the task's examples with the current parameters."""
        settings = context.config.eval.exact_match
        tokenizer = tokenizer_of(context.config, root=context.root)
        result = exact_match(context.model, context.params, tokenizer, cls.examples(context.config),
                             max_new_tokens=int(settings.max_new_tokens), batch_size=int(settings.batch_size))
        return {f"eval/{cls.task_name(context.config)}/exact_match": result.score}


@part("evaluation", "addition", "Exact match on the addition dataset's sums (no network): "
                                "eval/addition/exact_match.")
class Addition(ExactMatch):
    """`ExactMatch` on the ``addition`` task whatever ``eval.exact_match.task`` says (its other settings apply).

    >>> from omegaconf import OmegaConf
    >>> Addition.task_name(OmegaConf.create({"eval": {"exact_match": {"task": "other"}}}))
    'addition'
    """

    @classmethod
    def task_name(cls, config: Any) -> str:
        """Always ``addition``."""
        return "addition"
