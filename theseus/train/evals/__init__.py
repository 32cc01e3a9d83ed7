"""Evaluations: parts that score a model during and after training, each under eval/<name>/<metric> keys."""
