"""The ``theseus sample`` command: text from any checkpoint of a run.

::

    theseus sample ROOT NONCE "The meaning of" -n 3 --temperature 0.8 --top-k 200
    theseus sample ROOT NODE_ID "1+2=" --temperature 0        # greedy
    theseus sample ROOT NONCE "What is 1+2?" --chat            # as a user's message, in the chat template

A nonce means that run's last committed checkpoint. Each sample is printed whole
(prompt and continuation), one after another under a ``--- sample i`` line. Bad input
(unknown run or node, a node without a checkpoint, an empty prompt) exits 2; nothing is
written to the root.

>>> import typer
>>> from typer.testing import CliRunner
>>> app = typer.Typer(); register(app)
>>> CliRunner().invoke(app, ["sample", "/tmp/nowhere", "abc123", ""]).exit_code
2
"""

from __future__ import annotations

from typing import Annotated

import typer

from theseus.cli.errors import ROOT_ERRORS, fail, log_to_stderr, message


def sample(
    root: Annotated[str, typer.Argument(help="The root folder or gs:// URL")],
    target: Annotated[str, typer.Argument(metavar="NODE_ID|NONCE",
                                          help="A node with a checkpoint, or a run's nonce (its last checkpoint)")],
    prompt: Annotated[str, typer.Argument(help="The text to continue")],
    n: Annotated[int, typer.Option("-n", help="Number of samples, 1..1024 (decoded as one batch)")] = 1,
    max_new_tokens: Annotated[int | None, typer.Option(
        "--max-new-tokens", help="New tokens per sample (default 64, or what the block size leaves)")] = None,
    temperature: Annotated[float, typer.Option(help="Sampling temperature, finite and >= 0; 0 is greedy")] = 1.0,
    top_k: Annotated[int, typer.Option("--top-k", help="Draw from the k most likely tokens only (0: all)")] = 0,
    top_p: Annotated[float, typer.Option("--top-p", help="Draw from the smallest set of probability p (1: all)")] = 1.0,
    seed: Annotated[int, typer.Option(help="Seed of the draws, 0..2**32-1: the same seed, the same text")] = 0,
    stop: Annotated[list[str] | None, typer.Option("--stop", help="End a sample at this string; repeatable")] = None,
    chat: Annotated[bool, typer.Option("--chat", help="PROMPT is a user's message: render it with the tokenizer's "
                                                      "chat template and sample the assistant's answer")] = False,
    log_level: Annotated[str, typer.Option("--log-level", help="loguru level of the trainer's log")] = "WARNING",
) -> None:
    """Print N samples continuing PROMPT from the checkpoint of NODE_ID, or of a run's last one (its NONCE).

    Exit status 2 on bad input: unknown run or node, no checkpoint, an empty prompt, a
    sample longer than the model's block size, more samples than fit in memory at once
    (-n is at most 1024). Nothing is written to the root.
    \f
    >>> import typer
    >>> from typer.testing import CliRunner
    >>> app = typer.Typer(); register(app)
    >>> result = CliRunner().invoke(app, ["sample", "/tmp/nowhere", "not-an-id", "hi"])
    >>> result.exit_code
    2
    """
    # lazily: sampling loads JAX, which the other commands never need
    from theseus.replay.sample import sample as run_sample
    from theseus.store import EmptyResult

    log_to_stderr(log_level)
    try:
        node, samples = run_sample(root, target, prompt, n, max_new_tokens=max_new_tokens, temperature=temperature,
                                   top_k=top_k, top_p=top_p, seed=seed, stop=stop, chat=chat)
    except EmptyResult as e:
        fail(str(e), 2)
    except (*ROOT_ERRORS, MemoryError) as e:
        fail(message(e), 2)
    print(f"# {node.name}:{node.nonce}:{node.seq} ({node.id})")
    for i, s in enumerate(samples):
        print(f"--- sample {i} ({s.stop}, {len(s.tokens)} tokens)")
        print(s.prompt + s.text)


def register(app: typer.Typer) -> None:
    """Add ``sample`` to a Typer app.

    >>> app = typer.Typer(); register(app)
    >>> [c.name for c in app.registered_commands]
    ['sample']
    """
    app.command("sample")(sample)
