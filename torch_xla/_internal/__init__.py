"""Upstream's internal helpers that Lightning, accelerate and older scripts import.

They answer truthfully on any machine: TPU probes report no TPU where there is
none (they never crash or reach a metadata server), and the device counts report
this package's devices once `PJRT_DEVICE` names a platform.
"""
