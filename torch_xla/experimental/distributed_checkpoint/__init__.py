"""torch_xla.experimental.distributed_checkpoint: torch.distributed.checkpoint
for SPMD state dicts (shard-level save and load planners), a CheckpointManager
that saves every `save_interval` steps, keeps `max_to_keep` and restores, and
`prime_optimizer` (creates an optimizer's state so a checkpoint can be loaded
into it)."""
from .manager import CheckpointManager
from .planners import SPMDLoadPlanner, SPMDSavePlanner
from .util import prime_optimizer

__all__ = ["CheckpointManager", "SPMDSavePlanner", "SPMDLoadPlanner", "prime_optimizer"]
