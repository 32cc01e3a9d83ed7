"""Audit a root offline, and collect its garbage: ``theseus audit`` / ``theseus gc``.

The audit reads the log once (Parquet: each segment as readers read it, every page
against its CRC and its block index against its rows), every view (its CRCs, and each
run it covers against the log's fold of that run), every checkpoint's ``MANIFEST.json``
and ``checkpoint/index.json`` (JSON) and ``config.yaml`` (plain data: see ``trust``), and
streams every checkpoint file once through sha256; every published analysis likewise against
its own ``MANIFEST.json`` (``audit/analyses.py``). Nothing read from the root is
executed or unpickled (DESIGN.md invariant 4), so a root copied from a stranger
can be audited safely; this module imports no JAX.

It reports, per run: the lineage from seq 0 to the last node (gaps, the node a
branch started from, the nodes a run was resumed at), the config at each
checkpoint and what changed from the checkpoint before (or, for a branch, from
the checkpoint it started from), and the run's status with its error. Problems
are ``error`` (an integrity failure: a corrupt, missing or unlisted checkpoint
file, an unreadable log segment, a corrupt view or one that disagrees with the log,
an inconsistent record, a nonce that two runs share) or ``warning`` (a failed
or unfinished run, an object folder no checkpoint record references, a run whose
job is not registered in this process: resuming or verifying it needs the module
or file its ``_job_source`` names, which the audit never imports).

>>> import tempfile
>>> from theseus.store import Node, Store
>>> root = tempfile.mkdtemp()
>>> node = Node.start("doc-audit")
>>> with Store(root).writer() as w:
...     w.job(node, "doc/job", "lr: 0.1\\n")
...     w.finished(node.next())
>>> report = audit(root)
>>> report.ok, [(r.status, r.last_seq) for r in report.runs]
(True, [('finished', 1)])
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import polars as pl

from theseus.audit.adapters import base_problems
from theseus.audit.analyses import check_analyses
from theseus.audit.checkpoints import check_checkpoints, folder_of
from theseus.audit.reading import first_line, open_root, parse_config, relative, thread_count
from theseus.audit.report import WARNING, AuditReport, Change, CheckpointAudit, GcReport, Problem, Resume, RunAudit
from theseus.audit.retired import clear_retired, retired_nodes, retired_problems
from theseus.errors import BadInput
from theseus.jobs import missing_job
from theseus.store import fs as rootfs
from theseus.store import schema, trust
from theseus.store.fold import node_ids
from theseus.store.footers import check_segment
from theseus.store.index import Index
from theseus.store.layout import CONFIG_FILE, LOG, MANIFEST, OBJECTS
from theseus.store.listing import list_segments, partition_of, partition_ok, retry_vanished, vanished
from theseus.store.node import check_nonce, decode_id, encode_id
from theseus.store.reader import empty_frame, value_expr
from theseus.store.recency import ORDER, latest_rows
from theseus.store.view_build import check_view
from theseus.store.view_file import list_views, reject_view

__all__ = ["audit", "flatten", "gc"]


# ---------------------------------------------------------------------------
# entry points


def audit(root: str | os.PathLike, nonce: str | None = None, verify_checksums: bool = True,
          threads: int | None = None, read_only: bool = False) -> AuditReport:
    """Audit ``root`` (a folder or ``gs://`` URL), or only the run ``nonce`` (and the runs it branched from).

    Reads the log once, lists and checks every committed checkpoint against its
    MANIFEST.json (sizes, and sha256 of every byte when ``verify_checksums``;
    ``threads`` readers at once), and lists unreferenced object folders. Raises
    FileNotFoundError for a root that does not exist and ValueError for a
    malformed or unknown nonce; everything found inside the root is a
    :class:`Problem` of the report. A view found corrupt or disagreeing with the
    log is marked rejected (readers skip it from then on), unless ``read_only``:
    then the audit writes nothing and only reports it (the ui audits that way).

    >>> import tempfile
    >>> report = audit(tempfile.mkdtemp())
    >>> report.ok, report.runs, [p.kind for p in report.problems]
    (True, (), ['empty-root'])
    """
    start = time.perf_counter()
    if threads is not None and threads < 1:
        raise BadInput(f"threads must be at least 1, got {threads}")
    fs, base = open_root(root)
    if nonce is not None:
        check_nonce(nonce)
    problems: list[Problem] = []
    log, segments = _load_log(fs, base, nonce, problems)
    problems += _view_problems(fs, base, nonce, mark=not read_only)
    nodes = _nodes(log)
    audited = nodes.filter(pl.col("nonce") == nonce) if nonce is not None else nodes
    problems += _identity_problems(audited)
    problems += _collisions(log if nonce is None else log.filter(pl.col("nonce") == nonce))
    records = _reserved(log)
    known = set(nodes["node"].to_list())
    checkpoints = {r["node"]: r["value"] for r in records if r["key"] == schema.CHECKPOINT}

    problems += _config_problems(records, nonce)
    gone = retired_nodes(records)  # retired checkpoints: their files are deleted by design, never checked
    checked, analysis_files, analysis_bytes = _check_stored(fs, base, records, gone, nonce, verify_checksums,
                                                            threads, problems)
    rows = _run_rows(audited)
    runs = _runs(fs, base, rows, records, checkpoints, checked, known, problems)
    problems += base_problems(runs, checkpoints, set(gone))  # LoRA adapters are of no use without their base
    mine = [r for r in records if nonce is None or r["nonce"] == nonce]
    problems += retired_problems(mine, [(f"{r['name']}:{r['nonce']}", r["origin"]) for r in rows if r["origin"]],
                                 fs, base)
    referenced = {folder_of(path) for path in checkpoints.values()} | _artifact_folders(records)
    unreferenced = _unreferenced(fs, base, referenced, nonce, problems)
    if nonce is None:
        problems += _temporaries(fs, base) + _stray_folders(fs, base)
    if not segments and not runs and not unreferenced and nonce is None:
        problems.append(Problem("empty-root", LOG, f"no log segments under {rootfs.url(fs, base)}/{LOG}", WARNING))
    return AuditReport(
        root=rootfs.url(fs, base), nonce=nonce, runs=tuple(runs), problems=tuple(problems),
        unreferenced=tuple(unreferenced), segments=segments,
        files=sum(c.files for c in checked.values()) + analysis_files,
        bytes_verified=sum(c.hashed for c in checked.values()) + analysis_bytes if verify_checksums else 0,
        seconds=round(time.perf_counter() - start, 4), checksums=verify_checksums,
    )


def _check_stored(fs, base: str, records: list[dict], gone, nonce: str | None, verify: bool, threads: int | None,
                  problems: list[Problem]) -> tuple[dict[str, CheckpointAudit], int, int]:
    """Check the committed checkpoints (of run ``nonce`` only, when given; none of the retired ``gone``) and the
    published analysis folders against their manifests, appending what is wrong to ``problems``: the
    checkpoints' audits by node, and the analysis files and bytes hashed."""
    wanted = [r for r in records if r["key"] == schema.CHECKPOINT and (nonce is None or r["nonce"] == nonce)
              and r["node"] not in gone]
    checked = check_checkpoints(fs, base, wanted, verify, threads, problems)
    published = {folder_of(r["value"]) for r in records if r["key"] in schema.FOLDER_KEYS and r["value"]
                 and (nonce is None or r["nonce"] == nonce)}
    analysis_files, analysis_bytes = check_analyses(fs, base, published, verify, threads, problems)
    return checked, analysis_files, analysis_bytes


def gc(root: str | os.PathLike, dry_run: bool = False, min_age_s: float = 3600.0) -> GcReport:
    """Delete the object folders of ``root`` that no committed checkpoint record references, and the files of
    retired checkpoints still on disk (``retired``: `theseus.audit.retired`; a crash between a retire record
    and its delete leaves them).

    Only ``objects/<node-id>/`` folders are candidates. Never deleted: a folder a
    checkpoint record points at (checked again just before each delete), one not
    named by a node id, one written less than ``min_age_s`` seconds ago (a
    checkpoint still being saved has no record yet), one whose run has no log
    records at all (a root copied without its log, not a crash: every run records
    its job before it saves anything), or a link (kept with the reason: nothing is
    deleted through a link, which may point outside the root). Temporary files
    that killed writers left (``.<name>.<random>.tmp``) are deleted under the same
    ``min_age_s`` rule. Refuses (ValueError) when a log segment cannot be read,
    since its records might reference a folder.

    >>> import tempfile
    >>> from theseus.store import Node, Store
    >>> root, start = tempfile.mkdtemp(), Node.start("doc-gc")
    >>> with Store(root).writer() as w:
    ...     w.job(start, "doc/job", "{}")
    >>> crashed = Node(start.name, start.nonce, 5)
    >>> os.makedirs(f"{root}/objects/{crashed.id}/checkpoint")   # a save that never committed
    >>> gc(root, min_age_s=0).deleted == (f"objects/{crashed.id}",)
    True
    >>> os.listdir(root + "/objects")
    []
    """
    if min_age_s < 0:
        raise BadInput(f"min_age_s must be >= 0, got {min_age_s}")
    fs, base = open_root(root)
    problems: list[Problem] = []
    log, _ = _load_log(fs, base, None, problems)
    if problems:
        bad = ", ".join(p.path for p in problems)
        raise BadInput(f"gc refuses to run: log segments cannot be read ({bad}), so the objects they may "
                         "reference are unknown; see `theseus audit` and repair or remove them first")
    records = _reserved(log)
    referenced = {folder_of(r["value"]) for r in records if r["key"] == schema.CHECKPOINT} | _artifact_folders(records)
    cleared, kept, freed = clear_retired(fs, base, records, dry_run)
    found: list[Problem] = []
    candidates = _unreferenced(fs, base, referenced, None, found)
    kept += [(p.path, p.message) for p in found if p.kind == "link"]  # reported, never followed
    deleted, freed_folders = _gc_folders(fs, base, candidates, min_age_s, dry_run, kept)
    temporaries, freed_temporaries = _gc_temporaries(fs, base, min_age_s, dry_run, kept)
    freed += freed_folders + freed_temporaries
    return GcReport(tuple(deleted), freed, tuple(kept), dry_run, tuple(temporaries), tuple(cleared))


def _gc_folders(fs, base: str, candidates: list[str], min_age_s: float, dry_run: bool,
                kept: list[tuple[str, str]]) -> tuple[list[str], int]:
    """Delete (unless ``dry_run``) the unreferenced node folders ``candidates`` that no rule keeps, appending
    each kept one with its reason to ``kept``: the folders deleted and the bytes they held."""
    deleted: list[str] = []
    freed = 0
    for rel in candidates:
        try:
            name, nonce, _ = decode_id(rel.split("/", 1)[1])
        except ValueError:
            continue  # not a node's folder: not ours to delete
        newest, size = _newest_and_size(fs, f"{base}/{rel}")
        age = time.time() - newest
        reason = (f"written {age:.0f} s ago (< {min_age_s:g} s)" if age < min_age_s
                  else retry_vanished(lambda: _keep(fs, base, name, nonce, rel)))
        if reason:
            kept.append((rel, reason))
            continue
        if not dry_run:
            try:
                _remove(fs, base, f"{base}/{rel}")
            except rootfs.NotPlainFile as e:  # became a link since it was listed
                kept.append((rel, str(e)))
                continue
        deleted.append(rel)
        freed += size
    return deleted, freed


def _gc_temporaries(fs, base: str, min_age_s: float, dry_run: bool,
                    kept: list[tuple[str, str]]) -> tuple[list[str], int]:
    """Delete (unless ``dry_run``) the temporary files killed writers left, older than ``min_age_s``, appending
    each kept one with its reason to ``kept``: the files deleted and the bytes they held."""
    temporaries = []
    freed = 0
    for path, mtime, size in rootfs.temporaries(fs, base):
        rel, age = relative(base, path), time.time() - mtime
        if age < min_age_s:
            kept.append((rel, f"a temporary file written {age:.0f} s ago (< {min_age_s:g} s): may still be in use"))
            continue
        if not dry_run:
            try:
                rootfs.check_inside(fs, base, path)
                os.unlink(path)
            except FileNotFoundError:
                continue  # removed meanwhile
            except rootfs.NotPlainFile as e:
                kept.append((rel, str(e)))
                continue
        temporaries.append(rel)
        freed += size
    return temporaries, freed


# ---------------------------------------------------------------------------
# the log


def _load_log(fs, base: str, nonce: str | None, problems: list[Problem]) -> tuple[pl.DataFrame, int]:
    """The log of the root (or of run ``nonce`` and the runs it descends from), and how many segments were read.

    Listed and read again when a concurrent compaction retires a segment mid-read.
    """
    found: list[Problem] = []

    def read() -> tuple[pl.DataFrame, int]:
        found.clear()  # only the last try's problems count
        return _read_log(fs, base, nonce, found)

    log, count = retry_vanished(read)
    problems += found
    return log, count


def _read_log(fs, base: str, nonce: str | None, problems: list[Problem]) -> tuple[pl.DataFrame, int]:
    if nonce is None:
        paths = list_segments(fs, base)
        return _read_segments(fs, base, paths, problems), len(paths)
    paths = list_segments(fs, base, "*", nonce)
    if not paths:
        raise BadInput(f"no run with nonce {nonce!r} in {rootfs.url(fs, base)} (`theseus ls ROOT` lists the runs)")
    frames, seen, count = [], {nonce}, len(paths)
    frame = _read_segments(fs, base, paths, problems)
    while frame.height:
        frames.append(frame)
        origins = frame.filter((pl.col("seq") == 0) & pl.col("parent").is_not_null())["parent"].unique().to_list()
        parents = {decode_id(p)[:2] for p in origins if _decodes(p)}
        todo = sorted((name, n) for name, n in parents if n not in seen)
        seen.update(n for _, n in todo)
        more = [p for name, n in todo for p in list_segments(fs, base, name, n)]
        count += len(more)
        frame = _read_segments(fs, base, more, problems) if more else frame.head(0)
    return (pl.concat(frames) if frames else empty_frame().collect()), count


def _view_problems(fs, base: str, nonce: str | None, mark: bool) -> list[Problem]:
    """Every view checked through against the log (``view_build.check_view``): for run ``nonce`` only, when given;
    a bad one is marked rejected when ``mark``."""
    index = Index(fs, base)
    views = list_views(index)
    if not views:
        return []
    runs = index.runs()
    advice = ("readers skip it from now on (marked rejected) and `theseus compact` rebuilds it from the log" if mark
              else "not marked rejected (a read-only audit): `theseus audit ROOT` marks it, so readers skip it, "
                   "and `theseus compact` rebuilds it from the log")
    problems = []
    for path in views:
        rel = relative(base, path)
        try:
            differs = check_view(index, path, runs, nonce)
        except FileNotFoundError:
            continue  # retired by a newer view meanwhile
        except Exception as e:  # any failure to read a view is reported, never raised
            found = [Problem("corrupt-view", rel, f"view {rel} cannot be read ({first_line(e)})")]
        else:
            found = [Problem("view-differs", rel, f"view {rel} disagrees with the log for run {line}")
                     for line in differs]
        if found and mark:
            problems += _rejected(index, path, found, advice)
        elif found:
            problems += [dataclasses.replace(p, message=f"{p.message}; {advice}") for p in found]
    return problems


def _rejected(index, path: str, found: list[Problem], advice: str) -> list[Problem]:
    """Mark the view ``path`` rejected (readers skip it); ``found`` with what became of it appended."""
    try:
        reject_view(index, path, "\n".join(p.message for p in found))
    except OSError as e:  # a read-only root: reported, and readers keep reading the view
        advice = f"it could not be marked rejected ({first_line(e)}): delete it and run `theseus compact`"
    return [dataclasses.replace(p, message=f"{p.message}; {advice}") for p in found]


def _decodes(node_id: str) -> bool:
    try:
        decode_id(node_id)
    except ValueError:
        return False
    return True


def _read_segments(fs, base: str, paths: list[str], problems: list[Problem]) -> pl.DataFrame:
    """Every record of ``paths``, each segment read and checked the way readers read it
    (``footers.check_segment``); the bad ones become problems naming the file."""
    if not paths:
        return empty_frame().collect()
    paths = _regular(fs, base, paths, problems)
    with ThreadPoolExecutor(thread_count(fs, len(paths))) as pool:
        results = list(pool.map(lambda p: _read_one(fs, p), paths))
    good = []
    for result in results:
        if not isinstance(result, pl.DataFrame) and vanished(result):
            raise result  # retired by a compaction since listed, not unreadable: the caller lists again
    for path, result in zip(paths, results, strict=True):
        if isinstance(result, pl.DataFrame):
            good.append(result)
        else:
            rel = relative(base, path)
            problems.append(Problem("unreadable-segment", rel, f"log segment {rel} cannot be read "
                                    f"(truncated, corrupt or forged): {first_line(result)}"))
    columns = empty_frame().collect_schema()
    return pl.concat(good) if good else pl.DataFrame(schema=columns)


def _regular(fs, base: str, paths: list[str], problems: list[Problem]) -> list[str]:
    """The regular files among ``paths``; each other one (a link, FIFO, device) is a problem naming it."""
    out = []
    for path in paths:
        try:
            rootfs.check_regular(fs, path)
        except rootfs.NotPlainFile as e:
            rel = relative(base, path)
            problems.append(Problem("unreadable-segment", rel, f"log segment {rel}: {e}"))
            continue
        except FileNotFoundError:
            pass  # retired since the listing: the read reports it
        out.append(path)
    return out


def _read_one(fs, path: str) -> pl.DataFrame | Exception:
    try:
        table = check_segment(fs, path)
    except Exception as e:  # any failure to read a file is reported, never raised
        return e
    name, nonce = partition_of(path)
    frame = pl.from_arrow(table.replace_schema_metadata(None)).with_columns(name=pl.lit(name), nonce=pl.lit(nonce))
    return frame.select(empty_frame().collect_schema().names()).cast(dict(empty_frame().collect_schema()))


def _nodes(log: pl.DataFrame) -> pl.DataFrame:
    """One row per node: identity, last write, and the ids its identity implies (itself, seq - 1)."""
    nodes = log.group_by("node").agg(
        pl.col("name").first(), pl.col("nonce").first(), pl.col("seq").first(),
        pl.col("parent").drop_nulls().first(), pl.col("stamp").max().alias("written"),
    )
    name, nonce, seq = pl.col("name"), pl.col("nonce"), pl.col("seq")
    return nodes.with_columns(node_ids(name, nonce, seq).alias("expected"),
                              node_ids(name, nonce, seq - 1).alias("previous"))


def _identity_problems(nodes: pl.DataFrame) -> list[Problem]:
    """Records whose node id does not match their name/nonce/seq, and parents that are not seq - 1."""
    problems = []
    for row in nodes.filter(pl.col("expected") != pl.col("node")).iter_rows(named=True):
        problems.append(Problem("node-id", f"{row['name']}:{row['nonce']}", f"records of node {row['node']} say "
                                f"{row['name']}:{row['nonce']}:{row['seq']}, whose id is {row['expected']}"))
    wrong = nodes.filter((pl.col("seq") > 0) & pl.col("parent").is_not_null()
                         & (pl.col("parent") != pl.col("previous")))
    for row in wrong.iter_rows(named=True):
        problems.append(Problem("lineage", f"{row['name']}:{row['nonce']}", f"node {row['node']} (seq {row['seq']}) "
                                f"has parent {row['parent']}, not seq {row['seq'] - 1} "
                                f"of its own run ({row['previous']})"))
    return problems


def _collisions(log: pl.DataFrame) -> list[Problem]:
    """An error per run whose nonce another run shares: names under one nonce (the log's folders), or
    lineages under one name and nonce (job records at seq 0 by several writers). Readers given that
    nonce alone refuse it; one lineage's records would read as the other's."""
    problems = []
    names = log.group_by("nonce").agg(pl.col("name").unique().sort()).filter(pl.col("name").list.len() > 1)
    for row in names.sort("nonce").iter_rows(named=True):
        shared = ", ".join(row["name"])
        for name in row["name"]:
            label = f"{name}:{row['nonce']}"
            problems.append(Problem("nonce-collision", label, f"{label}: nonce {row['nonce']} is shared by "
                                    f"{len(row['name'])} runs ({shared}); a reader given the nonce alone "
                                    "(theseus show/sample/eval ROOT NONCE) refuses it: pass a node id or the name"))
    starts = (log.filter((pl.col("key") == schema.JOB) & (pl.col("seq") == 0))
              .group_by("name", "nonce").agg(pl.col("writer").unique().sort())
              .filter(pl.col("writer").list.len() > 1))
    for row in starts.sort("name", "nonce").iter_rows(named=True):
        label = f"{row['name']}:{row['nonce']}"
        problems.append(Problem("nonce-collision", label, f"{label}: {len(row['writer'])} lineages began under this "
                                f"name and nonce (job records at seq 0 by writers {', '.join(row['writer'])}); "
                                "their records read as one run"))
    return problems


def _reserved(log: pl.DataFrame) -> list[dict]:
    """The latest reserved record per (node, key), oldest first: node, seq, stamp, key, value."""
    reserved = latest_rows(log.lazy().filter(pl.col("key").str.starts_with("_")), ["node", "key"])
    frame = reserved.select("node", "name", "nonce", "seq", "stamp", "writer", "key", value_expr("str").alias("value"))
    return frame.sort(*ORDER).collect().to_dicts()


def _config_problems(records: list[dict], nonce: str | None) -> list[Problem]:
    """The recorded job configs a resume would refuse: YAML tags, resolver interpolations, not YAML."""
    out = []
    for r in records:
        if r["key"] == schema.CONFIG and r["value"] and (nonce is None or r["nonce"] == nonce):
            try:
                trust.plain_config(r["value"], f"node {r['node']} ({r['name']}:{r['nonce']}:{r['seq']})")
            except ValueError as e:
                out.append(Problem("unsafe-config", f"{r['name']}:{r['nonce']}", str(e)))
    return out


def _run_rows(nodes: pl.DataFrame) -> list[dict]:
    """Per run: name, nonce, node count, the sorted seqs, last node, last write, origin (seq 0's parent)."""
    runs = nodes.group_by("name", "nonce").agg(
        pl.len().alias("nodes"),
        pl.col("seq").sort().alias("seqs"),
        pl.col("node").sort_by("seq").last().alias("last_node"),
        pl.col("written").max(),
        pl.col("parent").filter(pl.col("seq") == 0).first().alias("origin"),
    )
    return runs.sort("written").to_dicts()


def _gaps(seqs: list[int]) -> tuple[tuple[int, int], ...]:
    """Missing seq ranges between 0 and the last seq.

    >>> _gaps([0, 1, 4, 5, 9])
    ((2, 3), (6, 8))
    """
    gaps, expect = [], 0
    for s in seqs:
        if s > expect:
            gaps.append((expect, s - 1))
        expect = max(expect, s + 1)
    return tuple(gaps)


# ---------------------------------------------------------------------------
# runs


def _runs(fs, base, rows, records, checkpoints, checked, known, problems) -> list[RunAudit]:
    """One :class:`RunAudit` per row of :func:`_run_rows`, with its problems appended to ``problems``."""
    by_run: dict[tuple[str, str], list[dict]] = {}  # by name and nonce: runs sharing a nonce stay apart
    for r in records:
        by_run.setdefault((r["name"], r["nonce"]), []).append(r)
    configs = {node: c.config for node, c in checked.items()}
    out = []
    for row in rows:
        name, nonce, origin = row["name"], row["nonce"], row["origin"]
        mine = by_run.get((name, nonce), [])
        latest = {r["key"]: r for r in mine}  # oldest first: the last record of each key wins
        value = {key: r["value"] for key, r in latest.items()}
        error = latest.get(schema.ERROR)
        resumes = tuple(
            Resume(r["node"], r["seq"], _previous(name, nonce, r["seq"]), r["seq"] - 1,
                   _previous(name, nonce, r["seq"]) in checkpoints)
            for r in mine if r["key"] == schema.JOB and r["seq"] > 0
        )
        ckpts = sorted((checked[r["node"]] for r in mine if r["key"] == schema.CHECKPOINT and r["node"] in checked),
                       key=lambda c: c.seq)
        run = RunAudit(
            name=name, nonce=nonce, job=value.get(schema.JOB), status=value.get(schema.STATUS),
            finished=None if schema.FINISHED not in value else value[schema.FINISHED] == "true",
            error=error["value"] if error else None, error_node=error["node"] if error else None,
            nodes=row["nodes"], first_seq=row["seqs"][0], last_seq=row["seqs"][-1], last_node=row["last_node"],
            written=row["written"], gaps=_gaps(row["seqs"]), parent=origin, resumes=resumes,
            checkpoints=tuple(_with_changes(fs, base, ckpts, origin if origin in checkpoints else None,
                                            checkpoints, configs)),
            job_source=value.get(schema.JOB_SOURCE),
        )
        problems += _run_problems(run, error, known)
        out.append(run)
    return out


def _run_problems(run: RunAudit, error: dict | None, known: set[str]) -> list[Problem]:
    """A run's lineage oddities (errors when inconsistent) and its failure or unfinished state (warnings)."""
    label, out = run.label, []
    missing = missing_job(run.job, run.job_source)
    if missing is not None:
        out.append(Problem("unregistered-job", label, f"{label}: {missing} (to resume, branch or verify it)",
                           WARNING))
    if run.parent is not None:
        if not _decodes(run.parent) or decode_id(run.parent)[1] == run.nonce:
            out.append(Problem("lineage", label,
                               f"seq 0 of {label} has parent {run.parent}, not a node of another run"))
        elif run.parent not in known:
            out.append(Problem("missing-parent", label, f"{label} branched from node {run.parent} "
                               f"({_describe(run.parent)}), which has no records in this root", WARNING))
    if run.first_seq != 0:
        out.append(Problem("lineage", label, f"{label} has no records before seq {run.first_seq} "
                           "(every run writes its job record at seq 0)", WARNING))
    for resume in run.resumes:
        if not resume.parent_checkpoint:
            out.append(Problem("lineage", label, f"{label} resumed at seq {resume.seq} from seq "
                               f"{resume.parent_seq}, which has no committed checkpoint", WARNING))
    if run.status == "failed":
        where = "?" if error is None else error["seq"]
        out.append(Problem("failed-run", label, f"{label} failed at seq {where}: {_last_line(run.error)}", WARNING))
    elif run.status == "running":
        when = dt.datetime.fromtimestamp(run.written / 1e9).isoformat(sep=" ", timespec="seconds")
        out.append(Problem("unfinished-run", label, f"{label} never finished: last record at seq {run.last_seq} "
                           f"written {when} (still running, or the process died)", WARNING))
    return out


def _previous(name: str, nonce: str, seq: int) -> str:
    return encode_id(name, nonce, seq - 1)


def _describe(node_id: str) -> str:
    name, nonce, seq = decode_id(node_id)
    return f"{name}:{nonce} seq {seq}"


def _last_line(text: str) -> str:
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "(no error text)"


def _with_changes(fs, base, ckpts, origin, checkpoints, configs) -> list[CheckpointAudit]:
    """Each checkpoint with its config changes from the one before (a branch's first: its origin's)."""
    out = []
    before_node = origin
    for c in ckpts:
        before = None
        if before_node is not None:
            before = configs.get(before_node)
            if before is None and before_node not in configs:  # outside the audit (another run): read it
                before = _load_config(fs, base, checkpoints[before_node])
                configs[before_node] = before
        changes = _diff(before, c.config) if before is not None and c.config is not None else ()
        out.append(dataclasses.replace(c, against=before_node, changes=changes))
        before_node = c.node
    return out


def _load_config(fs, base: str, path: str) -> dict | None:
    """The config of the checkpoint at ``path``; None when it cannot be read or the path leaves the root
    (``trust.checkpoint_folder``: the rule resume applies too)."""
    try:
        return parse_config(rootfs.read_regular(fs, f"{trust.checkpoint_folder(fs, base, path)}/{CONFIG_FILE}"))
    except Exception:
        return None


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """A nested config as dotted keys (how config changes are named).

    >>> flatten({"a": {"b": 1, "c": [2]}})
    {'a.b': 1, 'a.c': [2]}
    """
    if not isinstance(tree, dict) or not tree:
        return {prefix: tree} if prefix else {}
    out = {}
    for key, value in tree.items():
        out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def _diff(before: dict, after: dict) -> tuple[Change, ...]:
    """The keys whose values differ between two configs.

    >>> _diff({"t": {"lr": 1, "n": 2}}, {"t": {"lr": 3, "n": 2, "m": 4}})
    (Change(key='t.lr', before=1, after=3), Change(key='t.m', before=None, after=4))
    """
    a, b = flatten(before), flatten(after)
    return tuple(Change(k, a.get(k), b.get(k)) for k in sorted(a.keys() | b.keys())
                 if a.get(k) != b.get(k) or (k in a) != (k in b))


# ---------------------------------------------------------------------------
# objects no record references


def _artifact_folders(records: list[dict]) -> set[str]:
    """The folders that artifacts records name (published analyses): gc keeps them."""
    return {folder_of(r["value"]) for r in records if r["key"] == schema.ARTIFACTS and r["value"]}


def _unreferenced(fs, base: str, referenced: set[str], nonce: str | None, problems: list[Problem]) -> list[str]:
    """``objects/<name>`` folders no checkpoint record references (of run ``nonce`` only, when given)."""
    folder = f"{base}/{OBJECTS}"
    if rootfs.is_local(fs):
        try:
            rootfs.check_inside(fs, base, folder)
        except rootfs.NotPlainFile as e:
            problems.append(Problem("link", OBJECTS, f"{e}; gc deletes nothing through it", WARNING))
            return []
        names = sorted(n for n in _listdir(folder) if os.path.isdir(os.path.join(folder, n)))
    else:
        try:
            names = sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(folder, detail=False))
        except FileNotFoundError:
            names = []
    out = []
    for name in names:
        rel = f"{OBJECTS}/{name}"
        if rel in referenced or name.startswith("."):
            continue
        try:
            rootfs.check_inside(fs, base, f"{folder}/{name}")
        except rootfs.NotPlainFile as e:
            problems.append(Problem("link", rel, f"{e}; gc leaves it", WARNING))
            continue
        try:
            _, owner, _ = decode_id(name)
        except ValueError:
            if nonce is None:
                problems.append(Problem("unknown-object", rel, f"{rel} is not named by a node id; gc leaves it",
                                        WARNING))
            continue
        if nonce is not None and owner != nonce:
            continue
        complete = fs.exists(f"{folder}/{name}/{MANIFEST}")
        state = "a complete checkpoint" if complete else f"partial (no {MANIFEST})"
        problems.append(Problem("unreferenced-object", rel, f"{rel} ({_describe(name)}; {state}) is referenced by no "
                                "checkpoint record (left by a crash?); `theseus gc` deletes it", WARNING))
        out.append(rel)
    return out


def _temporaries(fs, base: str) -> list[Problem]:
    """A warning per temporary file of :func:`theseus.store.fs.publish` under the root: no reader lists
    one, so it costs only space; left by a killed writer, or being written right now."""
    out = []
    for path, mtime, size in rootfs.temporaries(fs, base):
        rel, age = relative(base, path), max(0.0, time.time() - mtime)
        out.append(Problem("temporary-file", rel, f"{rel} ({size} bytes, written {age:.0f} s ago) is a temporary file "
                           "left by a killed writer, or one being written now; no reader lists it; "
                           "`theseus gc` deletes it once older than --min-age", WARNING))
    return out


def _stray_folders(fs, base: str) -> list[Problem]:
    """A warning per folder of ``log/`` that is not ``name=<run name>/nonce=<nonce>``: readers skip it."""
    if not rootfs.is_local(fs):
        return []  # object stores have no empty folders, and a stray object's partition is not listed
    out, log = [], f"{base}/{LOG}"
    for name in sorted(_listdir(log)):
        rel = f"{LOG}/{name}"
        if not partition_ok("name=", name):
            out.append(Problem("stray-folder", rel, f"{rel} is not a run name's folder (log/name=<project.group.run>): "
                               "readers skip it", WARNING))
            continue
        for nonce in sorted(_listdir(f"{log}/{name}")):
            if not partition_ok("nonce=", nonce):
                out.append(Problem("stray-folder", f"{rel}/{nonce}", f"{rel}/{nonce} is not a run's folder "
                                   "(nonce=<6 hex characters>): readers skip it", WARNING))
    return out


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except (FileNotFoundError, NotADirectoryError):
        return []


def _newest_and_size(fs, folder: str) -> tuple[float, int]:
    """Modification time of the newest file under ``folder`` (the folder's own when empty) and total bytes."""
    if rootfs.is_local(fs):
        newest, size = os.stat(folder).st_mtime, 0
        for top, _, names in os.walk(folder):
            for name in names:
                st = os.lstat(os.path.join(top, name))  # a link's own time: its target may be outside the root
                newest, size = max(newest, st.st_mtime), size + st.st_size
        return newest, size
    found = fs.find(folder, detail=True)
    times = [_timestamp(info.get("mtime") or info.get("updated") or info.get("LastModified"))
             for info in found.values()]
    return max(times, default=0.0), sum(int(info.get("size") or 0) for info in found.values())


def _timestamp(value: Any) -> float:
    if isinstance(value, dt.datetime):
        return value.timestamp()
    if isinstance(value, str):
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    return float(value or 0.0)


def _keep(fs, base: str, name: str, nonce: str, rel: str) -> str | None:
    """Why gc must keep ``rel`` after all, from the owning run's log re-read just before the delete."""
    paths = list_segments(fs, base, name, nonce)
    if not paths:
        return f"its run {name}:{nonce} has no log records (a partial copy of the root?)"
    problems: list[Problem] = []
    log = _read_segments(fs, base, paths, problems)
    if problems:
        return problems[0].message
    if rel in {folder_of(p) for p in log.filter(pl.col("key").is_in(schema.FOLDER_KEYS))["str"].to_list()}:
        return "a checkpoint or artifacts record references it now"
    return None


def _remove(fs, base: str, folder: str) -> None:
    rootfs.check_inside(fs, base, folder)  # never delete through a link: it may point outside the root
    if rootfs.is_local(fs):

        shutil.rmtree(folder)
    else:
        fs.rm(folder, recursive=True)
