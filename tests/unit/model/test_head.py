"""JointSchemaHead: state-dict names/shapes (clef-reference §1.4), equivariances, and an independent §3 implementation."""
import math

import pytest
import torch
import torch.nn.functional as F

from omni.model.head import JointSchemaHead, RecordSpans, load_joint_head

CFG = {"hidden_size": 24, "width": 16, "routing_layers": 2, "layers": 2, "heads": 4, "feedforward": 32}


def table(H, W, R, L, Fd):
    """The §1.4 table, written out: name → shape."""
    t = {"hidden_norm.weight": [H], "hidden_norm.bias": [H], "memory_projection.weight": [W, H],
         "type_embedding.weight": [3, W], "option_summary_norm.weight": [W], "option_summary_norm.bias": [W],
         "field_norm.weight": [W], "field_norm.bias": [W], "option_norm.weight": [W], "option_norm.bias": [W],
         "residual_scorer.0.weight": [W, 4 * W], "residual_scorer.0.bias": [W], "residual_scorer.3.weight": [1, W],
         "residual_scorer.3.bias": [1], "prior_logit_scale": [], "joint_logit_scale": [], "residual_gate": []}
    for name in ("question_projection", "option_question_projection", "global_projection", "option_context_projection",
                 "option_lexical_projection"):
        t[f"{name}.weight"] = [W, H]
    mha = lambda p: {f"{p}.in_proj_weight": [3 * W, W], f"{p}.in_proj_bias": [3 * W], f"{p}.out_proj.weight": [W, W],
                     f"{p}.out_proj.bias": [W]}
    for r in range(R):
        e = f"evidence_layers.{r}"
        for n in ("query_norm", "memory_norm", "feedforward_norm"):
            t[f"{e}.{n}.weight"] = [W]; t[f"{e}.{n}.bias"] = [W]
        t.update(mha(f"{e}.attention"))
        t.update({f"{e}.feedforward.0.weight": [Fd, W], f"{e}.feedforward.0.bias": [Fd],
                  f"{e}.feedforward.3.weight": [W, Fd], f"{e}.feedforward.3.bias": [W]})
    for l in range(L):
        d = f"layers.{l}"
        t.update(mha(f"{d}.self_attn")); t.update(mha(f"{d}.multihead_attn"))
        t.update({f"{d}.linear1.weight": [Fd, W], f"{d}.linear1.bias": [Fd], f"{d}.linear2.weight": [W, Fd],
                  f"{d}.linear2.bias": [W]})
        for n in ("norm1", "norm2", "norm3"):
            t[f"{d}.{n}.weight"] = [W]; t[f"{d}.{n}.bias"] = [W]
    return t


def test_state_dict_names_and_shapes_equal_reference_table():
    head = JointSchemaHead(**CFG)
    got = {k: list(v.shape) for k, v in head.state_dict().items()}
    assert got == table(24, 16, 2, 2, 32)


def test_omni_guess_config_parameter_count():
    with torch.device("meta"):
        head = JointSchemaHead(hidden_size=2048, width=1024, routing_layers=2, layers=4, heads=16, feedforward=4096)
    assert sum(p.numel() for p in head.parameters()) == 109_175_812     # clef-reference §1.4
    assert {k: list(v.shape) for k, v in head.state_dict().items()} == table(2048, 1024, 2, 4, 4096)


def make_inputs(seed=0, T=40, V=50, H=24):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(T, H, generator=g)
    ids = torch.randint(0, V, (T,), generator=g)
    table_ = torch.randn(V, H, generator=g)
    spans = RecordSpans(question_spans=((10, 13), (20, 22), (30, 31)),
                        option_spans=(((13, 15), (15, 18)), ((22, 24), (24, 25), (25, 28)), ((31, 33), (33, 36))),
                        question_types=(0, 1, 2))
    return hidden, ids, table_, spans


def randomized_head(seed=1):
    torch.manual_seed(seed)
    head = JointSchemaHead(**CFG).eval()
    with torch.no_grad():      # nonzero scalars so prior, joint and residual paths all matter
        head.prior_logit_scale.fill_(0.7); head.joint_logit_scale.fill_(1.3); head.residual_gate.fill_(-0.4)
        for p in head.parameters():
            if p.dim() == 1 and p.numel() > 1:
                p.add_(0.1 * torch.randn_like(p))
    return head


def test_permuting_options_permutes_logits():
    head = randomized_head()
    hidden, ids, tab, spans = make_inputs()
    base = head(hidden, ids, tab, spans)
    perm = [2, 0, 1]
    spans2 = RecordSpans(spans.question_spans,
                         (spans.option_spans[0], tuple(spans.option_spans[1][i] for i in perm), spans.option_spans[2]),
                         spans.question_types)
    out = head(hidden, ids, tab, spans2)
    torch.testing.assert_close(out[1], base[1][perm], atol=1e-6, rtol=0)
    torch.testing.assert_close(out[0], base[0], atol=1e-6, rtol=0)
    assert not torch.allclose(base[1], base[1][perm])        # the check has teeth


def test_permuting_questions_permutes_outputs():
    head = randomized_head()
    hidden, ids, tab, spans = make_inputs()
    base = head(hidden, ids, tab, spans)
    perm = [2, 0, 1]
    spans2 = RecordSpans(tuple(spans.question_spans[i] for i in perm), tuple(spans.option_spans[i] for i in perm),
                         tuple(spans.question_types[i] for i in perm))
    out = head(hidden, ids, tab, spans2)
    for new, old in enumerate(perm):
        torch.testing.assert_close(out[new], base[old], atol=1e-5, rtol=0)


# ---------------------------------------------------------------- an independent, straightforward §3 implementation
def ln(x, m):
    return F.layer_norm(x, (x.shape[-1],), m.weight, m.bias, 1e-5)


def mha(q, k, v, m, heads):
    W = q.shape[-1]
    wq, wk, wv = m.in_proj_weight.split(W)
    bq, bk, bv = m.in_proj_bias.split(W)
    Q, K, Vv = q @ wq.T + bq, k @ wk.T + bk, v @ wv.T + bv
    d = W // heads
    outs = []
    for h in range(heads):
        s = slice(h * d, (h + 1) * d)
        a = torch.softmax(Q[:, s] @ K[:, s].T / math.sqrt(d), dim=-1)
        outs.append(a @ Vv[:, s])
    return torch.cat(outs, -1) @ m.out_proj.weight.T + m.out_proj.bias


def gelu(x):
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def reference(head, hidden, ids, tab, spans):
    P = dict(head.named_parameters())
    nheads = CFG["heads"]
    h = ln(hidden, head.hidden_norm)
    M = h @ P["memory_projection.weight"].T
    g = h[-1]
    mean = lambda x, s: x[s[0]:s[1]].mean(0)
    q = [mean(h, s) for s in spans.question_spans]
    R, owner, lex = [], [], []
    for i, opts in enumerate(spans.option_spans):
        for s in opts:
            c = mean(h, s)
            l = torch.stack([tab[int(t)] for t in ids[s[0]:s[1]]]).mean(0)
            R.append(P["option_context_projection.weight"] @ c + P["option_lexical_projection.weight"] @ l
                     + P["option_question_projection.weight"] @ q[i])
            owner.append(i); lex.append(l)
    R = torch.stack(R)
    for layer in head.evidence_layers:
        Mn = ln(M, layer.memory_norm)
        R = R + mha(ln(R, layer.query_norm), Mn, Mn, layer.attention, nheads)
        ff = layer.feedforward
        R = R + (gelu(ln(R, layer.feedforward_norm) @ ff[0].weight.T + ff[0].bias) @ ff[3].weight.T + ff[3].bias)
    W = CFG["width"]
    Fs = []
    for i in range(len(q)):
        rows = R[[j for j, o in enumerate(owner) if o == i]]
        b = P["question_projection.weight"] @ q[i]
        a = torch.softmax(rows @ b / math.sqrt(W), 0)
        Fs.append(b + ln(a @ rows, head.option_summary_norm) + P["global_projection.weight"] @ g
                  + P["type_embedding.weight"][spans.question_types[i]])
    Fm = torch.stack(Fs)
    for layer in head.layers:
        x = ln(Fm, layer.norm1); Fm = Fm + mha(x, x, x, layer.self_attn, nheads)
        Fm = Fm + mha(ln(Fm, layer.norm2), M, M, layer.multihead_attn, nheads)
        Fm = Fm + (gelu(ln(Fm, layer.norm3) @ layer.linear1.weight.T + layer.linear1.bias) @ layer.linear2.weight.T
                   + layer.linear2.bias)
    Fm = ln(Fm, head.field_norm)
    n = lambda x: x / max(float(x.norm()), 1e-12)
    out = [[] for _ in q]
    alpha = math.exp(min(float(head.prior_logit_scale), math.log(100)))
    beta = math.exp(min(float(head.joint_logit_scale), math.log(100)))
    for j, i in enumerate(owner):
        prior = alpha * float(n(lex[j]) @ n(q[i] + g))
        o = ln(R[j], head.option_norm)
        f = Fm[i]
        cos = float(f @ o / (f.norm() * o.norm()))
        z = torch.cat([f, o, f * o, (f - o).abs()])
        rs = head.residual_scorer
        resid = float(gelu(rs[0].weight @ z + rs[0].bias) @ rs[3].weight[0] + rs[3].bias[0])
        out[i].append(prior + float(torch.sigmoid(head.residual_gate)) * (beta * cos + resid))
    return [torch.tensor(x) for x in out]


def test_independent_implementation_agrees():
    head = randomized_head()
    for seed in range(3):
        hidden, ids, tab, spans = make_inputs(seed)
        with torch.no_grad():
            got = head(hidden, ids, tab, spans)
            want = reference(head, hidden.double().float(), ids, tab, spans)
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_strict_load_round_trip_and_refusals(tmp_path):
    import json

    from safetensors.torch import save_file

    from omni.contract.errors import CheckpointError

    head = randomized_head()
    save_file(head.state_dict(), str(tmp_path / "joint_head.safetensors"))
    (tmp_path / "joint_head_config.json").write_text(json.dumps(CFG))
    loaded = load_joint_head(tmp_path)
    hidden, ids, tab, spans = make_inputs()
    with torch.no_grad():
        for a, b in zip(loaded(hidden, ids, tab, spans), head(hidden, ids, tab, spans), strict=True):
            assert torch.equal(a, b)
    state = head.state_dict()
    state.pop("residual_gate")
    save_file(state, str(tmp_path / "joint_head.safetensors"))
    with pytest.raises(CheckpointError, match="missing keys: residual_gate"):
        load_joint_head(tmp_path)
    state = head.state_dict()
    state["option_norm.weight"] = torch.zeros(17)
    save_file(state, str(tmp_path / "joint_head.safetensors"))
    with pytest.raises(CheckpointError, match=r"option_norm.weight \(file \(17,\) vs config \(16,\)\)"):
        load_joint_head(tmp_path)


# ---------------------------------------------------------------- the batched pass serving and training use
def random_records(seed: int, lengths: list[int], H: int = 24, V: int = 50):
    """Right-padded hidden [B, L, H] and ids [B, L] (padding filled with noise) + random spans per record."""
    import random

    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(len(lengths), max(lengths), H, generator=g)
    ids = torch.randint(0, V, (len(lengths), max(lengths)), generator=g)
    spans = []
    for T in lengths:
        pos, questions, options, types = 1, [], [], []
        for _ in range(rng.randint(1, 4)):
            questions.append((pos, pos + rng.randint(1, 3)))
            pos = questions[-1][1]
            row = []
            for _ in range(rng.randint(1, 4)):
                row.append((pos, pos + rng.randint(1, 3)))
                pos = row[-1][1]
            options.append(tuple(row))
            types.append(rng.randint(0, 2))
        assert pos < T
        spans.append(RecordSpans(tuple(questions), tuple(options), tuple(types)))
    return hidden, ids, torch.randn(V, H, generator=g), spans


@pytest.mark.parametrize("lengths", [[40], [60, 45, 70, 33, 52], [70, 70, 70]])
def test_batched_pass_equals_per_record_pass(lengths):
    head = randomized_head()
    hidden, ids, tab, spans = random_records(3, lengths)
    with torch.inference_mode():
        batched = head.forward_batch(hidden, lengths, ids, tab, spans)
        assert [len(q) for q in batched] == [len(s.question_spans) for s in spans]
        for b, T in enumerate(lengths):
            single = head(hidden[b, :T], ids[b, :T], tab, spans[b])
            assert [x.shape for x in batched[b]] == [x.shape for x in single]
            for x, y in zip(batched[b], single, strict=True):
                torch.testing.assert_close(x, y, atol=2e-6, rtol=0)


def test_batched_pass_ignores_padding_and_neighbours():
    head = randomized_head()
    lengths = [60, 35, 50]
    hidden, ids, tab, spans = random_records(4, lengths)
    with torch.inference_mode():
        base = head.forward_batch(hidden, lengths, ids, tab, spans)
        noisy_hidden, noisy_ids = hidden.clone(), ids.clone()
        noisy_hidden[1, 35:] = 1e3                    # garbage in record 1's padding
        noisy_ids[1, 35:] = 7
        noisy_hidden[2] += torch.randn_like(noisy_hidden[2])   # a different neighbour
        out = head.forward_batch(noisy_hidden, lengths, noisy_ids, tab, spans)
    for b in (0, 1):
        for x, y in zip(out[b], base[b], strict=True):
            torch.testing.assert_close(x, y, atol=2e-6, rtol=0)
    # the change reached its own record
    assert not all(torch.allclose(x, y) for x, y in zip(out[2], base[2], strict=True))


def test_batched_pass_trains_like_the_per_record_pass():
    head = randomized_head().train()
    lengths = [40, 55]
    hidden, ids, tab, spans = random_records(5, lengths)
    loss = sum(x.sum() for q in head.forward_batch(hidden, lengths, ids, tab, spans) for x in q)
    batched = torch.autograd.grad(loss, list(head.parameters()), allow_unused=True)
    loss = sum(x.sum() for b, T in enumerate(lengths) for x in head(hidden[b, :T], ids[b, :T], tab, spans[b]))
    single = torch.autograd.grad(loss, list(head.parameters()), allow_unused=True)
    for (name, _), x, y in zip(head.named_parameters(), batched, single, strict=True):
        assert (x is None) == (y is None), name
        if x is not None:
            torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-4, msg=name)
