"""Dispatch: run a job on machines other than this one.

``inventory`` reads the clusters and hosts (``~/.theseus.yaml``), ``solver``
picks a host for a request, ``spec`` is the launch spec every process reads, and
the launchers (``local``, ``ssh``, ``slurm``, ``volcano``, ``tpu``) start one
process per host, each entering ``theseus.dispatch.bootstrap`` under
``jax.distributed``. The launchers share ``remote`` (the ssh client, shipping
files, a launch's outcome and errors) and ``stage`` (the files, script and
environment a launch puts on a host); ``submit`` places a spec and calls one.
The spec of a quick session's job is built in ``theseus.quick``, which imports
this package, never the other way. Import the submodules directly; this package
re-exports nothing.
"""
