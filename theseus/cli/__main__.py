"""``python -m theseus.cli``: the ``theseus`` command without its console script."""

from theseus.cli.app import app

app()
