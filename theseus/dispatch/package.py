"""Package the project's code for shipping: a tar.gz of the current commit.

``package_code(repo)`` returns ``(revision, tarball bytes)``: ``git archive HEAD``
of the repository, so what runs remotely is exactly a commit. A tree with
uncommitted changes to tracked files is refused (the run could not be traced
back to its code) unless ``allow_dirty=True``: then the working tree is packed
as it is (tracked files, and untracked ones git does not ignore, since changed
code may import them) and the revision is ``<commit>-dirty-<hash of the
content>``. A clean tree ships the commit alone. The tarball is reproducible:
the same content gives the same bytes (no timestamps in the gzip header).

>>> import io, subprocess, tarfile, tempfile, pathlib
>>> repo = pathlib.Path(tempfile.mkdtemp())
>>> _ = subprocess.run(["git", "init", "-q", str(repo)], check=True)
>>> _ = (repo / "hello.py").write_text("print('hi')\\n")
>>> _ = subprocess.run(["git", "-C", str(repo), "add", "hello.py"], check=True)
>>> _ = subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
...                     "commit", "-qm", "init"], check=True)
>>> revision, data = package_code(repo)
>>> len(revision), tarfile.open(fileobj=io.BytesIO(data)).getnames()
(40, ['hello.py'])
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import subprocess
import tarfile

from theseus.errors import BadInput, MissingFile, Refused

__all__ = ["DirtyTreeError", "package_code"]


class DirtyTreeError(Refused, ValueError):
    """The repository has uncommitted changes to tracked files (and ``allow_dirty`` is off)."""


def _git(repo: str, *args: str, binary: bool = False) -> str | bytes:
    try:
        out = subprocess.run(["git", "-C", repo, *args], capture_output=True, check=True)
    except FileNotFoundError:
        raise MissingFile("git is not installed: theseus ships code as a git commit") from None
    except subprocess.CalledProcessError as e:
        message = e.stderr.decode(errors="replace").strip()
        raise BadInput(f"`git {' '.join(args)}` failed in {repo}: {message}") from None
    return out.stdout if binary else out.stdout.decode()


def _gzip(tar: bytes) -> bytes:
    return gzip.compress(tar, compresslevel=6, mtime=0)


def _working_tree_tar(repo: str) -> bytes:
    """A tar of the working tree's tracked and not-ignored untracked files (deleted ones skipped), sorted, no owners."""
    listed = _git(repo, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    names = sorted({n for n in listed.split("\0") if n})
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in names:
            path = os.path.join(repo, name)
            if not os.path.lexists(path) or os.path.isdir(path):  # deleted, or a submodule
                continue
            info = tar.gettarinfo(path, arcname=name)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            if info.isreg():
                with open(path, "rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    return buffer.getvalue()


def package_code(repo: str | os.PathLike = ".", allow_dirty: bool = False) -> tuple[str, bytes]:
    """``(revision, tar.gz bytes)`` of the project at its current commit (see the module docstring).

    >>> import subprocess, tempfile
    >>> repo = tempfile.mkdtemp()
    >>> _ = subprocess.run(["git", "init", "-q", repo], check=True)
    >>> package_code(repo)
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: ... has no commit yet: commit the code to ship (theseus ships a git commit)
    """
    repo = os.path.abspath(os.fspath(repo))
    if not os.path.isdir(repo):
        raise MissingFile(f"no repository folder {repo}")
    top = _git(repo, "rev-parse", "--show-toplevel").strip()
    try:
        commit = _git(top, "rev-parse", "--verify", "HEAD").strip()
    except ValueError:
        raise BadInput(f"{top} has no commit yet: commit the code to ship (theseus ships a git commit)") from None
    changed = [line[3:] for line in _git(top, "status", "--porcelain", "--untracked-files=no").splitlines() if line]
    if not changed:
        return commit, _gzip(_git(top, "archive", "--format=tar", commit, binary=True))
    if not allow_dirty:
        shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
        raise DirtyTreeError(
            f"{top} has uncommitted changes ({shown}): commit them so the run can be traced to its code, "
            "or pass allow_dirty=True (--allow-dirty) to ship the working tree as it is")
    tar = _working_tree_tar(top)
    return f"{commit}-dirty-{hashlib.sha256(tar).hexdigest()[:12]}", _gzip(tar)
