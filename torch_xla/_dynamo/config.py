"""Switches of the dynamo bridge (upstream's names)."""

# upstream: skip syncing the inputs before a replay. Set, a replayed graph takes
# its inputs as they are and an input still pending IR is a RuntimeError;
# unset, pending inputs run first (one graph).
skip_input_data_check = False
