"""Every published analysis against its own MANIFEST.json: files present, sizes, and sha256 of every byte.

An analysis publishes its files under ``objects/<node-id>/analysis/<name>/`` and seals the folder
with a ``MANIFEST.json`` written last (`theseus.store.manifest`, the checkpoints' format). A file
the manifest lists that is missing or differs, or a file it does not list, is an error naming the
file; a folder without a manifest (a publication interrupted by a crash) and a file directly under
``analysis/`` (no manifest can cover it) are warnings.

>>> import tempfile
>>> from theseus.audit.reading import open_root
>>> fs, base = open_root(tempfile.mkdtemp())
>>> check_analyses(fs, base, ["objects/abc"], True, None, [])
(0, 0)
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from theseus.audit.reading import file_digest, first_line, list_files, thread_count
from theseus.audit.report import WARNING, Problem
from theseus.store import fs as rootfs
from theseus.store import trust
from theseus.store.layout import ANALYSIS
from theseus.store.manifest import MANIFEST, FileEntry
from theseus.store.manifest import parse as parse_manifest

__all__ = ["check_analyses"]


def check_analyses(fs, base: str, folders, verify: bool, threads: int | None,
                   problems: list[Problem]) -> tuple[int, int]:
    """Check the analyses published in the node folders ``folders`` (``objects/<id>``, relative to the
    root); problems found are appended to ``problems``. Returns ``(files checked, bytes hashed)``.

    >>> import tempfile, os
    >>> from theseus.audit.reading import open_root
    >>> fs, base = open_root(tempfile.mkdtemp())
    >>> os.makedirs(f"{base}/objects/n/analysis/norms")
    >>> open(f"{base}/objects/n/analysis/norms/a.npy", "wb").close()
    >>> found = []
    >>> check_analyses(fs, base, ["objects/n"], True, None, found), [p.kind for p in found]
    ((1, 0), ['incomplete-analysis'])
    """
    checks: list[tuple[str, FileEntry]] = []  # (folder of one analysis, relative to the root; listed file)
    files = 0
    for folder in sorted(set(folders)):
        try:
            where = trust.checkpoint_folder(fs, base, folder)  # inside the root, links not followed
        except ValueError:
            continue  # the checkpoint audit reports a path that leaves the root
        present = list_files(fs, f"{where}/{ANALYSIS}")
        files += len(present)
        by_analysis: dict[str, dict[str, int]] = {}
        for rel, size in sorted(present.items()):
            name, _, inner = rel.partition("/")
            if not inner:
                problems.append(Problem("unsealed-analysis-file", f"{folder}/{ANALYSIS}/{rel}",
                                        f"{folder}/{ANALYSIS}/{rel} lies outside any analysis folder, so no "
                                        f"{MANIFEST} covers it: the audit cannot check it", WARNING))
                continue
            by_analysis.setdefault(name, {})[inner] = size
        for name, inside in by_analysis.items():
            checks += _judge(fs, where, f"{folder}/{ANALYSIS}/{name}", inside, problems)
    if not verify or not checks:
        return files, 0
    with ThreadPoolExecutor(threads or thread_count(fs, len(checks))) as pool:
        digests = list(pool.map(lambda c: file_digest(fs, f"{base}/{c[0]}/{c[1].path}", False), checks))
    hashed = 0
    for (folder, entry), result in zip(checks, digests, strict=True):
        where = f"{folder}/{entry.path}"
        if isinstance(result, Exception):
            problems.append(Problem("unreadable-file", where, f"{where} cannot be read: {first_line(result)}"))
            continue
        size, digest, _ = result
        hashed += size
        if size != entry.size or digest != entry.sha256:
            problems.append(Problem("corrupt-file", where, f"{where}: sha256 {digest[:16]}... != "
                                    f"{entry.sha256[:16]}... in {folder}/{MANIFEST} (altered after it was published)"))
    return files, hashed


def _judge(fs, where: str, folder: str, present: dict[str, int],
           problems: list[Problem]) -> list[tuple[str, FileEntry]]:
    """Compare one analysis folder's files with its manifest; the files left to hash."""
    if MANIFEST not in present:
        problems.append(Problem("incomplete-analysis", folder, f"{folder} has no {MANIFEST}: its publication was "
                                "interrupted (a crash?); no reader trusts it", WARNING))
        return []
    name = folder.rsplit("/", 1)[1]
    try:
        listed = parse_manifest(rootfs.read_regular(fs, f"{where}/{ANALYSIS}/{name}/{MANIFEST}"))
    except Exception as e:
        problems.append(Problem("bad-manifest", f"{folder}/{MANIFEST}", f"malformed {folder}/{MANIFEST}: "
                                f"{first_line(e)}"))
        return []
    out = []
    for rel, entry in sorted(listed.items()):
        if rel not in present:
            problems.append(Problem("missing-file", f"{folder}/{rel}", f"{folder}/{rel} is listed in {MANIFEST} "
                                    "but missing"))
        elif present[rel] != entry.size:
            problems.append(Problem("corrupt-file", f"{folder}/{rel}", f"{folder}/{rel}: size {present[rel]} != "
                                    f"{entry.size} in {MANIFEST} (altered after it was published)"))
        else:
            out.append((folder, entry))
    for rel in sorted(set(present) - set(listed) - {MANIFEST}):
        problems.append(Problem("unlisted-file", f"{folder}/{rel}", f"{folder}/{rel} is not listed in {MANIFEST}: "
                                "the folder changed after it was published"))
    return out
