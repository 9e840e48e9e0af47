"""runtime: the platform (PJRT_DEVICE -> JAX devices), the topology of the job
(one source of process index and count, world size, mode, mesh), and joining a
multi-process job through jax.distributed. Imports only base."""
