"""Every committed checkpoint against its MANIFEST.json: files present, sizes, and sha256 of every byte.

One thread pool for all files of all checkpoints (object stores are latency-bound);
each file is read once, and ``config.yaml``, ``checkpoint/index.json`` and ``job.json``
are parsed from the bytes hashed. ``job.json`` names the node a folder was saved for: a
folder that another node's record references (swapped or copied folders) is a problem
naming both nodes.

>>> import tempfile
>>> from theseus.audit.reading import open_root
>>> fs, base = open_root(tempfile.mkdtemp())
>>> check_checkpoints(fs, base, [], True, None, [])
{}
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from theseus.audit.reading import INDEX, file_digest, first_line, list_files, parse_config, thread_count
from theseus.audit.report import ERROR, WARNING, CheckpointAudit, Problem
from theseus.store import fs as rootfs
from theseus.store import trust
from theseus.store.layout import ANALYSIS, CONFIG_FILE, JOB_FILE, OBJECTS
from theseus.store.manifest import MANIFEST, FileEntry
from theseus.store.manifest import parse as parse_manifest
from theseus.store.node import describe


def folder_of(path: str) -> str:
    """The ``objects/<id>`` folder a checkpoint path lies in (the path itself otherwise).

    >>> folder_of("objects/abc/checkpoint"), folder_of("elsewhere")
    ('objects/abc', 'elsewhere')
    """
    parts = (path or "").split("/")
    return "/".join(parts[:2]) if len(parts) >= 2 and parts[0] == OBJECTS else path


def check_checkpoints(fs, base, wanted, verify, threads, problems) -> dict[str, CheckpointAudit]:
    """List, size-check and (``verify``) hash every file of every checkpoint; one pool for all files.

    ``wanted`` are checkpoint records (``node``, ``seq``, ``value``: the folder); problems found are
    appended to ``problems``; the result is one :class:`CheckpointAudit` per node.

    >>> import tempfile
    >>> from theseus.audit.reading import open_root
    >>> fs, base = open_root(tempfile.mkdtemp())
    >>> found = []
    >>> checked = check_checkpoints(fs, base, [{"node": "n", "seq": 1, "value": "objects/n"}], True, None, found)
    >>> checked["n"].ok, [p.kind for p in found]
    (False, ['missing-checkpoint'])
    """
    out: dict[str, CheckpointAudit] = {}
    if not wanted:
        return out
    workers = threads or thread_count(fs, 10**6)
    with ThreadPoolExecutor(workers) as pool:
        opened = list(pool.map(lambda w: _open_checkpoint(fs, base, w["value"]), wanted))
        tasks = []  # (checkpoint index, entry)
        for i, (listed, present, _) in enumerate(opened):
            for rel, entry in (listed or {}).items():
                if rel in present and present[rel] == entry.size and (verify or rel in _PARSED):
                    tasks.append((i, rel))
        digests = list(pool.map(lambda t: file_digest(fs, f"{base}/{wanted[t[0]]['value']}/{t[1]}",
                                                  t[1] in _PARSED),
                                tasks))
    results: list[dict[str, Any]] = [{} for _ in wanted]
    for (i, rel), digest in zip(tasks, digests, strict=True):
        results[i][rel] = digest
    parsed: dict[tuple[str, bytes], Any] = {}  # a run's checkpoints share their config and index: parse each text once
    for record, (listed, present, failure), hashed in zip(wanted, opened, results, strict=True):
        node, seq, path = record["node"], record["seq"], record["value"]
        found: list[Problem] = []
        if failure is not None:
            found.append(failure)
            out[node] = CheckpointAudit(node, seq, path, len(present), sum(present.values()), False if verify else None,
                                        None, None, (), 1)
        else:
            out[node] = _judge(record, listed, present, hashed, verify, found, parsed)
        problems += found
    return out


_PARSED = (CONFIG_FILE, INDEX, JOB_FILE)  # files read for their content as well as hashed


def _open_checkpoint(fs, base: str, path: str) -> tuple[dict[str, FileEntry] | None, dict[str, int], Problem | None]:
    """(manifest entries by path, files present with sizes, or the problem that stops the check)."""
    try:
        folder = trust.checkpoint_folder(fs, base, path)  # the rule resume applies too
    except ValueError as e:
        return None, {}, Problem("bad-checkpoint-path", str(path), str(e))
    present = {rel: size for rel, size in list_files(fs, folder).items()
               if not rel.startswith(f"{ANALYSIS}/")}  # published analyses: sealed by their own manifests
    if not present:
        return None, present, Problem("missing-checkpoint", path, f"checkpoint folder {path} is missing or empty, "
                                      "but a checkpoint record references it")
    if MANIFEST not in present:
        return None, present, Problem("incomplete-checkpoint", path, f"checkpoint {path} has no {MANIFEST}, "
                                      "but a checkpoint record references it (commit order broken)")
    try:
        listed = parse_manifest(rootfs.read_regular(fs, f"{folder}/{MANIFEST}"))
    except Exception as e:
        return None, present, Problem("bad-manifest", f"{path}/{MANIFEST}",
                                      f"malformed {path}/{MANIFEST}: {first_line(e)}")
    return listed, present, None


def _array_of(rel: str, arrays: list[str]) -> str | None:
    """The array (leaf path of index.json) a checkpoint file belongs to.

    >>> _array_of("checkpoint/params/w/c/0/1", ["params/w", "step"])
    'params/w'
    """
    if not rel.startswith("checkpoint/"):
        return None
    inner = rel[len("checkpoint/"):]
    owners = [a for a in arrays if inner.startswith(a + "/")]
    if owners:
        return max(owners, key=len)
    for marker in ("/zarr.json", "/c/"):  # no index: the zarr3 layout still names the array
        if marker in inner:
            return inner.split(marker)[0]
    return inner[:-2] if inner.endswith("/c") else None


def _judge(record: dict[str, Any], listed, present, hashed, verify, found, cache) -> CheckpointAudit:
    """Compare the manifest of checkpoint ``record`` with the files present and their digests."""
    node, seq, path = record["node"], record["seq"], record["value"]

    def bad(kind: str, rel: str, message: str) -> None:
        found.append(Problem(kind, f"{path}/{rel}", message))

    parsed = _parse_hashed(path, hashed, cache, bad)
    index, config = parsed.get(INDEX), parsed.get(CONFIG_FILE)
    leaves = index.get("leaves") if isinstance(index, dict) else None
    arrays = ([str(leaf.get("path", "")) for leaf in leaves if isinstance(leaf, dict)]
              if isinstance(leaves, list) else [])
    owner = {rel: _array_of(rel, arrays) or "" for rel in listed}
    _judge_listing(path, listed, present, arrays, owner, bad)
    hashed_bytes = _judge_contents(path, listed, present, hashed, owner, verify, bad)
    saved_for = _saved_for(parsed.get(JOB_FILE))
    if saved_for is not None and saved_for != node:
        found.append(Problem("wrong-node", path, f"checkpoint {path} of {describe(node)} holds the checkpoint of "
                             f"{describe(saved_for)} (its {JOB_FILE}): folders swapped or copied; restoring it is "
                             "refused"))
    if config is None and CONFIG_FILE not in listed:
        found.append(Problem("no-config", path, f"checkpoint {path} has no {CONFIG_FILE}", WARNING))
    errors = sum(p.severity == ERROR for p in found)
    return CheckpointAudit(node, seq, path, len(present), sum(present.values()), (errors == 0) if verify else None,
                           config, None, (), errors, hashed_bytes if verify else 0)


def _parse_hashed(path: str, hashed, cache, bad) -> dict[str, Any]:
    """The index, config and job files parsed from the bytes hashed (each text once through ``cache``,
    shared by a run's checkpoints); one that does not parse is reported through ``bad``."""
    parsed = {}
    for rel, parse in ((INDEX, json.loads), (CONFIG_FILE, parse_config), (JOB_FILE, json.loads)):
        result = hashed.get(rel)
        if isinstance(result, tuple) and result[2] is not None:
            try:
                if (rel, result[2]) not in cache:
                    cache[rel, result[2]] = parse(result[2])
                parsed[rel] = cache[rel, result[2]]
            except Exception as e:
                bad("unparsable-file", rel, f"{path}/{rel} cannot be parsed: {first_line(e)}")
    return parsed


def _judge_listing(path: str, listed, present, arrays: list[str], owner: dict[str, str], bad) -> None:
    """Report through ``bad`` the files listed but missing (a whole array missing as one), the arrays the
    index names that the manifest lacks, and the files present that the manifest does not list."""
    files_of: dict[str, int] = {}
    for array in owner.values():
        files_of[array] = files_of.get(array, 0) + 1
    by_array: dict[str, list[str]] = {}
    for rel in sorted(set(listed) - set(present)):
        by_array.setdefault(owner[rel], []).append(rel)
    for array, rels in sorted(by_array.items()):
        if array and len(rels) == files_of[array]:
            bad("missing-array", f"checkpoint/{array}", f"array {array} of checkpoint {path} is missing "
                f"({len(rels)} files listed in {MANIFEST}: {path}/checkpoint/{array}/)")
        else:
            for rel in rels:
                bad("missing-file", rel, f"{path}/{rel} is listed in {MANIFEST} but missing"
                    + (f" (array {array})" if array else ""))
    for array in arrays:
        if f"checkpoint/{array}/zarr.json" not in listed:
            bad("unlisted-array", f"checkpoint/{array}", f"array {array} is in {INDEX} but not in {MANIFEST}")
    for rel in sorted(set(present) - set(listed) - {MANIFEST}):
        bad("unlisted-file", rel, f"{path}/{rel} is not listed in {MANIFEST}: the folder changed after its commit")


def _judge_contents(path: str, listed, present, hashed, owner: dict[str, str], verify: bool, bad) -> int:
    """Report through ``bad`` each present file whose size, readability or (``verify``) sha256 differs
    from its manifest entry; the bytes hashed."""
    hashed_bytes = 0
    for rel, entry in sorted(listed.items()):
        if rel not in present:
            continue
        array = owner[rel]
        where = f"{path}/{rel}" + (f" (array {array})" if array else "")
        if present[rel] != entry.size:
            bad("corrupt-file", rel, f"{where}: size {present[rel]} != {entry.size} in {MANIFEST}")
            continue
        result = hashed.get(rel)
        if result is None:
            continue
        if isinstance(result, Exception):
            bad("unreadable-file", rel, f"{where} cannot be read: {first_line(result)}")
            continue
        size, digest, _ = result
        hashed_bytes += size
        if size != entry.size:
            bad("corrupt-file", rel, f"{where}: read {size} bytes, {entry.size} in {MANIFEST}")
        elif verify and digest != entry.sha256:
            bad("corrupt-file", rel, f"{where}: sha256 {digest[:16]}... != {entry.sha256[:16]}... in {MANIFEST}")
    return hashed_bytes


def _saved_for(job: Any) -> str | None:
    """The node id a parsed ``job.json`` names (None: none named).

    >>> _saved_for({"node": "abc"}), _saved_for([1])
    ('abc', None)
    """
    node = job.get("node") if isinstance(job, dict) else None
    return node if isinstance(node, str) and node else None

