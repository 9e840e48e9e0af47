"""Switches of the dynamo bridge (upstream's names)."""

# upstream: skip checking that inputs are device data before a replay. Here a
# replay always reads each input's current device array (pending inputs run
# first), so the switch changes nothing; kept for scripts that set it.
skip_input_data_check = False
