"""Bringing up jax.distributed for multi-process jobs (filled in by the
multi-device work; a single process needs nothing)."""


def maybe_initialize():
    return None
