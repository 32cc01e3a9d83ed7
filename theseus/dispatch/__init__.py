"""Dispatch: run a job on machines other than this one.

``inventory`` reads the clusters and hosts (``~/.theseus.yaml``), ``solver``
picks a host for a request, and the launchers (``local``, ``ssh``, ``slurm``,
``volcano``, ``tpu``) start one process per host, each entering
``theseus.dispatch.bootstrap`` under ``jax.distributed``. Import the
submodules directly; this package re-exports nothing.
"""
