"""The one error family: every error theseus raises on purpose is a :class:`TheseusError` of one kind.

A kind says whose the problem is, so the CLI and the UI answer it without guessing from a
builtin type: :class:`BadInput` (the caller asked for something wrong: exit 2, HTTP 400),
:class:`NotFound` (the root does not hold it: exit 2, HTTP 404), :class:`CorruptData` (stored
bytes that cannot be read as what they claim) and :class:`Refused` (a request theseus will not
carry out, to keep the store or a host safe). Anything else (a ``KeyError`` from a bug, a
``TypeError``) is a bug: the CLI prints its traceback and exits :data:`EXIT_BUG`, the UI
answers 500. Each kind also keeps the builtin base callers already catch (``ValueError``,
``LookupError``), so ``except ValueError`` around a theseus call still works. This module
imports nothing of theseus, so every room can raise its kinds.

>>> issubclass(BadInput, ValueError) and issubclass(NotFound, LookupError)
True
>>> isinstance(KeyError("a bug"), TheseusError)
False
>>> issubclass(MissingFile, FileNotFoundError) and issubclass(AlreadyExists, FileExistsError)
True
"""

from __future__ import annotations

#: The CLI's exit code for an error that is not a :class:`TheseusError` (a bug): BSD's EX_SOFTWARE.
EXIT_BUG = 70


class TheseusError(Exception):
    """An error theseus raises on purpose, with a message that says what is wrong by itself.

    >>> str(TheseusError("no run 'abc123' in /r"))
    "no run 'abc123' in /r"
    """


class BadInput(TheseusError, ValueError):
    """The caller asked for something wrong: an unknown name, a value out of range, a malformed argument.

    >>> isinstance(BadInput("steps must be positive"), ValueError)
    True
    """


class NotFound(TheseusError, LookupError):
    """The root (or a registry) does not hold what was named: a run, a node, a dataset.

    >>> str(NotFound("no run with nonce abcdef"))  # its message as given, not quoted as a KeyError's
    'no run with nonce abcdef'
    """


class CorruptData(TheseusError, ValueError):
    """Stored bytes that cannot be read as what they claim to be (a damaged segment, a truncated file).

    >>> isinstance(CorruptData("segment 3: bad footer"), TheseusError)
    True
    """


class Refused(TheseusError):
    """A request theseus will not carry out, to keep the store or a host safe (a dirty tree, a taken nonce).

    >>> isinstance(Refused("the tree has uncommitted changes"), ValueError)
    False
    """


class MissingFile(NotFound, FileNotFoundError):
    """A file or folder the caller named is not there (a root, an inventory, an evaluation's data).

    Also a ``FileNotFoundError``, so callers that catch that (a root a writer creates) still do.

    >>> e = MissingFile("no inventory at /home/me/.theseus.yaml")
    >>> isinstance(e, FileNotFoundError), str(e)
    (True, 'no inventory at /home/me/.theseus.yaml')
    """


class AlreadyExists(Refused, FileExistsError):
    """Something the caller asked to create is there already (a dataset, a file): theseus keeps it.

    Also a ``FileExistsError``, so callers that catch that still do.

    >>> isinstance(AlreadyExists("dataset 'd' exists"), FileExistsError)
    True
    """


class UnknownName(NotFound, KeyError):
    """A name a listing does not hold (a host or a cluster of the inventory); the message lists the names.

    Also a ``KeyError`` for callers that catch one, printed as its message, not quoted as a key.

    >>> str(UnknownName("no host 'bx' in the inventory (hosts: box)"))
    "no host 'bx' in the inventory (hosts: box)"
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown name"
