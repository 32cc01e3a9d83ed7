"""Strict configs: struct mode from typed defaults, overrides, YAML round trip."""

from dataclasses import dataclass, field

import pytest
from omegaconf import OmegaConf

from theseus.config import ConfigError, apply_overrides, from_yaml, keys, merge, structured, to_dict, to_yaml
from theseus.jobs import get_job
from theseus.quick import quick

SEED_FINEWEB = {
    "data": {"val_pct": 0.05, "seed": 2357, "max_samples": -1, "max_tokens": -1, "suffix": "",
             "fineweb": {"snapshot": "CC-MAIN-2022-21"}},
    "tokenizer": {"backend": "tiktoken", "name": "cl100k_base",
                  "huggingface": {"use_fast": True, "use_remote_code": False}},
}


@dataclass
class Inner:
    paths: list[str] = field(default_factory=list)
    files: list[str] | None = None
    rate: float = 0.5


@dataclass
class Outer:
    seed: int = 1
    name: str = "x"
    flag: bool = False
    inner: Inner = field(default_factory=Inner)


def _subset(expected, actual):
    """``actual`` holds every key of ``expected`` with the same value, in the same relative order."""
    if not isinstance(expected, dict):
        return expected == actual
    order = [k for k in actual if k in expected]
    return order == list(expected) and all(_subset(v, actual[k]) for k, v in expected.items())


def test_fineweb_defaults_are_the_seeds(tmp_path):
    with quick(tmp_path) as q:
        q.build("data/tokenize/fineweb", "tokenize-fineweb")
        cfg = to_dict(q.config)
    assert _subset(SEED_FINEWEB, cfg), cfg
    # the only extra keys: where local parquet comes from, and overwrite
    assert cfg["data"]["fineweb"]["data_files"] is None and cfg["data"]["overwrite"] is False
    assert str(q.config).startswith("{'data': {'val_pct': 0.05, 'seed': 2357, 'max_samples': -1, 'max_tokens': -1, "
                                    "'suffix': '', 'fineweb': {'snapshot': 'CC-MAIN-2022-21'")


@pytest.mark.parametrize("key", ["data/tokenize/fineweb", "data/tokenize/text", "data/tokenize/pydoc",
                                 "data/tokenize/addition", "data/tokenize/alpaca"])
def test_every_tokenize_job_has_the_common_keys(key):
    cfg = get_job(key).defaults()
    for path, value in [("data.val_pct", 0.05), ("data.seed", 2357), ("data.max_samples", -1), ("data.suffix", ""),
                        ("data.overwrite", False), ("tokenizer.backend", "tiktoken"), ("tokenizer.name", "cl100k_base"),
                        ("tokenizer.huggingface.use_fast", True), ("tokenizer.huggingface.use_remote_code", False)]:
        assert OmegaConf.select(cfg, path) == value, (key, path)


def test_assigning_unknown_key_raises_with_path(tmp_path):
    with quick(tmp_path) as q:
        q.build("data/tokenize/fineweb", "tokenize-fineweb")
        with pytest.raises(AttributeError) as e:
            q.config.data.max_tokenz = 1
        assert "data.max_tokenz" in str(e.value) and "max_tokens" in str(e.value)
        with pytest.raises(Exception) as e:
            q.config.tokenizer.huggingface.use_fsat = True
        assert "tokenizer.huggingface.use_fsat" in str(e.value)


def test_assigning_wrong_type_raises_with_path(tmp_path):
    with quick(tmp_path) as q:
        q.build("data/tokenize/fineweb", "tokenize-fineweb")
        with pytest.raises(ValueError) as e:
            q.config.data.max_tokens = "lots"
        assert "data.max_tokens" in str(e.value)
        with pytest.raises(ValueError) as e:
            q.config.data.fineweb.data_files = 3
        assert "data.fineweb.data_files" in str(e.value)
        q.config.data.max_tokens = int(1e7)  # the seed's assignment
        q.config.data.val_pct = 0  # int into a float key is fine (and does not warn)
        assert q.config.data.max_tokens == 10_000_000 and q.config.data.val_pct == 0.0


def test_structured_is_struct_mode():
    cfg = structured(Outer)
    assert OmegaConf.is_struct(cfg)
    with pytest.raises(AttributeError):
        cfg.nope = 1
    with pytest.raises(TypeError):
        structured({"a": 1})


def test_overrides_parse_types_and_lists():
    cfg = apply_overrides(structured(Outer), ["seed=7", "name=hello world", "flag=true", "inner.rate=1",
                                              "inner.paths=[a.txt, b.txt]", "inner.files=one.parquet"])
    assert cfg.seed == 7 and cfg.name == "hello world" and cfg.flag is True and cfg.inner.rate == 1.0
    assert list(cfg.inner.paths) == ["a.txt", "b.txt"] and list(cfg.inner.files) == ["one.parquet"]
    assert apply_overrides(cfg, ["inner.files=null"]).inner.files is None
    assert apply_overrides(cfg, ["name="]).name == ""


@pytest.mark.parametrize("override, expected", [
    ("sed=1", "unknown config key 'sed'; did you mean seed?"),
    ("inner.rat=1", "unknown config key 'inner.rat'; did you mean inner.rate?"),
    ("inner.rate.x=1", "unknown config key 'inner.rate.x'"),
    ("seed=lots", "bad value for config key 'seed'"),
    ("flag=maybe", "bad value for config key 'flag'"),
    ("inner=3", "bad value for config key 'inner'"),
    ("seed", "not of the form key=value"),
    ("=3", "has no key"),
])
def test_bad_overrides_name_the_key_and_change_nothing(override, expected):
    cfg = structured(Outer)
    with pytest.raises(ConfigError) as e:
        apply_overrides(cfg, ["seed=9", override])
    assert expected in str(e.value)
    assert cfg == structured(Outer)  # all or nothing


def test_yaml_round_trip_is_strict():
    cfg = apply_overrides(structured(Outer), ["seed=3", "inner.paths=[x]"])
    text = to_yaml(cfg)
    assert from_yaml(Outer, text) == cfg
    with pytest.raises(ConfigError, match="unknown config key 'sneaky'"):
        from_yaml(Outer, text + "sneaky: 1\n")
    assert merge(structured(Outer), {"inner": {"rate": 2}}).inner.rate == 2.0
    assert "inner.paths" in keys(cfg)


def test_unknown_key_in_the_wrong_section_suggests_the_right_one():
    with pytest.raises(ConfigError, match=r"did you mean inner.rate\?"):
        apply_overrides(structured(Outer), ["rate=1"])
    with pytest.raises(ConfigError, match=r"data.max_tokens"):
        apply_overrides(get_job("data/tokenize/fineweb").defaults(), ["data.max_tokenz=1"])


def test_override_values_take_the_keys_type():
    cfg = apply_overrides(structured(Outer), ["name=yes", "seed=007", "inner.rate=1e-3", "flag=yes"])
    assert cfg.name == "yes" and cfg.seed == 7 and cfg.inner.rate == 0.001 and cfg.flag is True
    with pytest.raises(ConfigError, match="'name'"):
        apply_overrides(structured(Outer), ["name=null"])  # a str key is not Optional
    assert apply_overrides(structured(Outer), ["name=007"]).name == "007"
    with pytest.raises(ConfigError, match="cannot parse"):
        apply_overrides(structured(Outer), ["inner.paths=[a, b"])


@pytest.mark.parametrize("text, value", [("1e9", 10**9), ("2.5e3", 2500), ("1000.0", 1000), ("-1e3", -1000),
                                         ("1.0000000000000001e16", 10**16 + 1)])
def test_an_int_key_takes_a_whole_number_in_scientific_notation(text, value):
    cfg = apply_overrides(structured(Outer), [f"seed={text}"])
    assert cfg.seed == value and isinstance(cfg.seed, int)


@pytest.mark.parametrize("text, problem", [("1.5e0", "not a whole number"), ("nan", "not a finite number"),
                                           ("inf", "not a finite number"), ("1e400", "out of the range"),
                                           ("1e19", "out of the range")])
def test_an_int_key_refuses_a_number_that_is_not_a_whole_int64(text, problem):
    with pytest.raises(ConfigError, match=f"bad value for config key 'seed': {text} is {problem}"):
        apply_overrides(structured(Outer), [f"seed={text}"])


def test_a_training_job_takes_its_token_budget_as_1e9():
    cfg = apply_overrides(get_job("gpt/train/pretrain").defaults(), ["training.tokens=1e9"])
    assert cfg.training.tokens == 1_000_000_000 and "tokens: 1000000000" in to_yaml(cfg)
    with pytest.raises(ConfigError, match="'training.tokens': 1.5e0 is not a whole number"):
        apply_overrides(cfg, ["training.tokens=1.5e0"])


def test_a_float_key_refuses_a_number_too_large_for_a_float():
    with pytest.raises(ConfigError, match="config key 'inner.rate': 1e400 is out of the range of a float"):
        apply_overrides(structured(Outer), ["inner.rate=1e400"])
    assert apply_overrides(structured(Outer), ["inner.rate=-2e-3"]).inner.rate == -0.002
