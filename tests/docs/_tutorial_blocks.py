"""Run the fenced code blocks of a Markdown tutorial in order: the engine of the docs test.

Conventions (see docs/README.md):

- ```python        runs; every python block of one file shares one namespace, in one interpreter
- ```python no-run is shown, not run (kept for the few that need the network)
- ```bash          runs as one script (``bash -euo pipefail``)
- ```console       lines starting with ``$ `` are commands (each runs), the others are their output
- anything else (```text, ```yaml...) is shown, not run

The tutorials' root ``/tmp/theseus-tutorial`` is replaced by the root given here
(so ``/tmp/theseus-tutorial-copy`` becomes ``<root>-copy``), and ``uv run `` is
dropped from shell commands: they run with this interpreter's ``bin`` folder first
on ``PATH``, so ``theseus`` and ``python`` are the project's.

    python tests/docs/_tutorial_blocks.py docs/tutorials/running-experiments.md ROOT WORKDIR
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import traceback

PLACEHOLDER = "/tmp/theseus-tutorial"
RUN_LANGS = ("python", "bash", "console")


@dataclasses.dataclass(frozen=True)
class Block:
    """One fenced code block: its language, the rest of its info string, its text and first code line (1-based)."""

    lang: str
    flags: tuple[str, ...]
    code: str
    line: int

    @property
    def runs(self) -> bool:
        """Whether the docs test executes this block."""
        return self.lang in RUN_LANGS and "no-run" not in self.flags

    def commands(self) -> list[str]:
        """The shell commands of a bash block (the whole block) or a console block (its ``$`` lines)."""
        if self.lang == "bash":
            return [self.code]
        return [line[2:] for line in self.code.splitlines() if line.startswith("$ ")]


def parse(text: str) -> list[Block]:
    """The fenced code blocks of a Markdown text, in order.

    >>> [(b.lang, b.flags, b.line, b.runs) for b in parse("# t\\n```python no-run\\nx = 1\\n```\\n```text\\nout\\n```\\n")]
    [('python', ('no-run',), 3, False), ('text', (), 6, False)]
    """  # noqa: E501 - the doctest's input is one line
    from markdown_it import MarkdownIt

    out = []
    for token in MarkdownIt("commonmark").parse(text):
        if token.type != "fence":
            continue
        info = token.info.split()
        lang, flags = (info[0].lower(), tuple(info[1:])) if info else ("", ())
        out.append(Block(lang, flags, token.content, token.map[0] + 2))
    return out


def substitute(code: str, root: str, shell: bool) -> str:
    """The code with the tutorial root replaced by ``root`` (and ``uv run `` dropped from shell code).

    >>> substitute("uv run theseus ls /tmp/theseus-tutorial-copy", "/x/root", shell=True)
    'theseus ls /x/root-copy'
    """
    code = code.replace(PLACEHOLDER, root.rstrip("/"))
    return re.sub(r"(?<![\w/-])uv run ", "", code) if shell else code


def shell_env() -> dict[str, str]:
    """This environment with this interpreter's ``bin`` folder first on ``PATH``."""
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


def run_file(path: str, root: str, workdir: str) -> int:
    """Run every runnable block of ``path`` in order; 0 when all pass, else 1 (naming the failing block)."""
    with open(path, encoding="utf-8") as f:
        blocks = [b for b in parse(f.read()) if b.runs]
    namespace: dict = {"__name__": "__main__"}
    os.chdir(workdir)
    for i, block in enumerate(blocks):
        where = f"{path}:{block.line} ({block.lang} block {i + 1}/{len(blocks)})"
        print(f"----- {where}", flush=True)
        try:
            if block.lang == "python":
                # pad with newlines so tracebacks name the tutorial's own line numbers
                source = "\n" * (block.line - 1) + substitute(block.code, root, shell=False)
                exec(compile(source, path, "exec"), namespace)
            else:
                for command in block.commands():
                    command = substitute(command, root, shell=True)
                    done = subprocess.run(["bash", "-euo", "pipefail", "-c", command], env=shell_env())
                    if done.returncode != 0:
                        raise RuntimeError(f"command exited with status {done.returncode}: {command.strip()}")
        except BaseException:
            sys.stdout.flush()
            traceback.print_exc()
            print(f"TUTORIAL BLOCK FAILED: {where}", file=sys.stderr, flush=True)
            return 1
        sys.stdout.flush()
        sys.stderr.flush()
    print(f"----- {path}: {len(blocks)} blocks ran", flush=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: python tests/docs/_tutorial_blocks.py TUTORIAL.md ROOT WORKDIR")
    tutorial = os.path.abspath(sys.argv[1])
    sys.exit(run_file(tutorial, os.path.abspath(sys.argv[2]), os.path.abspath(sys.argv[3])))
