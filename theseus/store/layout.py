"""The names of a root's folders and of the files of a node's artifact folder.

A root is addressed by relative paths only (a copy of it is a complete root), so
these names are the root's format: every module spells them through here.

::

    <root>/log/name=<name>/nonce=<nonce>/<segment>.parquet   the event log
    <root>/view/v-<stamp>-<writer>.parquet                    compacted views of the log
    <root>/objects/<node-id>/                                 artifacts of one node:
        config.yaml  job.json  rng.json  MANIFEST.json        (MANIFEST.json written last)
        logs/process-<k>.log                                  output of each process of a dispatched launch
    <root>/data/<dataset>/                                    tokenized datasets
    <root>/meta/                                              per-root caches (the CPU's peak FLOPs)
    <root>/nonces/<nonce>/name=<name>/<writer>-<token>        claims of new lineages' nonces (empty files)

>>> f"<root>/{objects('Z2VuZXJhbC5kZWZhdWx0LmE6MTIzNDU2OjA')}/{MANIFEST}"
'<root>/objects/Z2VuZXJhbC5kZWZhdWx0LmE6MTIzNDU2OjA/MANIFEST.json'
"""

from __future__ import annotations

# folders of a root
LOG = "log"
VIEW = "view"
OBJECTS = "objects"
DATA = "data"
META = "meta"
NONCES = "nonces"

# files of a node's artifact folder (objects/<node-id>/)
MANIFEST = "MANIFEST.json"
CONFIG_FILE = "config.yaml"
JOB_FILE = "job.json"
RNG_FILE = "rng.json"
ANALYSIS = "analysis"  # folder of the files analyses publish; a checkpoint of the node never clears it
PROCESS_LOGS = "logs"  # folder of each process's output, from a dispatched launch


def objects(node_id: str) -> str:
    """The artifact folder of a node, relative to the root (what a checkpoint record holds).

    >>> objects("abc")
    'objects/abc'
    """
    return f"{OBJECTS}/{node_id}"
