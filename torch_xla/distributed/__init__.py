"""torch_xla.distributed: many devices (one process each), collectives, loaders."""
