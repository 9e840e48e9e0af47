"""XLA's HloModuleProto read without protobuf: the wire format decoded by a
table of the fields XLA writes (numbers and names of xla/service/hlo.proto and
xla/xla_data.proto), printed in protobuf's text format (`TextFormat`) and JSON
mapping (`MessageToJsonString`), as upstream's `LoweringContext.hlo_text()` /
`hlo_json()` print them; `normalize` renames a module and spells every sharding
with explicit device lists, as upstream's builder writes them.

A field the table does not know is printed by its number (text) or left out
(JSON), as protobuf does with unknown fields.
"""
import base64
import json
import struct

import numpy as np

# -- schema -------------------------------------------------------------------
# message -> {number: (name, type, repeated)}; type: a scalar kind
# ('int64', 'uint64', 'int32', 'uint32', 'bool', 'string', 'bytes', 'float',
# 'double'), 'enum:<Enum>', a message name, or 'map:<key kind>:<value type>'.

_R = True

SCHEMA = {
    "HloModuleProto": {
        1: ("name", "string", 0), 2: ("entry_computation_name", "string", 0),
        3: ("computations", "HloComputationProto", _R), 4: ("host_program_shape", "ProgramShapeProto", 0),
        5: ("id", "int64", 0), 6: ("entry_computation_id", "int64", 0), 7: ("schedule", "HloScheduleProto", 0),
        8: ("input_output_alias", "HloInputOutputAliasProto", 0),
        10: ("cross_program_prefetches", "CrossProgramPrefetch", _R), 11: ("is_dynamic", "bool", 0),
        12: ("spmd_output_sharding", "OpSharding", 0), 14: ("spmd_parameters_shardings", "OpSharding", _R),
        15: ("device_assignment", "DeviceAssignmentProto", 0), 16: ("use_auto_spmd_partitioning", "bool", 0),
        17: ("stack_frame_index", "StackFrameIndexProto", 0), 18: ("buffer_donor", "HloBufferDonorProto", 0),
        19: ("frontend_attributes", "FrontendAttributes", 0),
    },
    "HloComputationProto": {
        1: ("name", "string", 0), 2: ("instructions", "HloInstructionProto", _R),
        4: ("program_shape", "ProgramShapeProto", 0), 5: ("id", "int64", 0), 6: ("root_id", "int64", 0),
        7: ("is_fusion_computation", "bool", 0), 8: ("execution_thread", "string", 0),
    },
    "HloInstructionProto": {
        1: ("name", "string", 0), 2: ("opcode", "string", 0), 3: ("shape", "ShapeProto", 0),
        7: ("metadata", "OpMetadata", 0), 8: ("literal", "LiteralProto", 0), 9: ("parameter_number", "int64", 0),
        11: ("fusion_kind", "string", 0), 13: ("tuple_index", "int64", 0), 14: ("dimensions", "int64", _R),
        15: ("window", "Window", 0), 17: ("slice_dimensions", "SliceDimensions", _R),
        18: ("exponent_bits", "int32", 0), 19: ("mantissa_bits", "int32", 0),
        20: ("dynamic_slice_sizes", "int64", _R), 21: ("padding_config", "PaddingConfig", 0),
        23: ("distribution", "enum:RandomDistribution", 0), 24: ("epsilon", "float", 0),
        25: ("feature_index", "int64", 0), 26: ("channel_id", "int64", 0), 27: ("infeed_config", "bytes", 0),
        28: ("custom_call_target", "string", 0), 29: ("outfeed_shape", "ShapeProto", 0),
        30: ("dot_dimension_numbers", "DotDimensionNumbers", 0), 31: ("fft_type", "enum:FftType", 0),
        32: ("fft_length", "int64", _R), 33: ("gather_dimension_numbers", "GatherDimensionNumbers", 0),
        34: ("gather_slice_sizes", "int64", _R), 35: ("id", "int64", 0), 36: ("operand_ids", "int64", _R),
        37: ("control_predecessor_ids", "int64", _R), 38: ("called_computation_ids", "int64", _R),
        40: ("sharding", "OpSharding", 0), 43: ("backend_config", "bytes", 0),
        45: ("all_reduce_id", "int64", 0), 47: ("is_host_transfer", "bool", 0),
        48: ("scatter_dimension_numbers", "ScatterDimensionNumbers", 0),
        49: ("replica_groups", "ReplicaGroup", _R), 50: ("feature_group_count", "int64", 0),
        51: ("precision_config", "PrecisionConfig", 0), 52: ("source_target_pairs", "SourceTarget", _R),
        54: ("domain_entry_sharding", "OpSharding", 0), 55: ("domain_exit_sharding", "OpSharding", 0),
        56: ("constrain_layout", "bool", 0), 57: ("operand_shapes_with_layout", "ShapeProto", _R),
        58: ("batch_group_count", "int64", 0), 60: ("is_stable", "bool", 0),
        61: ("parameter_replication", "ParameterReplication", 0), 63: ("comparison_direction", "string", 0),
        65: ("custom_call_has_side_effect", "bool", 0), 66: ("delta", "int64", 0),
        67: ("indices_are_sorted", "bool", 0), 68: ("frontend_attributes", "FrontendAttributes", 0),
        69: ("unique_indices", "bool", 0), 70: ("rng_algorithm", "enum:RandomAlgorithm", 0),
        71: ("use_global_device_ids", "bool", 0), 72: ("comparison_type", "string", 0),
        74: ("output_operand_aliasing", "OutputOperandAliasing", _R),
        76: ("custom_call_schedule", "enum:CustomCallSchedule", 0),
        77: ("custom_call_api_version", "enum:CustomCallApiVersion", 0),
        79: ("async_execution_thread", "string", 0), 80: ("cross_program_prefetch_index", "int32", 0),
        81: ("k", "int64", 0), 85: ("largest", "bool", 0),
        87: ("collective_device_list", "CollectiveDeviceListProto", 0), 89: ("is_composite", "bool", 0),
        91: ("result_accuracy", "ResultAccuracy", 0),
    },
    "ShapeProto": {
        2: ("element_type", "enum:PrimitiveType", 0), 3: ("dimensions", "int64", _R),
        4: ("tuple_shapes", "ShapeProto", _R), 5: ("layout", "LayoutProto", 0),
        6: ("is_dynamic_dimension", "bool", _R),
    },
    "LayoutProto": {
        1: ("minor_to_major", "int64", _R), 6: ("tiles", "TileProto", _R),
        7: ("element_size_in_bits", "int64", 0), 8: ("memory_space", "int64", 0),
        10: ("physical_shape", "ShapeProto", 0), 11: ("index_primitive_type", "enum:PrimitiveType", 0),
        12: ("pointer_primitive_type", "enum:PrimitiveType", 0),
        15: ("dynamic_shape_metadata_prefix_bytes", "int64", 0),
        16: ("tail_padding_alignment_in_elements", "int64", 0),
    },
    "TileProto": {1: ("dimensions", "int64", _R)},
    "ProgramShapeProto": {
        1: ("parameters", "ShapeProto", _R), 2: ("result", "ShapeProto", 0), 3: ("parameter_names", "string", _R),
    },
    "OpMetadata": {
        1: ("op_type", "string", 0), 2: ("op_name", "string", 0), 3: ("source_file", "string", 0),
        4: ("source_line", "int32", 0), 8: ("size_of_generated_code_in_bytes", "int64", 0),
        9: ("size_of_memory_working_set_in_bytes", "int64", 0), 12: ("deduplicated_name", "string", 0),
        15: ("stack_frame_id", "int32", 0), 16: ("scheduling_name", "string", 0),
        17: ("source_end_line", "int32", 0), 18: ("source_column", "int32", 0),
        19: ("source_end_column", "int32", 0),
    },
    "OpSharding": {
        1: ("type", "enum:OpSharding.Type", 0), 2: ("tile_shape", "ShapeProto", 0),
        3: ("tile_assignment_dimensions", "int64", _R), 4: ("tile_assignment_devices", "int64", _R),
        5: ("tuple_shardings", "OpSharding", _R), 6: ("replicate_on_last_tile_dim", "bool", 0),
        7: ("metadata", "OpMetadata", _R), 8: ("last_tile_dims", "enum:OpSharding.Type", _R),
        9: ("iota_reshape_dims", "int64", _R), 10: ("iota_transpose_perm", "int32", _R),
        11: ("is_shard_group", "bool", 0), 12: ("shard_group_id", "int64", 0),
        13: ("shard_group_type", "enum:OpSharding.ShardGroupType", 0),
    },
    "FrontendAttributes": {1: ("map", "map:string:string", _R)},
    "LiteralProto": {
        1: ("shape", "ShapeProto", 0), 2: ("preds", "bool", _R), 3: ("u8s", "bytes", 0),
        4: ("s32s", "int32", _R), 5: ("s64s", "int64", _R), 6: ("u32s", "uint32", _R), 7: ("u64s", "uint64", _R),
        8: ("f32s", "float", _R), 9: ("f64s", "double", _R), 10: ("tuple_literals", "LiteralProto", _R),
        11: ("f16s", "bytes", 0), 12: ("c64s", "float", _R), 13: ("bf16s", "bytes", 0), 15: ("s8s", "bytes", 0),
        16: ("u16s", "bytes", 0), 17: ("s16s", "bytes", 0), 18: ("c128s", "double", _R),
    },
    "SliceDimensions": {1: ("start", "int64", 0), 2: ("limit", "int64", 0), 3: ("stride", "int64", 0)},
    "Window": {1: ("dimensions", "WindowDimension", _R)},
    "WindowDimension": {
        1: ("size", "int64", 0), 2: ("stride", "int64", 0), 3: ("padding_low", "int64", 0),
        4: ("padding_high", "int64", 0), 5: ("window_dilation", "int64", 0), 6: ("base_dilation", "int64", 0),
        7: ("window_reversal", "bool", 0),
    },
    "PaddingConfig": {1: ("dimensions", "PaddingConfigDimension", _R)},
    "PaddingConfigDimension": {
        1: ("edge_padding_low", "int64", 0), 2: ("edge_padding_high", "int64", 0),
        3: ("interior_padding", "int64", 0),
    },
    "DotDimensionNumbers": {
        1: ("lhs_contracting_dimensions", "int64", _R), 2: ("rhs_contracting_dimensions", "int64", _R),
        3: ("lhs_batch_dimensions", "int64", _R), 4: ("rhs_batch_dimensions", "int64", _R),
    },
    "GatherDimensionNumbers": {
        1: ("offset_dims", "int64", _R), 2: ("collapsed_slice_dims", "int64", _R),
        3: ("start_index_map", "int64", _R), 4: ("index_vector_dim", "int64", 0),
        5: ("operand_batching_dims", "int64", _R), 6: ("start_indices_batching_dims", "int64", _R),
    },
    "ScatterDimensionNumbers": {
        1: ("update_window_dims", "int64", _R), 2: ("inserted_window_dims", "int64", _R),
        3: ("scatter_dims_to_operand_dims", "int64", _R), 4: ("index_vector_dim", "int64", 0),
        5: ("input_batching_dims", "int64", _R), 6: ("scatter_indices_batching_dims", "int64", _R),
    },
    "ReplicaGroup": {1: ("replica_ids", "int64", _R)},
    "SourceTarget": {1: ("source", "int64", 0), 2: ("target", "int64", 0)},
    "PrecisionConfig": {1: ("operand_precision", "enum:PrecisionConfig.Precision", _R),
                        2: ("algorithm", "int32", 0)},
    "ParameterReplication": {1: ("replicated_at_leaf_buffers", "bool", _R)},
    "OutputOperandAliasing": {
        1: ("output_shape_index", "int64", _R), 2: ("operand_index", "int64", 0),
        3: ("operand_shape_index", "int64", _R),
    },
    "CollectiveDeviceListProto": {
        1: ("replica_groups", "ReplicaGroup", _R), 2: ("iota_replica_group_list", "IotaReplicaGroupListProto", 0),
    },
    "IotaReplicaGroupListProto": {
        1: ("num_replica_groups", "int64", 0), 2: ("num_devices_per_group", "int64", 0),
        3: ("iota_reshape_dims", "int64", _R), 4: ("iota_transpose_perm", "int32", _R),
    },
    "ResultAccuracy": {1: ("mode", "enum:ResultAccuracy.Mode", 0), 2: ("tolerance", "ResultAccuracy.Tolerance", 0)},
    "ResultAccuracy.Tolerance": {1: ("atol", "double", 0), 2: ("rtol", "double", 0), 3: ("ulps", "int64", 0)},
    "HloScheduleProto": {1: ("sequences", "map:int64:HloScheduleProto.InstructionSequence", _R)},
    "HloScheduleProto.InstructionSequence": {1: ("instruction_ids", "int64", _R)},
    "HloInputOutputAliasProto": {1: ("entries", "AliasEntryProto", _R)},
    "AliasEntryProto": {
        1: ("output_shape_index", "int64", _R), 2: ("parameter_number", "int64", 0),
        3: ("parameter_shape_index", "int64", _R), 4: ("kind", "enum:Kind", 0),
    },
    "HloBufferDonorProto": {1: ("entries", "BufferDonorEntryProto", _R)},
    "BufferDonorEntryProto": {1: ("parameter_number", "int64", 0), 2: ("parameter_shape_index", "int64", _R)},
    "CrossProgramPrefetch": {1: ("parameter", "int64", 0), 2: ("index", "int64", _R), 3: ("offset", "int64", 0)},
    "DeviceAssignmentProto": {
        1: ("replica_count", "int32", 0), 2: ("computation_count", "int32", 0),
        3: ("computation_devices", "ComputationDevice", _R),
    },
    "ComputationDevice": {1: ("replica_device_ids", "int64", _R)},
    "StackFrameIndexProto": {
        1: ("file_names", "string", _R), 2: ("function_names", "string", _R),
        3: ("file_locations", "FileLocation", _R), 4: ("stack_frames", "StackFrame", _R),
    },
    "FileLocation": {1: ("file_name_id", "int32", 0), 2: ("function_name_id", "int32", 0),
                     3: ("line", "int32", 0), 4: ("column", "int32", 0)},
    "StackFrame": {1: ("file_location_id", "int32", 0), 2: ("parent_frame_id", "int32", 0)},
}

_PRIMITIVE = {0: "PRIMITIVE_TYPE_INVALID", 1: "PRED", 2: "S8", 3: "S16", 4: "S32", 5: "S64", 6: "U8",
              7: "U16", 8: "U32", 9: "U64", 10: "F16", 11: "F32", 12: "F64", 13: "TUPLE", 14: "OPAQUE_TYPE",
              15: "C64", 16: "BF16", 17: "TOKEN", 18: "C128", 19: "F8E5M2", 20: "F8E4M3FN", 21: "S4",
              22: "U4", 23: "F8E4M3B11FNUZ", 24: "F8E5M2FNUZ", 25: "F8E4M3FNUZ", 26: "S2", 27: "U2",
              28: "F8E4M3", 29: "F8E3M4", 30: "S1", 31: "U1", 32: "F4E2M1FN", 33: "F8E8M0FNU", 34: "BUFFER"}

ENUMS = {
    "PrimitiveType": _PRIMITIVE,
    "OpSharding.Type": {0: "REPLICATED", 1: "MAXIMAL", 2: "TUPLE", 3: "OTHER", 4: "MANUAL", 5: "UNKNOWN",
                        6: "UNREDUCED"},
    "OpSharding.ShardGroupType": {0: "AS", 1: "LIKE"},
    "CustomCallSchedule": {0: "SCHEDULE_NONE", 1: "SCHEDULE_LATEST", 2: "SCHEDULE_EARLIEST"},
    "CustomCallApiVersion": {0: "API_VERSION_UNSPECIFIED", 1: "API_VERSION_ORIGINAL",
                             2: "API_VERSION_STATUS_RETURNING", 3: "API_VERSION_STATUS_RETURNING_UNIFIED",
                             4: "API_VERSION_TYPED_FFI"},
    "PrecisionConfig.Precision": {0: "DEFAULT", 1: "HIGH", 2: "HIGHEST"},
    "RandomDistribution": {0: "RNG_INVALID", 1: "RNG_UNIFORM", 2: "RNG_NORMAL"},
    "RandomAlgorithm": {0: "RNG_DEFAULT", 1: "RNG_THREE_FRY", 2: "RNG_PHILOX"},
    "FftType": {0: "FFT", 1: "IFFT", 2: "RFFT", 3: "IRFFT"},
    "Kind": {0: "UNDEFINED_ALIAS", 1: "MAY_ALIAS", 2: "MUST_ALIAS"},
    "ResultAccuracy.Mode": {0: "DEFAULT", 1: "HIGHEST"},
}

_VARINT_KINDS = {"int64", "uint64", "int32", "uint32", "bool"}


# -- wire format ----------------------------------------------------------------

def _varint(buf, i):
    shift = result = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, i
        shift += 7


def fields(buf):
    """[(number, wire type, value)] of one message: an int (varint, fixed32,
    fixed64 as raw bits) or bytes (length-delimited)."""
    out = []
    i, n = 0, len(buf)
    while i < n:
        tag, i = _varint(buf, i)
        num, wt = tag >> 3, tag & 7
        if wt == 0:
            v, i = _varint(buf, i)
        elif wt == 1:
            v = int.from_bytes(buf[i:i + 8], "little")
            i += 8
        elif wt == 2:
            ln, i = _varint(buf, i)
            v = bytes(buf[i:i + ln])
            i += ln
        elif wt == 5:
            v = int.from_bytes(buf[i:i + 4], "little")
            i += 4
        else:
            raise ValueError(f"HloModuleProto: unsupported wire type {wt} (field {num})")
        out.append((num, wt, v))
    return out


def _enc_varint(v):
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def encode(flds):
    """The bytes of a message given as fields() lists them."""
    out = bytearray()
    for num, wt, v in flds:
        out += _enc_varint(num << 3 | wt)
        if wt == 0:
            out += _enc_varint(v)
        elif wt == 1:
            out += int(v).to_bytes(8, "little")
        elif wt == 2:
            out += _enc_varint(len(v)) + v
        else:
            out += int(v).to_bytes(4, "little")
    return bytes(out)


def _scalar(kind, wt, v):
    """A decoded scalar of `kind` from wire type wt's raw value."""
    if kind in ("int64", "int32"):
        return v - (1 << 64) if v >= 1 << 63 else v
    if kind == "bool":
        return bool(v)
    if kind == "float":
        return struct.unpack("<f", v.to_bytes(4, "little"))[0]
    if kind == "double":
        return struct.unpack("<d", v.to_bytes(8, "little"))[0]
    return v   # uint32, uint64, enum numbers


def _packed(kind, data):
    if kind == "float":
        return list(struct.unpack(f"<{len(data) // 4}f", data))
    if kind == "double":
        return list(struct.unpack(f"<{len(data) // 8}d", data))
    vals, i = [], 0
    while i < len(data):
        v, i = _varint(data, i)
        vals.append(_scalar(kind, 0, v))
    return vals


def decode(buf, msg="HloModuleProto"):
    """A message as [(field name or number, type, value)] in field-number order,
    repeated fields flattened into one entry per value (protobuf's order)."""
    schema = SCHEMA.get(msg, {})
    by_num = {}
    for num, wt, v in fields(buf):
        spec = schema.get(num)
        if spec is None:
            by_num.setdefault(num, []).append((num, None, (wt, v)))
            continue
        name, kind, _ = spec
        vals = by_num.setdefault(num, [])
        if kind.startswith("map:"):
            _, kkind, vkind = kind.split(":", 2)
            entry = {k: val for k, _, val in decode(v, _map_entry(kkind, vkind))}
            vals.append((name, kind, (entry.get("key", "" if kkind == "string" else 0), entry.get("value"))))
        elif kind.startswith("enum:") or kind in _VARINT_KINDS or kind in ("float", "double"):
            base = "int32" if kind.startswith("enum:") else kind
            if wt == 2:   # packed
                vals.extend((name, kind, x) for x in _packed(base, v))
            else:
                vals.append((name, kind, _scalar(base, wt, v)))
        elif kind == "string":
            vals.append((name, kind, v.decode("utf-8", "replace")))
        elif kind == "bytes":
            vals.append((name, kind, v))
        else:
            vals.append((name, kind, decode(v, kind)))
    return [x for num in sorted(by_num) for x in by_num[num]]


def _map_entry(kkind, vkind):
    name = f"map:{kkind}:{vkind}"
    if name not in SCHEMA:
        SCHEMA[name] = {1: ("key", kkind, 0), 2: ("value", vkind, 0)}
    return name


# -- text format ------------------------------------------------------------------

def _escape(data):
    out = []
    for b in data:
        c = chr(b)
        if c == "\n":
            out.append("\\n")
        elif c == "\r":
            out.append("\\r")
        elif c == "\t":
            out.append("\\t")
        elif c in "\"'\\":
            out.append("\\" + c)
        elif 0x20 <= b < 0x7F:
            out.append(c)
        else:
            out.append(f"\\{b:03o}")
    return "".join(out)


def _float_text(x, single):
    if x != x:
        return "nan"
    if x in (float("inf"), float("-inf")):
        return "inf" if x > 0 else "-inf"
    short, full = ("%.6g", "%.9g") if single else ("%.15g", "%.17g")
    s = short % x
    back = float(np.float32(s)) if single else float(s)
    return s if back == x else full % x


def _value_text(kind, v):
    if kind.startswith("enum:"):
        return ENUMS.get(kind[5:], {}).get(v, str(v))
    if kind == "bool":
        return "true" if v else "false"
    if kind == "string":
        return '"' + _escape(v.encode("utf-8")) + '"'
    if kind == "bytes":
        return '"' + _escape(v) + '"'
    if kind in ("float", "double"):
        return _float_text(v, kind == "float")
    return str(v)


def to_text(buf, msg="HloModuleProto"):
    """protobuf's text format of a serialized message (TextFormat::PrintToString)."""
    lines = []
    _text(decode(bytes(buf), msg), lines, "")
    return "".join(lines)


def _text(flds, lines, indent):
    for name, kind, v in flds:
        if kind is None:   # a field the table does not know
            wt, raw = v
            lines.append(f"{indent}{name}: " + (f'"{_escape(raw)}"' if wt == 2 else str(raw)) + "\n")
        elif kind.startswith("map:"):
            _, kkind, vkind = kind.split(":", 2)
            lines.append(f"{indent}{name} {{\n{indent}  key: {_value_text(kkind, v[0])}\n")
            if vkind in SCHEMA:
                lines.append(f"{indent}  value {{\n")
                _text(v[1] or [], lines, indent + "    ")
                lines.append(f"{indent}  }}\n")
            elif v[1] is not None:
                lines.append(f"{indent}  value: {_value_text(vkind, v[1])}\n")
            lines.append(f"{indent}}}\n")
        elif kind in SCHEMA:
            lines.append(f"{indent}{name} {{\n")
            _text(v, lines, indent + "  ")
            lines.append(f"{indent}}}\n")
        else:
            lines.append(f"{indent}{name}: {_value_text(kind, v)}\n")


# -- JSON --------------------------------------------------------------------------

def _camel(name):
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def _json_value(kind, v):
    if kind.startswith("enum:"):
        return ENUMS.get(kind[5:], {}).get(v, v)
    if kind in ("int64", "uint64"):
        return str(v)
    if kind == "bytes":
        return base64.b64encode(v).decode()
    if kind in ("float", "double") and (v != v or v in (float("inf"), float("-inf"))):
        return "NaN" if v != v else ("Infinity" if v > 0 else "-Infinity")
    if kind == "float":   # the shortest float32 spelling, as protobuf prints it
        return float(_float_text(v, True))
    return v


def _json(flds, msg):
    out = {}
    repeated = {spec[0] for spec in SCHEMA.get(msg, {}).values() if spec[2]}
    for name, kind, v in flds:
        if kind is None:
            continue
        key = _camel(name)
        if kind.startswith("map:"):
            _, kkind, vkind = kind.split(":", 2)
            val = _json(v[1] or [], vkind) if vkind in SCHEMA else _json_value(vkind, v[1])
            out.setdefault(key, {})[str(v[0])] = val
            continue
        val = _json(v, kind) if kind in SCHEMA else _json_value(kind, v)
        if name in repeated:
            out.setdefault(key, []).append(val)
        else:
            out[key] = val
    return out


def to_json(buf, msg="HloModuleProto"):
    """protobuf's JSON mapping of a serialized message (MessageToJsonString):
    lowerCamelCase names, 64-bit integers as strings, enums by name."""
    return json.dumps(_json(decode(bytes(buf), msg), msg), separators=(",", ":"))


# -- rewriting ----------------------------------------------------------------------

def _explicit_sharding(buf):
    """An OpSharding with an iota tile assignment rewritten with the explicit
    device list (tile_assignment_devices), tuple shardings likewise."""
    flds = fields(buf)
    reshape = [_scalar("int64", 0, v) for n, wt, v in flds if n == 9 and wt == 0]
    perm = [_scalar("int64", 0, v) for n, wt, v in flds if n == 10 and wt == 0]
    for n, wt, v in flds:
        if n == 9 and wt == 2:
            reshape += _packed("int64", v)
        elif n == 10 and wt == 2:
            perm += _packed("int64", v)
    out = []
    for n, wt, v in flds:
        if n == 5 and wt == 2:
            out.append((n, wt, _explicit_sharding(v)))
        elif n not in (9, 10):
            out.append((n, wt, v))
    if reshape:
        devices = np.arange(int(np.prod(reshape))).reshape(reshape)
        if perm:
            devices = devices.transpose(perm)
        packed = b"".join(_enc_varint(int(d)) for d in devices.ravel())
        out.append((4, 2, packed))
        out.sort(key=lambda f: f[0])
    return encode(out)


def _rewrite(buf, plan):
    """`buf` with the fields `plan` names ({number: function of bytes, or a
    nested plan}) rewritten."""
    out = []
    for n, wt, v in fields(buf):
        step = plan.get(n)
        if step is not None and wt == 2:
            v = step(v) if callable(step) else _rewrite(v, step)
        out.append((n, wt, v))
    return encode(out)


_SHARDINGS = {
    3: {2: {40: _explicit_sharding, 54: _explicit_sharding, 55: _explicit_sharding}},   # instructions
    12: _explicit_sharding, 14: _explicit_sharding,
}


def normalize(buf, name=None):
    """A serialized HloModuleProto renamed `name` (when given), each sharding
    with its explicit device list, as upstream's XlaBuilder writes them."""
    out = _rewrite(bytes(buf), _SHARDINGS)
    if name is not None:
        flds = [f for f in fields(out) if f[0] != 1]
        out = encode([(1, 2, name.encode())] + flds)
    return out


def _shape(flds):
    """('f32', dims) of a decoded ShapeProto; a tuple shape as a list of them."""
    etype, dims, parts = None, [], []
    for name, kind, v in flds:
        if name == "element_type":
            etype = _PRIMITIVE.get(v, str(v))
        elif name == "dimensions":
            dims.append(v)
        elif name == "tuple_shapes":
            parts.append(_shape(v))
    return parts if etype == "TUPLE" else (etype.lower(), tuple(dims))


def program_shape(buf):
    """(parameter shapes, result shape) of a serialized HloModuleProto's entry
    computation, each ('f32', dims) or a list of them for a tuple."""
    for name, _, v in decode(bytes(buf)):
        if name == "host_program_shape":
            params = [_shape(x) for n, _, x in v if n == "parameters"]
            result = next((_shape(x) for n, _, x in v if n == "result"), [])
            return params, result
    return [], []
