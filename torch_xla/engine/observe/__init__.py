"""observe: what users see of the engine, as subscribers of its events.

  debug.py       PT_XLA_DEBUG_LEVEL analyses, recompilation explanations,
                 xla::<op> counters, XLA_METRICS_FILE
  graph_dump.py  IR text / DOT / HLO / StableHLO, XLA_SAVE_TENSORS_FILE, XLA_SAVE_HLO_FILE
  lowering.py    upstream's Python LoweringContext: a graph as an HloModuleProto
  hlo_proto.py   HloModuleProto text format / JSON without protobuf
Imports every layer below; nothing below imports it.
"""
