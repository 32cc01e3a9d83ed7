"""Replay: re-run a run's steps from a checkpoint and compare them with what it logged."""
