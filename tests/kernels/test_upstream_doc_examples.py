"""The code blocks of upstream's Pallas page (docs/source/features/pallas.md),
unchanged, on the CPU device: a Pallas add-vectors kernel adopted with
make_kernel_from_pallas (run by Pallas's interpreter on the CPU), the built-in
flash attention and paged attention.

The blocks are read from data/upstream_pallas_md_examples.txt (transcribed as
printed) and run in order in one namespace, as a reader runs the page. The
page leaves a few names to the reader: `torch` (never imported),
`flash_attention` (its block imports only the module), and the paged-attention
inputs; the namespace provides them and nothing else."""
import os
import re

import pytest
import torch

import torch_xla.experimental.custom_kernel as ck

_FILE = os.path.join(os.path.dirname(__file__), "data", "upstream_pallas_md_examples.txt")


def _blocks():
    text = open(_FILE).read()
    names = re.findall(r"^## block: (\w+)$", text, flags=re.M)
    bodies = re.split(r"^## block: \w+\n", text, flags=re.M)[1:]
    return dict(zip(names, bodies))


BLOCKS = _blocks()


@pytest.fixture(scope="module")
def page():
    """The namespace after the page's first two blocks (the kernel defined and adopted)."""
    ns = {"torch": torch}
    exec(compile(BLOCKS["define_kernel"], "pallas.md:define_kernel", "exec"), ns)
    exec(compile(BLOCKS["adopt_kernel"], "pallas.md:adopt_kernel", "exec"), ns)
    return ns


def test_the_blocks_are_the_pages():
    assert list(BLOCKS) == ["define_kernel", "adopt_kernel", "flash_attention", "paged_attention"]


def test_adopted_pallas_kernel(page):
    q, k, out = page["q"].cpu(), page["k"].cpu(), page["output"]
    assert out.device.type == "xla" and out.shape == (3, 2, 128, 4)
    assert torch.equal(out.cpu(), q + k)


def test_flash_attention_block(page):
    ns = dict(page, flash_attention=ck.flash_attention)
    exec(compile(BLOCKS["flash_attention"], "pallas.md:flash_attention", "exec"), ns)
    q, k, v = (page[n].cpu() for n in "qkv")
    want = torch.softmax(q @ k.transpose(-1, -2), -1) @ v       # sm_scale defaults to 1
    assert torch.allclose(ns["output"].cpu(), want, atol=1e-5)


def test_paged_attention_block():
    torch.manual_seed(0)
    ns = {
        "torch": torch,
        "query": torch.randn(2, 1, 4, 8).to("xla"),            # [batch, 1, heads, dim]
        "key_cache": torch.randn(4, 6, 4, 8).to("xla"),        # [kv_heads, pages, page_size, dim]
        "value_cache": torch.randn(4, 6, 4, 8).to("xla"),
        "context_lens": torch.tensor([5, 9], dtype=torch.int32).to("xla"),
        "block_tables": torch.tensor([[0, 1, 2], [3, 4, 5]], dtype=torch.int32).to("xla"),
        "pages_per_compute_block": 1,
    }
    exec(compile(BLOCKS["paged_attention"], "pallas.md:paged_attention", "exec"), ns)
    q, kc, vc = ns["query"].cpu().squeeze(1), ns["key_cache"].cpu(), ns["value_cache"].cpu()
    tables = ns["block_tables"].cpu()
    for b, n in enumerate((5, 9)):
        k = kc[:, tables[b]].reshape(4, -1, 8)[:, :n]
        v = vc[:, tables[b]].reshape(4, -1, 8)[:, :n]
        want = torch.einsum("hn,hnd->hd", torch.softmax(torch.einsum("hd,hnd->hn", q[b], k), -1), v)
        assert torch.allclose(ns["output"].cpu()[b], want, atol=1e-5)
