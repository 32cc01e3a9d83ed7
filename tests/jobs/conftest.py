"""Fixtures for the job, quick-session and CLI tests: tiny corpora, captured logs, a clean registry."""

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from loguru import logger

from theseus import jobs as jobs_module

FINEWEB_DOCS = 2500  # > 2 progress reports of 1,000 samples, still tiny


def write_fineweb_parquet(path, n):
    """A parquet file in FineWeb's format (its columns and types), ``n`` short English documents."""
    texts = [f"Document {i}: the quick brown fox jumps over the lazy dog {i % 7} times." for i in range(n)]
    table = pa.table({
        "text": texts,
        "id": [f"<urn:uuid:{i:08d}>" for i in range(n)],
        "dump": ["CC-MAIN-2022-21"] * n,
        "url": [f"https://example.com/{i}" for i in range(n)],
        "date": ["2022-05-16T00:00:00Z"] * n,
        "file_path": ["s3://commoncrawl/crawl-data/CC-MAIN-2022-21/segments/x.warc.gz"] * n,
        "language": ["en"] * n,
        "language_score": pa.array([0.93] * n, pa.float64()),
        "token_count": pa.array([16] * n, pa.int64()),
    })
    pq.write_table(table, path)
    return str(path)


@pytest.fixture(scope="session")
def fineweb_file(tmp_path_factory):
    """One local FineWeb-format parquet file of FINEWEB_DOCS documents."""
    return write_fineweb_parquet(tmp_path_factory.mktemp("fineweb") / "000_00000.parquet", FINEWEB_DOCS)


@pytest.fixture(scope="session")
def alpaca_file(tmp_path_factory):
    """A local Alpaca-format JSON file (a list of instruction/input/output records)."""
    records = [{"instruction": f"Add {i} and {i + 1}.", "input": "" if i % 2 else "Be brief.", "output": str(2 * i + 1)}
               for i in range(40)]
    path = tmp_path_factory.mktemp("alpaca") / "alpaca_data.json"
    path.write_text(json.dumps(records))
    return str(path)


@pytest.fixture
def logs():
    """Messages logged through loguru while the test runs."""
    messages = []
    handler = logger.add(lambda m: messages.append(m.record["message"]), level="DEBUG", format="{message}")
    yield messages
    logger.remove(handler)


@pytest.fixture
def scratch_registry():
    """Lets a test register jobs under test/...; removes them afterwards."""
    jobs_module.registry()  # the built-in jobs are loaded before the snapshot
    before = set(jobs_module._REGISTRY)
    yield
    for key in set(jobs_module._REGISTRY) - before:
        del jobs_module._REGISTRY[key]


def _log_files(root):
    out = []
    for dirpath, _, files in os.walk(os.path.join(root, "log")):
        out += [os.path.join(dirpath, f) for f in files]
    return sorted(out)


@pytest.fixture
def log_files():
    """``log_files(root)``: every file under <root>/log (none when the root or its log folder is absent)."""
    return _log_files
