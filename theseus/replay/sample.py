"""Sample from any checkpoint: ``theseus sample ROOT NODE_ID|NONCE "prompt"``.

The trainer is restored by `theseus.replay.restore.restored_trainer` (a nonce means that
run's last committed checkpoint; the run's own job class; nothing written to the root).

>>> import tempfile
>>> sample(tempfile.mkdtemp(), "abc123", "hello")
Traceback (most recent call last):
...
theseus.errors.BadInput: run abc123 has no committed checkpoint in ...
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax

from theseus.data.chat import chat_prompt, load_template
from theseus.errors import BadInput
from theseus.replay.restore import checkpoint_for, restored_trainer
from theseus.store import Node, Store
from theseus.train.generate import Decoding, Sample

__all__ = ["checkpoint_for", "restored_trainer", "sample"]

#: new tokens of a sample when none are asked for (fewer when the model's block size is shorter)
DEFAULT_NEW_TOKENS = 64
#: the most samples of one call: they are decoded as one batch, each row holding the whole vocabulary's logits
MAX_SAMPLES = 1024


def sample(store: Store | str, target: str | Node, prompt: str, n: int = 1, *, chat: bool = False, log: Any = None,
           **options: Any) -> tuple[Node, list[Sample]]:
    """``n`` samples continuing ``prompt`` from the checkpoint of ``target`` (node id or nonce) and that node.

    ``options``: the fields of `theseus.train.generate.Decoding` (``temperature``, ``top_k``, ``top_p``,
    ``seed``, ``stop``, ``max_new_tokens``, ``cache``). ``max_new_tokens`` None or left out:
    `DEFAULT_NEW_TOKENS`, or as many as the model's block size leaves after the prompt. Sample i draws
    with the keys of (``seed``, i). ``n`` is at most `MAX_SAMPLES`;
    a batch too large for the device's memory all the same is a MemoryError naming ``n`` and
    ``max_new_tokens``. ``chat``: ``prompt`` is a user's message, rendered with the tokenizer's chat
    template (`theseus.data.chat.chat_prompt`) to ask for the assistant's answer, which ends at the
    template's end-of-turn marker.

    >>> import tempfile
    >>> sample(tempfile.mkdtemp(), "abc123", "")
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: the prompt is empty: give some text to continue
    """
    if not isinstance(prompt, str) or not prompt:
        raise BadInput("the prompt is empty: give some text to continue")
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_SAMPLES:
        raise BadInput(f"the number of samples must be an integer in 1..{MAX_SAMPLES} (they are decoded as one "
                         f"batch), got {n!r}")
    decoding = Decoding(**options)  # an unknown setting fails before the checkpoint loads
    store = store if isinstance(store, Store) else Store(store)
    node, _ = checkpoint_for(store, target)
    trainer = restored_trainer(store, node, log=log)
    try:
        if chat:
            prompt, markers = chat_prompt(load_template(trainer.tokenizer), prompt)
            stop = decoding.stop
            stops = [*([stop] if isinstance(stop, str) else stop or []), *markers]
            decoding = dataclasses.replace(decoding, stop=stops)
        if options.get("max_new_tokens") is None:
            room = trainer.block_size - len(trainer.tokenizer.encode(prompt))
            new_tokens = min(DEFAULT_NEW_TOKENS, room) if room > 0 else DEFAULT_NEW_TOKENS  # none left: its error
            decoding = dataclasses.replace(decoding, max_new_tokens=new_tokens)
        samples = trainer.generate([prompt] * n, **dataclasses.asdict(decoding))
    except jax.errors.JaxRuntimeError as e:
        if "RESOURCE_EXHAUSTED" not in str(e):
            raise
        raise MemoryError(f"out of memory decoding {n} samples of {decoding.max_new_tokens} new tokens as one "
                          "batch: ask for fewer samples (n) or new tokens (max_new_tokens)") from None
    finally:
        trainer.close()
    return node, samples
