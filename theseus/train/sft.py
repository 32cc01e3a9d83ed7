"""Supervised fine-tuning: ``gpt/train/sft`` and ``<family>/train/sft``, a pretraining recipe with fine-tuning defaults.

An SFT job is `theseus.train.jobs.Pretrain` (or its family's job) that must start from a checkpoint
(``training.init_from``: an imported model's node or nonce, a pretraining run's), reads chat datasets
(``data/tokenize/chat``: the loss on the assistant turns only, through their masks) alone or as a
mixture, and trains with AdamW at a fine-tuning rate (`FINE_TUNING`: 2e-5, no weight decay) on a
short warmup and a cosine decay. Its evaluation is the loss of each dataset's validation split on
those same masked tokens, ``eval/<dataset>-val/loss``. Everything else is the pretraining job's:
every step a node, bitwise resume, ``verify``, ``audit``, sampling (``theseus sample ... --chat``).

>>> SFT.key, SFT.SCHEDULE.name, [e.name for e in SFT.EVALUATION]
('gpt/train/sft', 'cosine', ['sft-val-loss'])
>>> float(SFT.defaults().optimization.lr)
2e-05
"""

from __future__ import annotations

from omegaconf import DictConfig

from theseus import config as configs
from theseus.errors import BadInput
from theseus.jobs import job
from theseus.train import schedules
from theseus.train.evaluations import EvalContext, Evaluation
from theseus.train.jobs import DECODER_FAMILIES, Pretrain, family_jobs
from theseus.train.models import DECODER_PARTS
from theseus.train.parts import part

__all__ = ["FINE_TUNING", "SFT", "SFTGemma", "SFTGptNeox", "SFTLlama", "SFTMistral", "SFTQwen2", "SFTQwen3",
           "SFTValidationLoss"]

#: the defaults an SFT job sets over its pretraining job's: a small rate, no decay of the weights it starts from,
#: a short warmup and a cosine decay to a tenth
FINE_TUNING = {"optimization": {"lr": 2e-5, "weight_decay": 0.0, "warmup_pct": 0.03, "final_lr_frac": 0.1}}


@part("evaluation", "sft-val-loss", "Loss on the masked (assistant) tokens of each dataset's val split: "
                                     "eval/<dataset>-val/loss.")
class SFTValidationLoss(Evaluation):
    """``eval/<dataset>-val/loss``: the mean loss of the tokens each dataset's mask counts (a chat dataset's
    assistant turns) over one pass of its val split, at most ``training.validation_steps`` batches.

    >>> SFTValidationLoss.run(EvalContext(step=2, params={}, config=None, sources=("chat",), mean_loss=lambda d: 1.5))
    {'eval/chat-val/loss': 1.5}
    """

    @classmethod
    def run(cls, context: EvalContext) -> dict[str, float]:
        """The masked mean token loss of each source's val split."""
        return {f"eval/{name}-val/loss": float(context.mean_loss(name)) for name in context.sources}


@job("gpt/train/sft", "Fine-tune a GPT checkpoint (training.init_from) on chat data, loss on the assistant turns.")
class SFT(Pretrain):
    """`Pretrain` with fine-tuning defaults (`FINE_TUNING`), a cosine schedule, the masked validation loss
    (`SFTValidationLoss`), and ``training.init_from`` required.

    >>> SFT.defaults().optimization.weight_decay
    0.0
    """

    SCHEDULE = schedules.Cosine
    EVALUATION = (SFTValidationLoss,)

    def check(self, config):
        """`Pretrain`'s checks, and ``training.init_from`` set."""
        super().check(config)
        if not config.training.init_from:
            raise BadInput("an SFT job fine-tunes a checkpoint: set training.init_from to its node id or its run's "
                           "nonce (an imported model: `theseus import hf`; a pretraining run)")

    @classmethod
    def defaults(cls) -> DictConfig:
        """The pretraining defaults with `FINE_TUNING` over them."""
        return configs.merge(super().defaults(), FINE_TUNING)


SFTLlama, SFTMistral, SFTQwen2, SFTQwen3, SFTGemma, SFTGptNeox = family_jobs(
    "sft", "SFT", "Fine-tune an imported or pretrained {family} checkpoint on chat data, loss on the assistant turns.",
    lambda base, family: {"MODEL": DECODER_PARTS[family], "__doc__": f"`SFT` with the ``{family}`` model part."},
    __name__, base=lambda family: SFT, families=DECODER_FAMILIES)
