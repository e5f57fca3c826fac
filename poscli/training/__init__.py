"""The training loop, optimizers, data parallelism, extending a run, and the declared options."""
