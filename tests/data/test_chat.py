"""Chat templates rendered as transformers renders them, and the assistant-only loss mask of three stock templates."""

import json
import pathlib

import numpy as np
import pytest

from theseus.data.chat import CHATML, ChatTemplate, encode_chat, load_template
from theseus.data.tokenizer import get_tokenizer
from theseus.errors import BadInput

TEMPLATES = pathlib.Path(__file__).parent / "fixtures" / "chat_templates"
#: each stock template, its special tokens and the marker that closes an assistant turn
STOCK = {
    "llama-3.1-instruct": ({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
                           ["<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|python_tag|>"], "<|eot_id|>"),
    "qwen2.5-instruct": ({"eos_token": "<|im_end|>"}, ["<|im_start|>"], "<|im_end|>"),
    "gemma-3-it": ({"bos_token": "<bos>", "eos_token": "<eos>"}, ["<start_of_turn>", "<end_of_turn>"],
                   "<end_of_turn>"),
}
CONVERSATION = [
    {"role": "system", "content": "You answer in one short line."},
    {"role": "user", "content": "What does the fox do?"},
    {"role": "assistant", "content": "The quick brown fox jumps over the lazy dog."},
    {"role": "user", "content": "And in Python?"},
    {"role": "assistant", "content": "def add(a, b):\n    return a + b"},
]
ANSWERS = [m["content"] for m in CONVERSATION if m["role"] == "assistant"]


def tokenizer_folder(path, name: str) -> str:
    """The tests' byte-level BPE tokenizer, with ``name``'s special tokens and chat template, saved by transformers."""
    import transformers

    from tests.hf._folders import train_tokenizer

    train_tokenizer(str(path))
    specials, extra, _ = STOCK[name]
    fast = transformers.PreTrainedTokenizerFast(tokenizer_file=str(path / "tokenizer.json"), **specials,
                                                additional_special_tokens=extra)
    fast.chat_template = (TEMPLATES / f"{name}.jinja").read_text()
    fast.save_pretrained(str(path))
    return str(path)


@pytest.fixture(scope="module", params=sorted(STOCK))
def stock(request, tmp_path_factory):
    folder = tokenizer_folder(tmp_path_factory.mktemp(request.param), request.param)
    tok = get_tokenizer("huggingface", folder)
    return request.param, folder, tok, load_template(tok)


def runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """The [start, stop) runs of True in ``mask``."""
    edges = np.diff(np.concatenate([[0], mask.astype(int), [0]]))
    return list(zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)))


def test_mask_is_exactly_the_assistant_turns_and_their_end_marker(stock):
    name, _, tok, template = stock
    ids, mask = encode_chat(template, tok, CONVERSATION, "chat.jsonl:1")
    end = STOCK[name][2]
    assert [tok.decode(ids[a:b]) for a, b in runs(mask)] == [answer + end for answer in ANSWERS]
    assert tok.decode(ids[~mask]).count(end) == len(CONVERSATION) - 2 - (name == "gemma-3-it")  # other turns' ends


def test_rendering_equals_transformers_apply_chat_template(stock):
    import transformers

    name, folder, tok, template = stock
    hf = transformers.AutoTokenizer.from_pretrained(folder)
    for messages in (CONVERSATION, CONVERSATION[:2], CONVERSATION[1:4]):
        for generation in (False, True):
            expected = hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation)
            assert template.render(messages, add_generation_prompt=generation) == expected, (name, generation)
    text = template.render(CONVERSATION)
    assert tok.encode(text) == hf(text, add_special_tokens=False)["input_ids"]


def test_template_found_in_tokenizer_config_as_older_transformers_saved_it(tmp_path):
    folder = tmp_path / "tok"
    tokenizer_folder(folder, "qwen2.5-instruct")
    source = (folder / "chat_template.jinja").read_text()
    (folder / "chat_template.jinja").unlink()
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": source}))
    tok = get_tokenizer("huggingface", str(folder))
    assert load_template(tok).source == source
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(BadInput, match="has no chat template.*data.chat.template=chatml"):
        load_template(tok)
    assert load_template(tok, "chatml").source == CHATML


def test_template_errors_and_empty_masks_name_the_row(stock):
    name, _, tok, template = stock
    with pytest.raises(BadInput, match=r"^chat.jsonl:7: the conversation has no assistant tokens"):
        encode_chat(template, tok, CONVERSATION[:2], "chat.jsonl:7")
    with pytest.raises(BadInput, match=r"^chat.jsonl:8: message 1 must be"):
        encode_chat(template, tok, [{"role": "user", "content": "hi"}, {"role": "assistant"}], "chat.jsonl:8")
    if name == "gemma-3-it":  # its template refuses roles that do not alternate
        with pytest.raises(BadInput, match=r"^chat.jsonl:9: .*Conversation roles must alternate"):
            encode_chat(template, tok, [CONVERSATION[1], CONVERSATION[1], CONVERSATION[2]], "chat.jsonl:9")


def test_a_template_whose_prefixes_differ_is_refused_not_masked_wrongly():
    counting = ChatTemplate("{{ messages | length }}" + CHATML, name="counting")
    with pytest.raises(BadInput, match="row 3: the template renders the conversation up to message 2 differently"):
        encode_chat(counting, get_tokenizer(), CONVERSATION[:3], "row 3")


def test_tiktoken_uses_chatml():
    tok = get_tokenizer()
    template = load_template(tok)
    ids, mask = encode_chat(template, tok, CONVERSATION, "row 0")
    assert template.name == "chatml"
    pieces = [tok.decode(ids[a:b]) for a, b in runs(mask)]
    assert [p.removesuffix("\n") for p in pieces] == [a + "<|im_end|>" for a in ANSWERS]  # "|>\n" is one token
    with pytest.raises(BadInput, match="no such file"):
        load_template(tok, "/nonexistent/template.jinja")
