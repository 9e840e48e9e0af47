"""torch_xla.distributed.zero_redundancy_optimizer."""


class ZeroRedundancyOptimizer:
    """Upstream's ZeRO-1 optimizer (optimizer state sharded across replicas, gradients
    reduce-scattered, parameters all-gathered). Not implemented in this torch_xla yet:
    constructing one raises rather than silently training unsharded."""

    def __init__(self, params, optimizer_class, optimizer_dtype=None, grad_clipping=True, max_norm=None,
                 pin_layout=True, sharding_groups=None, grad_norm_groups=None, lazy_init=False,
                 bucket_cap_mb_all_gather=0, bucket_cap_mb_reduce_scatter=0, use_grad_acc_hook=False,
                 save_master_weights=False, higher_cc_precision=False,
                 **defaults):
        raise NotImplementedError(
            "torch_xla.distributed.zero_redundancy_optimizer.ZeroRedundancyOptimizer is not implemented "
            "in this torch_xla; use a plain optimizer with xm.optimizer_step (replicated state)")
