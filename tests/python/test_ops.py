"""specdec tests — the torch custom ops loaded into Python's torch with torch.ops.load_library.

Covers torch.ops.specdec.verify_logits (greedy chains against argmax, sampled chains deterministic in the seed, a
tree, bad input named in the error) and rejection_sample, on CPU and, where a GPU is present, on CUDA with the same
tokens as the CPU (the verifiers share their arithmetic and their random bits). The library comes from
SPECDEC_OPS_LIB, else build/lib/libspecdec_ops.so; it must be built against the torch that runs this test.
    SPECDEC_OPS_LIB=build/lib/libspecdec_ops.so python3 -m pytest -q tests/python
"""
import os
import pathlib

import pytest

torch = pytest.importorskip("torch")

ROOT = pathlib.Path(__file__).resolve().parents[2]
LIB = pathlib.Path(os.environ.get("SPECDEC_OPS_LIB", ROOT / "build" / "lib" / "libspecdec_ops.so"))
if not LIB.exists():
    pytest.skip(f"{LIB} not built", allow_module_level=True)
torch.ops.load_library(str(LIB))
ops = torch.ops.specdec

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def chain_case(B=4, K=3, V=1000, seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B * (K + 1), V, generator=g) * 3
    cu = torch.arange(0, B * K + 1, K, dtype=torch.int64)
    argmax = logits.argmax(-1).view(B, K + 1)
    drafts = argmax[:, :K].clone()
    drafts[1, 1] = (drafts[1, 1] + 1) % V  # request 1 rejects its second draft
    seeds = torch.arange(B, dtype=torch.int64) + 100
    positions = torch.arange(B, dtype=torch.int64) * 7
    return logits, drafts.reshape(-1), cu, seeds, positions, argmax


def run_verify(device, logits, drafts, cu, seeds, positions, temperature, K):
    t = torch.full((cu.numel() - 1,), temperature, dtype=torch.float32)
    out = ops.verify_logits(logits.to(device), drafts.to(device), cu.to(device), seeds.to(device),
                            positions.to(device), temperature=t.to(device), max_num_draft_tokens=K)
    return [x.cpu() for x in out]


@pytest.mark.parametrize("device", DEVICES)
def test_greedy_chain_equals_argmax(device):
    K = 3
    logits, drafts, cu, seeds, positions, argmax = chain_case(K=K)
    tokens, nacc, accepted, status, _ = run_verify(device, logits, drafts, cu, seeds, positions, 0.0, K)
    assert (status == 0).all()
    assert nacc.tolist() == [K, 1, K, K]
    for b in range(4):
        n = int(nacc[b])
        assert tokens[b, : n + 1].tolist() == argmax[b, : n + 1].tolist()
        assert (tokens[b, n + 1:] == -1).all()


@pytest.mark.parametrize("device", DEVICES)
def test_sampled_chain_is_deterministic_in_the_seed(device):
    K = 3
    logits, drafts, cu, seeds, positions, _ = chain_case(K=K, seed=1)
    a = run_verify(device, logits, drafts, cu, seeds, positions, 0.8, K)
    b = run_verify(device, logits, drafts, cu, seeds, positions, 0.8, K)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    c = run_verify(device, logits, drafts, cu, seeds + 1, positions, 0.8, K)
    assert not torch.equal(a[0], c[0]) or not torch.equal(a[1], c[1])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0])
def test_cuda_gives_the_cpu_tokens(temperature):
    K = 4
    for seed in range(5):
        logits, drafts, cu, seeds, positions, _ = chain_case(B=8, K=K, V=32000, seed=seed)
        cpu = run_verify("cpu", logits, drafts, cu, seeds, positions, temperature, K)
        gpu = run_verify("cuda", logits, drafts, cu, seeds, positions, temperature, K)
        assert torch.equal(cpu[0], gpu[0]), (temperature, seed)
        assert torch.equal(cpu[1], gpu[1]), (temperature, seed)
        assert torch.equal(cpu[4], gpu[4]), (temperature, seed)  # the processed probabilities, bit for bit


@pytest.mark.parametrize("device", DEVICES)
def test_tree_and_rejection_sample(device):
    V, B = 500, 2
    g = torch.Generator().manual_seed(3)
    # Trees: 3 drafts per request, node 1 and node 2 under the root, node 3 under node 1.
    logits = torch.randn(B * 4, V, generator=g)
    drafts = logits.view(B, 4, V)[:, 0].argmax(-1).repeat_interleave(3)
    parents = torch.tensor([0, 0, 1] * B, dtype=torch.int64)
    cu = torch.tensor([0, 3, 6], dtype=torch.int64)
    seeds = torch.tensor([5, 6], dtype=torch.int64)
    positions = torch.tensor([0, 0], dtype=torch.int64)
    t = torch.zeros(B)
    out = ops.verify_logits(logits.to(device), drafts.to(device), cu.to(device), seeds.to(device),
                            positions.to(device), temperature=t.to(device), parents=parents.to(device),
                            max_num_draft_tokens=3)
    tokens, nacc = out[0].cpu(), out[1].cpu()
    assert (nacc >= 1).all()  # the root's argmax is drafted twice: the first branch is accepted
    probs = torch.softmax(torch.randn(B * 3, V, generator=g), -1)
    ids = probs.view(B, 3, V)[:, :2].argmax(-1).reshape(-1)
    cu2 = torch.tensor([0, 2, 4], dtype=torch.int64)
    r = ops.rejection_sample(ids.to(device), cu2.to(device), None, probs.to(device), seeds.to(device),
                             positions.to(device))
    assert r[0].shape == (B, 3) and r[1].shape == (B,)


def test_bad_input_names_the_argument():
    logits, drafts, cu, seeds, positions, _ = chain_case()
    with pytest.raises(RuntimeError, match="draft_token_ids"):
        ops.verify_logits(logits, drafts.float(), cu, seeds, positions)
