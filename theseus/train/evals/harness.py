"""lm-evaluation-harness on a theseus model: `TheseusLM`, an ``lm_eval`` model, and `harness` to run its tasks.

Any lm-eval task (its own or one of yours, a YAML file in a folder given as
``include_path``) runs on a model and its parameters: ``loglikelihood`` scores with
`theseus.train.evals.likelihood.loglikelihood` (batched, jitted), ``loglikelihood_rolling``
with its rolling windows, and ``generate_until`` continues with
`theseus.train.generate.generate` (the key/value cache), cut at the request's ``until``
strings and ``max_gen_toks`` new tokens. Texts are encoded the way lm-eval's own models
encode them (`lm_eval.api.model.TemplateLM`: the context's trailing spaces move to the
continuation; an empty context is the end-of-text token).

lm-eval is in the optional ``eval`` dependency group (``uv sync --group eval``); without it,
importing this module raises an ImportError that names that command. With the harness's own
API::

    import lm_eval
    results = lm_eval.simple_evaluate(model=TheseusLM.from_trainer(trainer), tasks=["hellaswag"])

or `harness`, which returns the scores as ``eval/<task>/<metric>`` keys (what ``theseus eval
--harness`` records on a node).

>>> from theseus.train.example import tiny_text_model
>>> lm = TheseusLM(*tiny_text_model())
>>> [(logprob, greedy)] = lm.loglikelihood([request("loglikelihood", ("1+2=", "3"))])
>>> logprob < 0, isinstance(greedy, bool)
(True, True)
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from loguru import logger

try:
    import lm_eval
    from lm_eval.api.instance import Instance
    from lm_eval.api.model import TemplateLM
    from lm_eval.models.utils import normalize_gen_kwargs
    from lm_eval.tasks import TaskManager
except ImportError as e:  # the optional group is not installed: say how to install it
    raise ImportError("the lm-evaluation-harness adapter needs lm-eval, in theseus's optional `eval` group: "
                      "run `uv sync --group eval` (or `pip install 'lm-eval>=0.4,<0.5'`)") from e

from theseus.errors import BadInput, MissingFile
from theseus.train.evals.likelihood import loglikelihood as score_pairs
from theseus.train.evals.likelihood import model_sizes, rolling_loglikelihood
from theseus.train.evaluations import architecture_sizes
from theseus.train.generate import generate

__all__ = ["TheseusLM", "harness", "harness_keys", "harness_tasks", "request"]

#: lm-eval's generation options that `TheseusLM.generate_until` honours (after lm-eval's normalisation)
GENERATION_OPTIONS = ("until", "max_gen_toks", "do_sample", "temperature", "top_k", "top_p")
_KEY_UNSAFE = re.compile(r"[^A-Za-z0-9_\-./:@]")


def request(kind: str, args: tuple, index: int = 0) -> Instance:
    """An lm-eval request of ``kind`` (``"loglikelihood"``, ``"loglikelihood_rolling"``, ``"generate_until"``) with
    ``args``, as lm-eval's tasks build them: for calling a `TheseusLM` directly.

    >>> request("loglikelihood", ("1+2=", "3")).args
    ('1+2=', '3')
    """
    return Instance(request_type=kind, doc={}, arguments=args, idx=index)


class TheseusLM(TemplateLM):
    """An lm-eval model (``lm_eval.api.model.LM``) over a theseus ``model`` (a flax module with a ``config`` of
    ``block_size`` and ``vocab_size``), its ``params`` and the run's ``tokenizer``.

    ``batch_size`` rows are scored (or generated) per jitted call; ``max_gen_toks`` is the
    new-token budget of a generation request that names none; ``seed`` the draws of
    requests that sample (``do_sample``); ``sizes``: ``(block_size, vocab_size)`` of a model
    without a ``config``. A context longer than the block keeps its last tokens, as lm-eval's
    own models do.

    >>> from theseus.train.example import tiny_text_model
    >>> lm = TheseusLM(*tiny_text_model(), batch_size=4)
    >>> [text] = lm.generate_until([request("generate_until", ("1+2=", {"until": ["\\n"], "max_gen_toks": 5}))])
    >>> len(text) <= 5 and "\\n" not in text
    True
    >>> [total] = lm.loglikelihood_rolling([request("loglikelihood_rolling", ("12+34=46",))])
    >>> total < 0
    True
    """

    def __init__(self, model: Any, params: Any, tokenizer: Any, *, batch_size: int = 16, max_gen_toks: int = 256,
                 seed: int = 0, sizes: tuple[int, int] | None = None):
        super().__init__()
        for name, value in (("batch_size", batch_size), ("max_gen_toks", max_gen_toks)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise BadInput(f"{name} must be a positive integer, got {value!r}")
        self.model, self.params, self.encoder = model, params, tokenizer
        self.batch_size, self.max_gen_toks, self.seed = batch_size, max_gen_toks, int(seed)
        self.sizes = model_sizes(model, *(sizes or (None, None)))  # a model without a config: give its sizes
        self.block_size = self.sizes[0]

    @classmethod
    def from_trainer(cls, trainer: Any, **options: Any) -> TheseusLM:
        """The adapter of a trainer's model, current parameters and tokenizer (``options``: as the constructor's).

        >>> from theseus.train.example import tiny_example
        >>> from theseus.train.trainer import Trainer
        >>> root, config = tiny_example()
        >>> lm = TheseusLM.from_trainer(Trainer(config, root, peak_flops=1e12, progress=False), batch_size=2)
        >>> lm.block_size, lm.batch_size
        (16, 2)
        """
        options.setdefault("sizes", architecture_sizes(trainer.config))
        return cls(trainer.model, trainer.params, trainer.tokenizer, **options)

    @property
    def eot_token_id(self) -> int:
        """The tokenizer's end-of-text token: the context of a continuation scored after nothing.

        >>> from theseus.train.example import tiny_text_model
        >>> TheseusLM(*tiny_text_model()).eot_token_id
        0
        """
        return int(self.encoder.eot)

    @property
    def tokenizer_name(self) -> str:
        """The tokenizer's name (lm-eval keys its request cache with it).

        >>> from theseus.train.example import tiny_text_model
        >>> TheseusLM(*tiny_text_model()).tokenizer_name
        'characters'
        """
        return str(getattr(self.encoder, "name", type(self.encoder).__name__))

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs: Any) -> list[int]:
        """The token ids of ``string`` (theseus's tokenizers add no special tokens).

        >>> from theseus.train.example import tiny_text_model
        >>> TheseusLM(*tiny_text_model()).tok_encode("12")
        [2, 3]
        """
        return list(self.encoder.encode(string))

    def _loglikelihood_tokens(self, requests: list[tuple[tuple[str, str], list[int], list[int]]],
                              disable_tqdm: bool = False, **kwargs: Any) -> list[tuple[float, bool]]:
        """Score the encoded requests (lm-eval's ``TemplateLM.loglikelihood`` encodes them)."""
        pairs = [(context, continuation) for _, context, continuation in requests]
        scored = score_pairs(self.model, self.params, pairs, batch_size=self.batch_size, sizes=self.sizes)
        out = [(s.logprob, s.greedy) for s in scored]
        for (strings, _, _), result in zip(requests, out):
            self.cache_hook.add_partial("loglikelihood", strings, result)
        return out

    def loglikelihood_rolling(self, requests: list[Instance], disable_tqdm: bool = False) -> list[float]:
        """Per request ``(text,)``: the log-likelihood of the whole text, every token predicted once from what
        precedes it in windows of the block size, the first from the end-of-text token (an empty text: 0).

        >>> from theseus.train.example import tiny_text_model
        >>> lm = TheseusLM(*tiny_text_model(block_size=4))
        >>> [long, empty] = lm.loglikelihood_rolling([request("loglikelihood_rolling", (t,)) for t in ("1+2=3 4", "")])
        >>> long < 0, empty
        (True, 0.0)
        """
        texts = [req.args[0] for req in requests]
        documents = [self.tok_encode(text) for text in texts]
        present = [i for i, doc in enumerate(documents) if doc]
        scored = rolling_loglikelihood(self.model, self.params, [documents[i] for i in present],
                                       prefix=self.prefix_token_id, batch_size=self.batch_size, sizes=self.sizes)
        out = [0.0] * len(texts)
        for i, s in zip(present, scored):
            out[i] = s.logprob
        for text, result in zip(texts, out):
            self.cache_hook.add_partial("loglikelihood_rolling", (text,), result)
        return out

    def generate_until(self, requests: list[Instance], disable_tqdm: bool = False) -> list[str]:
        """Per request ``(context, options)``: the continuation of the context, ending at the end-of-text token,
        before the first of the ``until`` strings, or after ``max_gen_toks`` new tokens (at most the block size
        less one: a longer budget is cut to it, with a warning). Greedy unless ``do_sample`` (then
        ``temperature``, ``top_k`` and ``top_p``); another option is a ValueError.

        >>> from theseus.train.example import tiny_text_model
        >>> lm = TheseusLM(*tiny_text_model())
        >>> lm.generate_until([request("generate_until", ("1+2=", {"until": ["\\n"], "num_beams": 4}))])
        Traceback (most recent call last):
        ...
        theseus.errors.BadInput: generation option num_beams is not implemented by the theseus adapter (it honours until, max_gen_toks, do_sample, temperature, top_k, top_p)
        """  # noqa: E501 - the doctest shows the message whole
        groups: dict[str, list[int]] = {}
        settings: dict[str, dict[str, Any]] = {}
        for i, req in enumerate(requests):
            options = self._options(req.args[1])
            key = json.dumps(options, sort_keys=True)
            groups.setdefault(key, []).append(i)
            settings[key] = options
        out: list[str] = [""] * len(requests)
        for key, members in groups.items():
            options = settings[key]
            room = self.block_size - options["max_new_tokens"]
            members = sorted(members, key=lambda i: len(requests[i].args[0]))  # similar lengths share a batch
            for start in range(0, len(members), self.batch_size):
                chunk = members[start:start + self.batch_size]
                prompts = [self._fit(requests[i].args[0], room) for i in chunk]
                samples = generate(self.model, self.params, self.encoder, prompts, seed=self.seed, **options)
                for i, sample in zip(chunk, samples):
                    out[i] = sample.text
                    self.cache_hook.add_partial("generate_until", requests[i].args, sample.text)
        return out

    def _options(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """lm-eval's generation options as `theseus.train.generate.generate`'s keyword arguments."""
        options = dict(normalize_gen_kwargs(dict(given), self.max_gen_toks))
        unknown = [k for k in options if k not in GENERATION_OPTIONS]
        if unknown:
            raise BadInput(f"generation option {', '.join(unknown)} is not implemented by the theseus adapter "
                             f"(it honours {', '.join(GENERATION_OPTIONS)})")
        budget = int(options["max_gen_toks"])
        if budget > self.block_size - 1:
            logger.warning(f"max_gen_toks {budget} is more than the model's block_size ({self.block_size}) leaves "
                             f"after one context token: generating {self.block_size - 1} new tokens")
            budget = self.block_size - 1
        sampled = bool(options["do_sample"])
        return {"max_new_tokens": budget, "stop": list(options["until"]),
                "temperature": float(options.get("temperature", 1.0)) if sampled else 0.0,
                "top_k": int(options.get("top_k") or 0) if sampled else 0,
                "top_p": float(options.get("top_p") or 1.0) if sampled else 1.0}

    def _fit(self, context: str, room: int) -> str:
        """``context``, or its last tokens' text where it holds more than ``room`` tokens (as lm-eval's models cut)."""
        ids = self.tok_encode(context)
        keep = min(len(ids), room)
        text = self.encoder.decode(ids[-keep:]) if keep < len(ids) else context
        while keep > 1 and len(self.tok_encode(text)) > room:  # a cut inside a character re-encodes longer
            keep -= 1
            text = self.encoder.decode(ids[-keep:])
        return text


def harness_keys(results: Mapping[str, Any]) -> dict[str, float]:
    """``simple_evaluate``'s results as theseus keys: ``eval/<task>/<metric>`` (``eval/<task>/<metric>/<filter>``
    under a filter other than lm-eval's ``none``); values that are not numbers (``"N/A"``) are left out.

    >>> harness_keys({"results": {"sums": {"alias": "sums", "acc,none": 0.5, "acc_stderr,none": "N/A",
    ...                                    "exact_match,strict-match": 1.0}}})
    {'eval/sums/acc': 0.5, 'eval/sums/exact_match/strict-match': 1.0}
    """
    out: dict[str, float] = {}
    for task, values in results["results"].items():
        for name, value in values.items():
            if "," not in name or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            metric, filtered = name.split(",", 1)
            parts = [task, metric] if filtered == "none" else [task, metric, filtered]
            out["/".join(["eval", *(_KEY_UNSAFE.sub("_", p) for p in parts)])] = float(value)
    return out


def harness_tasks(tasks: str | Sequence[str], include_path: str | Sequence[str] | None = None) -> TaskManager:
    """lm-eval's task index over its own tasks and the YAML tasks under ``include_path``, once every name of
    ``tasks`` is checked to be one of them: an unknown name is a ValueError naming close ones.

    >>> harness_tasks([])
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: tasks must be a non-empty list of lm-eval task names, got []
    """
    names = [tasks] if isinstance(tasks, str) else list(tasks)
    if not names or not all(isinstance(t, str) and t for t in names):
        raise BadInput(f"tasks must be a non-empty list of lm-eval task names, got {names!r}")
    paths = [include_path] if isinstance(include_path, str) else list(include_path or [])
    missing = [p for p in paths if not os.path.isdir(p)]
    if missing:
        raise MissingFile(f"include path {missing[0]} is not a folder (of lm-eval task YAML files)")
    manager = TaskManager(include_path=paths or None)
    known = set(manager.all_tasks)
    unknown = [t for t in names if t not in known]
    if unknown:
        close = sorted({c for t in unknown for c in difflib.get_close_matches(t, known, n=3)})
        hint = f" (close: {', '.join(close)})" if close else ""
        raise BadInput(f"unknown lm-eval task {', '.join(unknown)}{hint}: `lm-eval ls tasks` lists its own; a "
                         "task of yours is a YAML file in a folder given as include_path")
    return manager


def harness(lm: TheseusLM, tasks: Sequence[str], *, include_path: str | Sequence[str] | None = None,
            limit: int | None = None, manager: TaskManager | None = None) -> tuple[dict[str, float], dict[str, Any]]:
    """Run lm-eval ``tasks`` (names of its own tasks, or of YAML tasks under ``include_path``) on ``lm``, each
    on its first ``limit`` documents (None: all): ``(keys, results)``, the scores as `harness_keys` and
    ``simple_evaluate``'s whole result. The names are checked by `harness_tasks` (or were, into ``manager``).

    >>> from theseus.train.example import tiny_text_model
    >>> harness(TheseusLM(*tiny_text_model()), ["hellaswag"], limit=0)
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: limit must be a positive integer (documents per task) or None, got 0
    """
    tasks = [tasks] if isinstance(tasks, str) else list(tasks)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise BadInput(f"limit must be a positive integer (documents per task) or None, got {limit!r}")
    manager = manager or harness_tasks(tasks, include_path)
    results = lm_eval.simple_evaluate(model=lm, tasks=tasks, limit=limit, task_manager=manager, log_samples=False)
    return harness_keys(results), results
