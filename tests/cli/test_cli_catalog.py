"""theseus/catalog.json, what ``theseus jobs`` and ``theseus parts`` list without importing JAX, matches the
registries; ``python -m theseus.catalog`` rewrites it and ``--check`` names what is out of date."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from theseus import catalog
from theseus.train.parts import parts as registered_parts


@pytest.mark.slow  # imports every module that registers a job or a part, in a fresh interpreter
def test_catalog_json_matches_the_registries():
    done = subprocess.run([sys.executable, "-m", "theseus.catalog", "--check"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr


def test_check_names_what_is_out_of_date_and_a_rewrite_fixes_it(tmp_path, monkeypatch, capsys):
    current = {"sources": {"theseus/catalog.py": "1"}, "jobs": {"a/job": "Does a."},
               "parts": {"loss": {"mine": ["loss: factor=0.5", "Mine."]}}}
    stored = {"sources": {"theseus/catalog.py": "0"}, "jobs": {"a/job": "Did a.", "gone/job": "Gone."},
              "parts": {"loss": {"mine": ["loss: factor=0.5", "Mine."]}}}
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps(stored))
    monkeypatch.setattr(catalog, "CATALOG", path)
    monkeypatch.setattr(catalog, "live", lambda: current)
    assert catalog.main(["--check"]) == 1
    assert "(jobs a/job; jobs gone/job; source theseus/catalog.py)" in capsys.readouterr().err
    assert catalog.main([]) == 0 and json.loads(path.read_text()) == current
    assert catalog.main(["--check"]) == 0
    assert catalog.main(["--write"]) == 2 and json.loads(path.read_text()) == current  # bad usage writes nothing


def test_a_part_or_job_registered_here_is_listed_over_the_file(tmp_path, monkeypatch):
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps({"sources": catalog.fingerprint(["theseus/catalog.py"]), "jobs": {"a/job": "Does a."},
                                "parts": {"loss": {"mine": ["-", "Mine."]}}}))
    monkeypatch.setattr(catalog, "CATALOG", path)
    assert "cross-entropy" in registered_parts("loss")  # the built-in parts are registered in this process
    assert catalog.jobs("a/") == {"a/job": "Does a."}
    assert catalog.parts("loss")["loss"]["mine"] == ("-", "Mine.")
    assert catalog.parts("loss")["loss"]["cross-entropy"][0] == "loss: z_loss=0.0"
    with pytest.raises(ValueError, match="unknown part kind .losses.; the kinds are loss"):
        catalog.parts("losses")


def test_a_changed_source_file_is_not_trusted_the_registries_are_read(tmp_path, monkeypatch):
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps({"sources": {"theseus/catalog.py": "an older hash", "theseus/gone.py": ""},
                                "jobs": {"a/job": "Does a."}, "parts": {}}))
    monkeypatch.setattr(catalog, "CATALOG", path)
    assert catalog.fingerprint(["theseus/gone.py"]) == {"theseus/gone.py": ""}
    assert "a/job" not in catalog.jobs() and "gpt/train/pretrain" in catalog.jobs()
    assert catalog.parts("optimizer")["optimizer"]["adamw"][1] == registered_parts("optimizer")["adamw"].description
