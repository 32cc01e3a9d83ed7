"""Training: the pretraining job, its config, optimizer, sharding, steps, checkpoints and MFU."""
