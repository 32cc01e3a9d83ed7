"""Training: jobs composed of parts (model, data, optimizer, schedule, loss, evaluations, analyses), the trainer
that runs them.

The names an experiment file needs::

    from theseus.train import Pretrain, Sampling, analyses, optimizers, schedules

``Pretrain`` is the registered job ``gpt/train/pretrain``; subclass it and replace parts
(see `theseus.train.recipe`).
"""

from theseus.train import analyses, evaluations, losses, models, optimizers, schedules
from theseus.train.jobs import Pretrain
from theseus.train.recipe import Recipe, Sampling

__all__ = ["Pretrain", "Recipe", "Sampling", "analyses", "evaluations", "losses", "models", "optimizers", "schedules"]
