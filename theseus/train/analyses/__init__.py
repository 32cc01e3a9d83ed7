"""Analyses: parts that look inside the model at validation steps and publish arrays, a picture and scalars.

``attention`` (attention maps by layer, head and sample), ``norms`` (weight and activation norms per
layer) and ``logit-lens`` (each block's residual read out through the final norm and unembedding).
A job lists them (``ANALYSIS = [Attention, LogitLens]``); with ``training.analyze`` they run at its
validation steps and publish under ``objects/<node-id>/analysis/<name>/`` (``MANIFEST.json`` last);
``theseus analyze`` runs one on any checkpoint.

>>> from theseus.train.parts import parts
>>> sorted(parts("analysis"))
['attention', 'logit-lens', 'norms']
"""

from theseus.train.analyses.attention import Attention
from theseus.train.analyses.base import AnalysisResult, ArrayAnalysis
from theseus.train.analyses.logit_lens import LogitLens
from theseus.train.analyses.norms import Norms

__all__ = ["AnalysisResult", "ArrayAnalysis", "Attention", "LogitLens", "Norms"]
