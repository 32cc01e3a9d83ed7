"""A bug is not bad input: only theseus's own errors (and an OS-refused root) exit 2; anything else
prints its traceback and exits EXIT_BUG."""

from __future__ import annotations

from typer.testing import CliRunner

from theseus.cli.app import app
from theseus.errors import EXIT_BUG, BadInput, NotFound, TheseusError


def test_a_forced_internal_key_error_is_a_bug_not_bad_input(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise KeyError("step")  # no check raises this: a bug inside the command

    monkeypatch.setattr("theseus.cli.store.Store", broken)
    result = CliRunner().invoke(app, ["ls", str(tmp_path)])
    assert result.exit_code == EXIT_BUG == 70, result.output
    assert "Traceback" in result.output and "KeyError: 'step'" in result.output


def test_real_bad_input_still_exits_2_without_a_traceback(tmp_path):
    result = CliRunner().invoke(app, ["ls", str(tmp_path / "nowhere")])
    assert result.exit_code == 2 and result.output.startswith("error: ") and "Traceback" not in result.output


def test_the_kinds_keep_the_builtin_bases_callers_catch():
    from theseus.store.cursor import EmptyResult, UnknownKey
    from theseus.store.segments import CorruptSegment

    assert issubclass(EmptyResult, NotFound) and issubclass(EmptyResult, LookupError)
    assert issubclass(UnknownKey, BadInput) and issubclass(UnknownKey, ValueError)
    assert issubclass(CorruptSegment, TheseusError) and issubclass(CorruptSegment, ValueError)


def test_a_failure_of_the_outside_world_exits_1_naming_it(tmp_path, monkeypatch):
    """An error of the family that is no kind of bad input (a flush the disk refused) is neither exit 2
    nor a bug: one line and exit 1."""
    from theseus.store.writer import FlushError

    def refused(*args, **kwargs):
        raise FlushError("no space left on the device")

    monkeypatch.setattr("theseus.cli.store.Store", refused)
    result = CliRunner().invoke(app, ["ls", str(tmp_path)])
    assert result.exit_code == 1, result.output
    assert "FlushError: no space left" in result.output and "Traceback" not in result.output
