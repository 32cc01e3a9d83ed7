"""Chat conversations as tokens with an assistant-only loss mask, rendered with the tokenizer's own chat template.

A conversation is ``[{"role": ..., "content": ...}, ...]``. It is rendered with the
tokenizer's ``chat_template`` (``chat_template.jinja`` or ``tokenizer_config.json``
of its folder: an imported model's keeps them), in a jinja2 sandbox set up as
``transformers`` sets its own, so the text is the one ``apply_chat_template`` gives
(without importing torch or transformers); a tiktoken tokenizer uses ChatML.

The mask is found by rendering prefixes, so it is right for templates without
``{% generation %}`` tags: assistant turn i spans from the end of
``messages[:i]`` rendered with the generation prompt to the end of ``messages[:i+1]``,
less the whitespace that separates turns, so the content and the end-of-turn marker
the template closes the turn with (``<|eot_id|>``, ``<|im_end|>``,
``<end_of_turn>``) are trained on, the next turn's header is not. A template
that renders a prefix differently from the start of the whole conversation, a
render error, or a conversation with nothing to train on is a ``BadInput`` naming
the row: never a mask of all ones.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import json
import os
from collections.abc import Sequence

import numpy as np

from theseus.errors import BadInput

#: ChatML, the template of a tokenizer that has none (tiktoken encodings): its markers are plain text there
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n' }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
#: the special tokens transformers hands a template by name (its ``special_tokens_map``)
SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


@functools.lru_cache(maxsize=8)
def _compile(source: str):
    """The template compiled in a sandbox with the globals and filters transformers gives templates."""
    # lazily: jinja2 is needed by chat data only
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        # not jinja's own tojson, which escapes HTML characters: transformers' filter, for the same text
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals.update(raise_exception=raise_exception, strftime_now=strftime_now)
    try:
        return env.from_string(source)
    except jinja2.TemplateSyntaxError as e:
        raise BadInput(f"the chat template does not parse: {e} (line {e.lineno})") from None


@dataclasses.dataclass(frozen=True)
class ChatTemplate:
    """A chat template (jinja source), the special tokens it may name (``bos_token``...) and where it came from.

    >>> t = ChatTemplate(CHATML, name="chatml")
    >>> t.render([{"role": "user", "content": "hi"}], add_generation_prompt=True)
    '<|im_start|>user\\nhi<|im_end|>\\n<|im_start|>assistant\\n'
    """

    source: str
    special_tokens: tuple[tuple[str, str], ...] = ()
    name: str = ""

    def render(self, messages: Sequence[dict], add_generation_prompt: bool = False) -> str:
        """The text of ``messages``; a ``BadInput`` where the template refuses them (``raise_exception``...).

        >>> ChatTemplate("{{ bos_token }}{{ messages[0].content }}", (("bos_token", "<s>"),)).render(
        ...     [{"role": "user", "content": "x"}])
        '<s>x'
        """
        template = _compile(self.source)
        try:
            return template.render(messages=list(messages), add_generation_prompt=add_generation_prompt,
                                   **dict(self.special_tokens))
        except BadInput:
            raise
        except Exception as e:  # a template error, or an error of the data it reads (a missing key...)
            raise BadInput(f"the chat template {self.name!r} cannot render it: {type(e).__name__}: {e}") from None


def _token_text(value) -> str | None:
    if isinstance(value, dict):  # an AddedToken as tokenizer_config.json saves it
        value = value.get("content")
    return value if isinstance(value, str) else None


def _read_json(path: str) -> dict:
    if not os.path.isfile(path):
        return {}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _folder_template(folder: str) -> tuple[str | None, tuple[tuple[str, str], ...]]:
    """The chat template of a Hugging Face tokenizer folder (None where it has none) and its special tokens."""
    config = _read_json(os.path.join(folder, "tokenizer_config.json"))
    specials = {**_read_json(os.path.join(folder, "special_tokens_map.json")), **config}
    tokens = tuple((key, text) for key in SPECIAL_TOKENS if (text := _token_text(specials.get(key))) is not None)
    jinja = os.path.join(folder, "chat_template.jinja")
    if os.path.isfile(jinja):
        with open(jinja, encoding="utf-8") as f:
            return f.read(), tokens
    source = config.get("chat_template")
    if isinstance(source, list):  # named templates: the default one is the chat template
        source = {t.get("name"): t.get("template") for t in source if isinstance(t, dict)}.get("default")
    return (source if isinstance(source, str) else None), tokens


def load_template(tokenizer, choice: str = "") -> ChatTemplate:
    """The chat template of ``tokenizer``: ``choice`` "" (its own: the folder's template, ChatML for tiktoken),
    "chatml", or the path of a ``.jinja`` file.

    >>> from theseus.data.tokenizer import get_tokenizer
    >>> load_template(get_tokenizer()).name
    'chatml'
    """
    folder = getattr(tokenizer, "folder", None)
    source, tokens = _folder_template(folder) if folder else (None, ())
    if not tokens and getattr(tokenizer, "backend", "") == "tiktoken":
        tokens = (("eos_token", "<|endoftext|>"),)
    if choice == "chatml":
        return ChatTemplate(CHATML, tokens, "chatml")
    if choice:
        if not os.path.isfile(choice):
            raise BadInput(f"chat template {choice!r}: no such file (data.chat.template takes '', 'chatml' or "
                           "the path of a .jinja file)")
        with open(choice, encoding="utf-8") as f:
            return ChatTemplate(f.read(), tokens, choice)
    if folder is None:
        return ChatTemplate(CHATML, tokens, "chatml")
    if source is None:
        raise BadInput(f"the tokenizer at {folder} has no chat template (no chat_template.jinja, no chat_template "
                       "in tokenizer_config.json): set data.chat.template=chatml, or the path of a .jinja file")
    return ChatTemplate(source, tokens, f"{folder} chat template")


def check_messages(messages, where: str) -> list[dict]:
    """``messages`` if it is a non-empty list of ``{"role": str, "content": str}``; a ``BadInput`` naming ``where``.

    >>> check_messages([{"role": "user", "content": "hi"}], "a.jsonl:1")[0]["role"]
    'user'
    """
    if not isinstance(messages, list) or not messages:
        raise BadInput(f"{where}: 'messages' must be a non-empty list of {{'role', 'content'}}, got {messages!r:.80}")
    for i, m in enumerate(messages):
        if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
            raise BadInput(f"{where}: message {i} must be {{'role': str, 'content': str}}, got {m!r:.80}")
    return messages


def assistant_spans(template: ChatTemplate, messages: list[dict], where: str) -> tuple[str, list[tuple[int, int]]]:
    """The rendered conversation and the character spans of its assistant turns (content and end-of-turn marker).

    >>> text, spans = assistant_spans(ChatTemplate(CHATML), [{"role": "user", "content": "hi"},
    ...                                                     {"role": "assistant", "content": "yo"}], "row 0")
    >>> [text[a:b] for a, b in spans]
    ['yo<|im_end|>']
    """
    try:
        text = template.render(messages)
        spans = []
        for i, m in enumerate(messages):
            if m["role"] != "assistant":
                continue
            prompt = template.render(messages[:i], add_generation_prompt=True)
            turn = template.render(messages[:i + 1])
            if not (turn.startswith(prompt) and text.startswith(turn)):
                raise BadInput(f"the template renders the conversation up to message {i} differently from the start "
                               "of the whole conversation, so its assistant turns cannot be told apart")
            end = len(turn.rstrip())
            if end > len(prompt):
                spans.append((len(prompt), end))
    except BadInput as e:
        raise BadInput(f"{where}: {e}") from None
    return text, spans


def encode_chat(template: ChatTemplate, tokenizer, messages, where: str) -> tuple[np.ndarray, np.ndarray]:
    """Token ids (uint32) of the rendered conversation and its loss mask (bool, True on assistant tokens).

    A token is in the mask when any of its characters is in an assistant span. No assistant token
    (no assistant turn, or only empty ones) is a ``BadInput`` naming ``where``.

    >>> from theseus.data.tokenizer import get_tokenizer
    >>> tok = get_tokenizer()
    >>> ids, mask = encode_chat(ChatTemplate(CHATML), tok, [{"role": "user", "content": "hi"},
    ...                                                     {"role": "assistant", "content": "hello"}], "row 0")
    >>> tok.decode(ids[mask])
    'hello<|im_end|>\\n'
    """
    text, spans = assistant_spans(template, check_messages(messages, where), where)
    ids, starts = tokenizer.encode_with_offsets(text)
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.append(starts[1:], len(text))
    mask = np.zeros(len(ids), dtype=bool)
    for a, b in spans:
        mask |= (starts < b) & (ends > a)
    if not mask.any():
        raise BadInput(f"{where}: the conversation has no assistant tokens to train on (roles: "
                       f"{', '.join(m['role'] for m in messages)})")
    return np.asarray(ids, dtype=np.uint32), mask


def chat_prompt(template: ChatTemplate, prompt: str) -> tuple[str, list[str]]:
    """The text that asks for an assistant turn answering the user's ``prompt``, and the end-of-turn marker
    the template closes an assistant turn with (a stop string for sampling; none where it closes with nothing).

    >>> chat_prompt(ChatTemplate(CHATML), "1+1?")
    ('<|im_start|>user\\n1+1?<|im_end|>\\n<|im_start|>assistant\\n', ['<|im_end|>'])
    """
    question = [{"role": "user", "content": prompt}]
    text = template.render(question, add_generation_prompt=True)
    probe = "theseus-answer"  # an answer no template changes (no whitespace to trim), to find what follows it
    full, [(start, end)] = assistant_spans(template, question + [{"role": "assistant", "content": probe}], "the prompt")
    marker = full[start:end].partition(probe)[2]
    return text, [marker] if marker else []
