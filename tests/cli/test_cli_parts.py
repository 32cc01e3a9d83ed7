"""``theseus parts [KIND]``: every registered part with its config section, keys and description."""

import pytest
from typer.testing import CliRunner

from theseus.cli import app
from theseus.train import parts as registry

runner = CliRunner()
BUILT_IN = {"model": ["gpt"], "optimizer": ["adamw", "lion", "muon", "sgd"],
            "schedule": ["constant", "cosine", "linear", "wsd"], "loss": ["cross-entropy"]}


def invoke(*args: str):
    result = runner.invoke(app, ["parts", *args], env={"COLUMNS": "400"})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


def rows(output: str) -> dict[tuple[str, str], list[str]]:
    """(kind, name) -> the row's other cells, from the table's one-line rows."""
    found = {}
    for line in output.splitlines():
        cells = [c.strip() for c in line.strip("│ ").split("│")]
        if len(cells) == 4 and cells[0] in registry.KINDS:
            found[(cells[0], cells[1])] = cells[2:]
    return found


def test_lists_every_built_in_part_with_its_section_keys_and_description():
    code, out = invoke()
    assert code == 0
    table = rows(out)
    for kind, names in BUILT_IN.items():
        for name in names:
            config, description = table[(kind, name)]
            part = registry.get_part(kind, name)
            assert config.startswith(f"{part.section}: ") and description == part.description
    assert table[("optimizer", "lion")][0] == "optimization: weight_decay=0.1, beta1=0.9, beta2=0.99, lr=0.0003"
    assert table[("schedule", "wsd")][0] == "optimization: warmup_pct=0.005, decay_pct=0.01, final_lr_frac=0.01"
    assert table[("model", "gpt")][0].startswith("architecture: dtype, n_embd=2048, ")
    kinds = [kind for kind, _ in table]
    assert kinds == sorted(kinds, key=registry.KINDS.index)  # in the order of KINDS


@pytest.mark.parametrize("kind", list(BUILT_IN))
def test_one_kind(kind):
    code, out = invoke(kind)
    assert code == 0
    table = rows(out)
    assert {k for k, _ in table} == {kind}
    assert set(BUILT_IN[kind]) <= {name for _, name in table}


def test_a_kind_without_parts_says_so():
    for kind in set(registry.KINDS) - set(BUILT_IN):
        if not registry.parts(kind):
            code, out = invoke(kind)
            assert (code, out.strip()) == (0, f"no {kind} parts are registered")


def test_an_unknown_kind_exits_2_listing_the_kinds():
    code, out = invoke("optimiser")
    assert code == 2
    assert "unknown part kind 'optimiser'" in out.replace("\n", "")
    assert "model, optimizer, schedule, loss, evaluation, analysis" in out.replace("\n", "")


def test_a_part_registered_by_the_user_is_listed():
    import dataclasses

    @dataclasses.dataclass
    class ScaledConfig:
        scale: float = 2.0

    @registry.part("schedule", "test-cli-scaled", "Twice the rate, for a test.")
    class Scaled(registry.Part):
        section = "optimization"
        Config = ScaledConfig

    code, out = invoke("schedule")
    assert code == 0 and Scaled.name == "test-cli-scaled"
    assert rows(out)[("schedule", "test-cli-scaled")] == ["optimization: scale=2.0", "Twice the rate, for a test."]


def test_part_modules_that_do_not_exist_are_skipped_and_broken_ones_raise(tmp_path, monkeypatch):
    registry.load_part_modules(["theseus.train.no_such_module"])
    (tmp_path / "parts_with_a_missing_import.py").write_text("import no_such_dependency_of_a_part\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError, match="no_such_dependency_of_a_part"):
        registry.load_part_modules(["parts_with_a_missing_import"])
