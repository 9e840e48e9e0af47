"""torch_xla._XLAC.lowering.LoweringContext: the graph computing some tensors as an
HloModuleProto (nothing runs), its text and JSON forms, and the tensors that feed
its parameters."""
import json

import pytest
import torch

import torch_xla
import torch_xla.core.xla_builder as xb
import torch_xla.debug.metrics as met


def test_module_of_an_add_names_its_parameters_and_runs_nothing():
    dev = torch_xla.device()
    a = torch.tensor([1.0, 2.0, 3.0], device=dev)
    b = torch.tensor([4.0, 5.0, 6.0], device=dev)
    torch_xla.sync()
    result = a + b
    met.clear_all()

    ctx = torch_xla._XLAC.lowering.LoweringContext("MyAdd")
    ctx.build([result])
    assert met.counter_value("CachedCompile") is None and not met.metric_data("ExecuteTime")
    assert ctx.get_name_string() == "MyAdd"

    proto = ctx.hlo()
    assert isinstance(proto, bytes)
    text = ctx.hlo_text()   # protobuf text format
    assert text.startswith('name: "MyAdd"\n')
    assert text.count('opcode: "parameter"') == 2 and 'opcode: "add"' in text
    assert "element_type: F32" in text and "dimensions: 3" in text
    module = json.loads(ctx.hlo_json())   # protobuf's JSON mapping
    assert module["name"] == "MyAdd"
    assert len(module["hostProgramShape"]["parameters"]) == 2
    assert module["hostProgramShape"]["result"]["dimensions"] == ["3"]   # int64 as a string

    # parameters: on the device (no transfer) and read to the host
    device_map = ctx.device_parameter_id_tensor_mapping()
    assert not met.metric_data("TransferFromDeviceTime")
    ids = {ctx.tensor_parameter_id(a), ctx.tensor_parameter_id(b)}
    assert ids == {0, 1}
    assert ctx.tensor_parameter_id(result) == -1   # pending IR: not a parameter
    host_map = ctx.parameter_id_tensor_mapping()
    assert met.metric_data("TransferFromDeviceTime")
    assert sorted(host_map) == sorted(device_map) == [0, 1]
    torch.testing.assert_close(host_map[ctx.tensor_parameter_id(a)], a.cpu())
    torch.testing.assert_close(host_map[ctx.tensor_parameter_id(b)], b.cpu())
    torch.testing.assert_close(device_map[ctx.tensor_parameter_id(b)].cpu(), b.cpu())

    # the module as a computation: upstream's HLO text, its parameter shapes
    comp = xb.computation_from_module_proto("my_comp", proto)
    hlo = xb.get_computation_hlo(comp)
    assert hlo.startswith("HloModule MyAdd")
    assert "%add" in hlo and "parameter(0)" in hlo and "parameter(1)" in hlo
    assert [tuple(s.sizes) for s in comp.shapes] == [(3,), (3,)]
    assert [s.dtype for s in comp.shapes] == ["f32", "f32"]
    torch.testing.assert_close(result.cpu(), torch.tensor([5.0, 7.0, 9.0]))


def test_scalars_feed_parameters_and_unbuilt_context_says_so():
    dev = torch_xla.device()
    x = torch.ones(4, device=dev)
    torch_xla.sync()
    y = x * 3.5 + 2
    ctx = torch_xla._XLAC.lowering.LoweringContext()
    with pytest.raises(RuntimeError, match="build"):
        ctx.hlo()
    ctx.build([y])
    module = json.loads(ctx.hlo_json())
    mapping = ctx.parameter_id_tensor_mapping()
    assert len(mapping) == len(module["hostProgramShape"]["parameters"])
    assert mapping[ctx.tensor_parameter_id(x)].tolist() == [1.0] * 4
    # after the device data, one parameter per scalar pool (by dtype): the values fed
    pools = [mapping[i].tolist() for i in range(1, len(mapping))]
    assert sorted(pools) == [[2], [3.5]]
    torch.testing.assert_close(y.cpu(), torch.full((4,), 5.5))


def test_text_format_escapes_and_prints_floats_as_protobuf_does():
    from torch_xla.engine.observe import hlo_proto
    # a LiteralProto: shape {F32 [2]}, f32s [0.5, 1e-05], and an unknown field 99
    import struct
    shape = hlo_proto.encode([(2, 0, 11), (3, 2, b"\x02")])
    lit = hlo_proto.encode([(1, 2, shape), (8, 2, struct.pack("<2f", 0.5, 1e-5)), (99, 0, 7)])
    text = hlo_proto.to_text(lit, "LiteralProto")
    assert text == ("shape {\n  element_type: F32\n  dimensions: 2\n}\n"
                    "f32s: 0.5\nf32s: 1e-05\n99: 7\n")
    meta = hlo_proto.encode([(1, 2, 'a"b\n\x01'.encode())])
    assert hlo_proto.to_text(meta, "OpMetadata") == 'op_type: "a\\"b\\n\\001"\n'
    assert json.loads(hlo_proto.to_json(lit, "LiteralProto")) == {
        "shape": {"elementType": "F32", "dimensions": ["2"]}, "f32s": [0.5, 1e-05]}
