"""The ``theseus audit`` and ``theseus gc`` commands: integrity of a root, and its garbage.

``theseus audit ROOT [NONCE]`` prints each run's lineage, status, checkpoints
(checksums, config changes) and every problem found; it exits 1 when any
integrity check fails, 2 on bad input. ``--json`` prints the report for
machines. ``theseus gc ROOT [--dry-run]`` deletes object folders that no
checkpoint record references.

>>> import tempfile
>>> from typer.testing import CliRunner
>>> from theseus.cli import app
>>> CliRunner().invoke(app, ["audit", tempfile.mkdtemp()]).exit_code
0
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from theseus.audit import AuditReport, CheckpointAudit, RunAudit, audit, flatten, gc
from theseus.cli.errors import reported
from theseus.store.node import decode_id

_SHOWN_GAPS = 4
_SHOWN_CHANGES = 12


def _size(n: int) -> str:
    """Bytes in a readable unit.

    >>> _size(1536), _size(3 << 30)
    ('1.5 KiB', '3.0 GiB')
    """
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def _count(n: int, noun: str) -> str:
    """``n noun`` with an s when n != 1.

    >>> _count(1, "run"), _count(2, "run")
    ('1 run', '2 runs')
    """
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _short(value) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 40 else text[:37] + "..."


def _gaps(run: RunAudit) -> str:
    if not run.gaps:
        return "no gaps"
    shown = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in run.gaps[:_SHOWN_GAPS])
    more = ", ..." if len(run.gaps) > _SHOWN_GAPS else ""
    return f"{_count(len(run.gaps), 'gap')} in seq ({shown}{more})"


def _node(node_id: str | None) -> str:
    """``name:nonce seq k`` of a node id (the id itself when it is not a node id)."""

    if node_id is None:
        return "-"
    try:
        name, nonce, seq = decode_id(node_id)
    except ValueError:
        return node_id
    return f"{name}:{nonce} seq {seq}"


def _against(ckpt: CheckpointAudit, run: RunAudit) -> str:

    _, nonce, seq = decode_id(ckpt.against)
    return f"seq {seq}" if nonce == run.nonce else _node(ckpt.against)


def _config_lines(ckpt: CheckpointAudit, run: RunAudit) -> list[str]:
    if ckpt.config is None:
        return ["[yellow]no config[/yellow]"]
    if ckpt.against is None:
        return [f"config: {len(flatten(ckpt.config))} keys"]
    if not ckpt.changes:
        return [f"config: same as {escape(_against(ckpt, run))}"]
    lines = [f"config: {_count(len(ckpt.changes), 'change')} from {escape(_against(ckpt, run))}"]
    for change in ckpt.changes[:_SHOWN_CHANGES]:
        lines.append(f"    {escape(change.key)}: {escape(_short(change.before))} -> {escape(_short(change.after))}")
    if len(ckpt.changes) > _SHOWN_CHANGES:
        lines.append(f"    ... and {len(ckpt.changes) - _SHOWN_CHANGES} more (--json lists them all)")
    return lines


def _status(run: RunAudit) -> str:
    colour = {"finished": "green", "failed": "red", "running": "yellow"}.get(run.status or "", "white")
    return f"[{colour}]{escape(run.status or 'no status')}[/{colour}]"


def _print_run(run: RunAudit, say, show_config: bool) -> None:
    say("")
    source = f" ({run.job_source})" if run.job_source else ""
    say(f"[bold cyan]{escape(run.label)}[/bold cyan]  {escape((run.job or 'no job record') + source)}  "
        f"{_status(run)}")
    say(f"  lineage: seq {run.first_seq}..{run.last_seq}, {run.nodes} nodes, {_gaps(run)}; last node {run.last_node}")
    if run.parent is not None:
        say(f"  branched from {escape(_node(run.parent))} ({run.parent})")
    for resume in run.resumes:
        mark = "checkpoint ok" if resume.parent_checkpoint else "[yellow]no checkpoint[/yellow]"
        say(f"  resumed at seq {resume.seq} from seq {resume.parent_seq} ({mark})")
    if run.error:
        say(f"  [red]error[/red] at {escape(_node(run.error_node))}:")
        for line in [line for line in run.error.strip().splitlines() if line.strip()][-3:]:
            say(f"    {escape(line)}")
    for ckpt in run.checkpoints:
        check = {True: "[green]checksums ok[/green]", False: "[red]FAILED[/red]", None: "sizes checked"}[ckpt.verified]
        if not ckpt.ok:
            check = "[red]FAILED[/red]"
        config = _config_lines(ckpt, run)
        say(f"  checkpoint seq {ckpt.seq}: {escape(ckpt.path)}  {ckpt.files} files, {_size(ckpt.bytes)}, "
            f"{check}, {config[0]}")
        for line in config[1:]:
            say(line)
        if show_config:
            for key, value in flatten(ckpt.config or {}).items():
                say(f"    {escape(key)} = {escape(_short(value))}")


def render(report: AuditReport, console: Console, show_config: bool = False) -> None:
    """Print ``report`` for people: runs, lineages, checkpoints, config changes, problems, verdict.

    Lines are never cut, so every file name can be copied whole.

    >>> import io, tempfile
    >>> out = io.StringIO()
    >>> render(audit(tempfile.mkdtemp()), Console(file=out, width=100))
    >>> "OK" in out.getvalue()
    True
    """
    def say(text: str) -> None:
        console.print(text, soft_wrap=True)

    scope = f" (run {report.nonce})" if report.nonce else ""
    say(f"[bold]audit of {escape(report.root)}{scope}[/bold]: {_count(len(report.runs), 'run')}, "
        f"{_count(report.segments, 'log segment')}, {_count(report.files, 'checkpoint file')}, "
        f"{_size(report.bytes_verified) + ' hashed' if report.checksums else 'sizes only'} in {report.seconds:.2f} s")
    for run in report.runs:
        _print_run(run, say, show_config)
    if report.problems:
        say("")
        say("[bold]problems[/bold]")
        for p in sorted(report.problems, key=lambda p: (p.severity != "error", p.kind, p.path)):
            mark = "[red]error  [/red]" if p.severity == "error" else "[yellow]warning[/yellow]"
            say(f"  {mark} {escape(p.kind)}: {escape(p.message)}")
    say("")
    warnings = f" ({_count(len(report.warnings), 'warning')})" if report.warnings else ""
    if report.ok:
        say(f"[bold green]OK[/bold green]: no integrity failures{warnings}")
    else:
        say(f"[bold red]FAILED[/bold red]: {_count(len(report.errors), 'integrity failure')}{warnings}")


def audit_command(
    root: Annotated[str, typer.Argument(help="The root folder or gs:// URL to audit")],
    nonce: Annotated[str | None, typer.Argument(
        help="Only this run (6-hex nonce) and the runs it branched from")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON")] = False,
    checksums: Annotated[bool, typer.Option("--checksums/--no-checksums",
                                            help="Hash every checkpoint file (default) or check sizes only")] = True,
    show_config: Annotated[bool, typer.Option(
        "--config", help="Also print the full config of each checkpoint")] = False,
    threads: Annotated[int | None, typer.Option("--threads", min=1, help="Files read at once")] = None,
) -> None:
    """Check a root offline: lineages, checkpoints against their MANIFEST, configs, failed runs, garbage.

    Nothing from the root is executed. Exit status 0 when every integrity check
    passes (warnings allowed), 1 on any integrity failure, 2 on bad input.
    Example: ``theseus audit /tmp/root`` or ``theseus audit gs://bucket/root 949e88 --json``.
    \f
    >>> import tempfile
    >>> from typer.testing import CliRunner
    >>> from theseus.cli import app
    >>> CliRunner().invoke(app, ["audit", tempfile.mkdtemp(), "--json"]).output.startswith("{")
    True
    """
    report = audit(root, nonce, verify_checksums=checksums, threads=threads)  # its errors: reported()'s line
    if as_json:
        typer.echo(report.to_json())
    else:
        render(report, Console(highlight=False), show_config=show_config)
    if not report.ok:
        raise typer.Exit(1)


def gc_command(
    root: Annotated[str, typer.Argument(help="The root folder or gs:// URL")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only list what would be deleted")] = False,
    min_age: Annotated[float, typer.Option("--min-age", min=0,
                                           help="Keep folders written less than this many seconds ago")] = 3600.0,
) -> None:
    """Delete object folders no checkpoint record references, retired checkpoints' files and temporary files.

    Never deletes a referenced folder, one not named by a node id, one written in
    the last ``--min-age`` seconds (a checkpoint may still be saving), one whose
    run has no log records, or anything through a link (reported, not followed).
    Example: ``theseus gc /tmp/root --dry-run``.
    \f
    >>> import tempfile
    >>> from typer.testing import CliRunner
    >>> from theseus.cli import app
    >>> "deleted 0 folders" in CliRunner().invoke(app, ["gc", tempfile.mkdtemp()]).output
    True
    """
    report = gc(root, dry_run=dry_run, min_age_s=min_age)  # its errors: reported()'s line
    console = Console(highlight=False, soft_wrap=True)  # paths are never cut: they can be copied whole
    verb = "would delete" if dry_run else "deleted"
    for rel in report.deleted + report.temporaries:
        console.print(f"{verb} {escape(rel)}")
    for rel in report.retired:
        console.print(f"{verb} the retired checkpoint in {escape(rel)}")
    for rel, reason in report.kept:
        console.print(f"kept {escape(rel)}: {escape(reason)}")
    temporaries = f" and {_count(len(report.temporaries), 'temporary file')}" if report.temporaries else ""
    if report.retired:
        temporaries += f" and {_count(len(report.retired), 'retired checkpoint')}"
    console.print(f"{verb} {_count(len(report.deleted), 'folder')}{temporaries} ({_size(report.bytes)})")


def register(app: typer.Typer) -> None:
    """Add ``audit`` and ``gc`` to a Typer app.

    >>> app = typer.Typer(); register(app); sorted(c.name for c in app.registered_commands)
    ['audit', 'gc']
    """
    app.command("audit")(reported(audit_command))
    app.command("gc")(reported(gc_command))
