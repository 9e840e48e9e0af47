"""python -m torch_xla.distributed.fsdp.consolidate_sharded_ckpts --ckpt_prefix P [--ckpt_suffix S] [--save_path F]

Consolidates the per-rank checkpoints of an XlaFullyShardedDataParallel model
(files matching P + S) into one checkpoint of the unwrapped model."""
import argparse

from .state_dict_utils import consolidate_sharded_model_checkpoints


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    parser.add_argument("--ckpt_prefix", type=str, required=True,
                        help="path prefix of the per-rank checkpoint files")
    parser.add_argument("--ckpt_suffix", type=str, default="*.pth",
                        help="glob completing the prefix to the per-rank files (default: *.pth)")
    parser.add_argument("--save_path", type=str, default="",
                        help="where to write the consolidated checkpoint (default: PREFIX_consolidated.pth)")
    args = parser.parse_args(argv)
    consolidate_sharded_model_checkpoints(args.ckpt_prefix, args.ckpt_suffix, args.save_path)


if __name__ == "__main__":
    main()
