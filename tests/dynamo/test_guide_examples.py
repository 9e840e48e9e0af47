"""The TorchDynamo chapter of upstream's guide (docs/source/perf/dynamo.md), its
three examples as written, with a small hand-written ResNet in place of
torchvision's resnet18 (torchvision does not import beside this torch) and the
training example's optimizer built over the model's parameters (the guide builds
it over the batch, which no torch accepts)."""
import copy

import pytest
import torch

import torch_xla
import torch_xla.debug.metrics as met
from nets import ResNet


@pytest.fixture(autouse=True)
def _reset_dynamo():
    torch._dynamo.reset()
    yield


def _count(name):
    return met.counter_value(name) or 0


def test_integration_example_moves_inputs_inside_the_compiled_function():
    def add(a, b):
        a_xla = a.to('xla')
        b_xla = b.to('xla')
        return a_xla + b_xla

    compiled_code = torch.compile(add, backend='openxla')
    a, b = torch.randn(10), torch.randn(10)
    out = compiled_code(a, b)
    assert out.device.type == "xla"
    torch.testing.assert_close(out.cpu(), a + b)


def _loader(n=4, batch=4):
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(batch, 3, 16, 16, generator=g), torch.randint(0, 10, (batch,), generator=g))
            for _ in range(n)]


def _resnets(train):
    """The same small ResNet on the CPU and on the XLA device (the guide's resnet18)."""
    torch.manual_seed(0)
    cpu_model = ResNet().train(train)
    device = torch_xla.device()
    return cpu_model, copy.deepcopy(cpu_model).to(device), device


def test_inference_example_traces_once_and_replays():
    cpu_model, xla_resnet, device = _resnets(train=False)
    xla_resnet.eval()
    dynamo_resnet = torch.compile(xla_resnet, backend='openxla')
    met.clear_all()
    for data, _ in _loader():
        with torch.no_grad():
            output = dynamo_resnet(data.to(device))
            torch.testing.assert_close(output.cpu(), cpu_model(data), rtol=1e-4, atol=1e-4)
    assert _count("DynamoTracedGraph") == 1
    assert _count("DynamoGraphNode") == 4


def test_training_example_matches_eager_cpu():
    def train_model(model, data, target, optimizer):
        loss_fn = torch.nn.CrossEntropyLoss()
        pred = model(data)
        loss = loss_fn(pred, target)
        loss.backward()
        optimizer.step()
        return pred

    cpu_model, xla_resnet, device = _resnets(train=True)
    xla_resnet.train()
    dynamo_train_model = torch.compile(train_model, backend='openxla')
    cpu_opt = torch.optim.SGD(cpu_model.parameters(), lr=0.1, weight_decay=1e-2)
    xla_optimizer = torch.optim.SGD(xla_resnet.parameters(), lr=0.1, weight_decay=1e-2)
    for data, target in _loader():
        xla_optimizer.zero_grad()
        output = dynamo_train_model(xla_resnet, data.to(device), target.to(device), xla_optimizer)
        cpu_opt.zero_grad()
        want = train_model(cpu_model, data, target, cpu_opt)
        torch.testing.assert_close(output.detach().cpu(), want.detach(), rtol=1e-4, atol=1e-4)
    for p, q in zip(xla_resnet.parameters(), cpu_model.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-4, atol=1e-4)
    for b, c in zip(xla_resnet.buffers(), cpu_model.buffers()):
        torch.testing.assert_close(b.cpu(), c)
