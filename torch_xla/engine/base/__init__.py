"""base: what every other engine layer may use. Imports nothing of the engine.

config (every XLA_* / PT_XLA_* knob), events (subscribe / emit), metrics
(upstream's counters and report), dtypes (torch <-> JAX), frames (the user's
line).
"""
