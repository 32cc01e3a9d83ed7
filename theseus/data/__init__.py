"""Data: tokenizers, raw text sources, tokenization into datasets, the deterministic loader and data mixtures.

No JAX here: the trainer turns the NumPy batches into device arrays.
"""

from theseus.data.loader import Loader
from theseus.data.mixture import MixtureLoader, Sampling, open_mixture
from theseus.data.store import Dataset, DatasetNotFound, DatasetWriter, list_datasets, open_dataset
from theseus.data.tokenize import Reading, tokenize_contiguous, tokenize_padded
from theseus.data.tokenizer import get_tokenizer

__all__ = [
    "Dataset",
    "DatasetNotFound",
    "DatasetWriter",
    "Loader",
    "MixtureLoader",
    "Reading",
    "Sampling",
    "get_tokenizer",
    "list_datasets",
    "open_dataset",
    "open_mixture",
    "tokenize_contiguous",
    "tokenize_padded",
]
