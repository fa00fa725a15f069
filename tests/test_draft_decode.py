"""The real speculative decoding loop (elsi_lib.draft.decode) on tiny random targets of both
families: token-identical to greedy decoding at T = 0 (trees, chains, a vocabulary so small that the
tree holds every token, so long paths are accepted and the KV cache is pruned every round), and at
T = 1 the output distribution equals the target's (chi-square against exact probabilities)."""

import copy

import numpy as np
import pytest
import torch
from scipy import stats

from conftest import make_tiny_tokenizer
from elsi_lib import random_model
from elsi_lib.hidden.replies import GumbelSampler, generate_responses
from elsi_lib.draft.model import Eagle3Draft
from elsi_lib.draft import decode as D
from elsi_lib.draft.config import FINAL_NORM
from elsi_lib.draft.tree import DraftTree

pytestmark = pytest.mark.usefixtures("one_torch_thread")
SOURCE = (0, 2)


def tiny(arch: str, vocab: int, seed: int = 1):
    extra = {"num_key_value_heads": 2} if arch == "qwen2" else {}
    target = random_model(arch, n_layers=3, hidden_size=32, vocab_size=vocab, seed=seed, dtype="float64", **extra)
    target.generation_config.eos_token_id = None
    return target, Eagle3Draft.from_target(target, SOURCE, vocab, seed=0).eval()


def greedy(target, prompt, n):
    out = target.generate(
        prompt[None],
        attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
        do_sample=False,
        max_new_tokens=n,
        min_new_tokens=n,
    )
    return out[0, len(prompt) :].tolist()


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize(
    "vocab, nodes, depth, top_k", [(8, 136, 3, 8), (8, 60, 6, 8), (8, 5, 5, 1), (40, 30, 4, 6), (40, 3, 3, 1)]
)
def test_greedy_output_is_token_identical(arch, vocab, nodes, depth, top_k):
    target, draft = tiny(arch, vocab)
    prompt = torch.randint(0, vocab, (7,), generator=torch.Generator().manual_seed(0))
    out = D.speculative_generate(
        target, draft, prompt, max_new_tokens=33, nodes=nodes, depth=depth, top_k=top_k, stop_at_eos=False
    )
    assert out.tokens == greedy(target, prompt, 33)
    assert len(out.tokens) == 1 + sum(a + 1 for a in out.accepted)
    if vocab == 8 and top_k == 8:  # every token is a child of the root: at least one accepted per full round
        assert min(out.accepted[:-1]) >= 1 and max(out.accepted) >= 2


def test_max_new_tokens_cuts_inside_an_accepted_path():
    target, draft = tiny("llama", 8)
    prompt = torch.randint(0, 8, (5,), generator=torch.Generator().manual_seed(3))
    reference = greedy(target, prompt, 12)
    for n in range(1, 12):
        out = D.speculative_generate(
            target, draft, prompt, max_new_tokens=n, nodes=136, depth=3, top_k=8, stop_at_eos=False
        )
        assert out.tokens == reference[:n]


def test_stops_at_eos():
    target, draft = tiny("llama", 8)
    prompt = torch.randint(0, 8, (5,), generator=torch.Generator().manual_seed(3))
    reference = greedy(target, prompt, 20)
    target.generation_config.eos_token_id = reference[4]
    out = D.speculative_generate(target, draft, prompt, max_new_tokens=20, nodes=136, depth=3, top_k=8)
    assert out.tokens == reference[: reference.index(reference[4]) + 1]
    assert len(out.tokens) == 1 + sum(a + 1 for a in out.accepted)  # no round after the end-of-sequence token
    assert sum(out.accepted_full) >= sum(out.accepted) and len(out.accepted_full) == len(out.accepted)


def test_eos_inside_an_accepted_path_ends_the_round():
    """Every token of the tiny vocabulary is a child of the root: the end-of-sequence token is accepted
    inside a path (not as the bonus) in some round; generation ends right there."""
    target, draft = tiny("llama", 8)
    prompt = torch.randint(0, 8, (5,), generator=torch.Generator().manual_seed(3))
    reference = greedy(target, prompt, 30)
    probe = D.speculative_generate(
        target, draft, prompt, max_new_tokens=30, nodes=136, depth=3, top_k=8, stop_at_eos=False
    )
    position, inside = 1, None  # find a token accepted inside a path (not a round's bonus)
    for a in probe.accepted:
        if a >= 2:
            inside = reference[position]
            break
        position += a + 1
    assert inside is not None
    target.generation_config.eos_token_id = inside
    out = D.speculative_generate(target, draft, prompt, max_new_tokens=30, nodes=136, depth=3, top_k=8)
    assert out.tokens == reference[: reference.index(inside) + 1]
    assert len(out.tokens) == 1 + sum(a + 1 for a in out.accepted)


def test_final_norm_draft_decodes_losslessly():
    target, _ = tiny("llama", 40)
    draft = Eagle3Draft.from_target(target, FINAL_NORM, 40, seed=0).eval()
    assert draft.config.reads_final_norm and draft.config.m == 1
    prompt = torch.randint(0, 40, (6,), generator=torch.Generator().manual_seed(0))
    out = D.speculative_generate(
        target, draft, prompt, max_new_tokens=10, nodes=10, depth=3, top_k=4, stop_at_eos=False
    )
    assert out.tokens == greedy(target, prompt, 10)


def test_the_loop_reads_the_draft_s_own_layers(monkeypatch):
    """No feature source is passed next to the draft (a draft built for (0, 2) decoded with (1, 2)
    or (2, 0) would change acceptance silently): every target forward extracts the draft's own source."""
    target, draft = tiny("llama", 40)
    prompt = torch.randint(0, 40, (6,), generator=torch.Generator().manual_seed(0))
    with pytest.raises(TypeError):
        D.speculative_generate(target, draft, (1, 2), prompt, max_new_tokens=5)
    seen, original = [], D.target_forward
    monkeypatch.setattr(
        D, "target_forward", lambda model, ids, source, **kw: seen.append(source) or original(model, ids, source, **kw)
    )
    D.speculative_generate(target, draft, prompt, max_new_tokens=8, nodes=6, depth=3, top_k=2)
    assert seen and set(seen) == {SOURCE}
    with pytest.raises(ValueError, match="layer set"):
        D.target_forward(target, prompt, "final")  # not FINAL_NORM's name


def test_a_target_whose_decoder_layers_elsi_cannot_find_is_named_by_the_draft_side_too():
    """The draft's readers of the target's layers (its features, the decoding's target forward) refuse
    GPT-2 as the capture does, naming the decoder, not with an AttributeError."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from elsi_lib.draft.features import checked_layers

    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=40)).eval()
    with pytest.raises(ValueError, match="a GPT2Model, whose decoder layers elsi cannot find"):
        checked_layers(gpt2, [0, 1])
    with pytest.raises(ValueError, match="a GPT2Model, whose decoder layers elsi cannot find"):
        D.target_forward(gpt2, torch.tensor([1, 5, 6]), (0, 1))


BAD_ARGUMENTS = [
    ({"prompt_ids": torch.zeros(2, 3, dtype=torch.long)}, ValueError, "one sequence"),
    ({"prompt_ids": torch.tensor([1.0, 2.7])}, TypeError, "integer token ids"),
    ({"prompt_ids": [1.5, 2.0]}, TypeError, "integer token ids"),
    ({"prompt_ids": torch.tensor([True, False])}, TypeError, "integer token ids"),
    ({"prompt_ids": []}, ValueError, "empty"),
    ({"prompt_ids": [3, 40]}, ValueError, "0..39"),
    ({"prompt_ids": [3, -1]}, ValueError, "0..39"),
    ({"max_new_tokens": 0}, ValueError, "max_new_tokens"),
    ({"max_new_tokens": 2.5}, ValueError, "max_new_tokens"),
    ({"max_new_tokens": True}, ValueError, "max_new_tokens"),
    ({"temperature": -1.0}, ValueError, "temperature"),
    ({"temperature": float("nan")}, ValueError, "temperature"),
    ({"temperature": float("inf")}, ValueError, "temperature"),
    ({"nodes": 2.0}, TypeError, "nodes"),
    ({"depth": 0}, ValueError, "depth"),
    ({"top_k": "4"}, TypeError, "top_k"),
    ({"nodes": 100, "depth": 2, "top_k": 3}, ValueError, "exceeds"),
    ({"top_k": 50, "nodes": 50, "depth": 1}, ValueError, "draft vocabulary"),
]


@pytest.mark.parametrize("change,error,message", BAD_ARGUMENTS)
def test_bad_arguments_are_refused_before_the_prefill(monkeypatch, change, error, message):
    target, draft = tiny("llama", 40)
    args = {
        "prompt_ids": torch.randint(0, 40, (6,), generator=torch.Generator().manual_seed(0)),
        "max_new_tokens": 5,
        "nodes": 10,
        "depth": 3,
        "top_k": 4,
        "temperature": 0.0,
        **change,
    }
    monkeypatch.setattr(D, "target_forward", lambda *a, **k: pytest.fail("the prefill ran"))
    with pytest.raises(error, match=message):
        D.speculative_generate(target, draft, args.pop("prompt_ids"), **args)


def test_a_draft_that_does_not_fit_the_target_is_refused(monkeypatch):
    target, draft = tiny("llama", 40)
    monkeypatch.setattr(D, "target_forward", lambda *a, **k: pytest.fail("the prefill ran"))
    for other, field in (
        (random_model("llama", n_layers=3, hidden_size=32, vocab_size=48, seed=0), "vocab_size"),
        (random_model("llama", n_layers=3, hidden_size=48, vocab_size=40, seed=0), "hidden_size"),
        (random_model("llama", n_layers=4, hidden_size=32, vocab_size=40, seed=0), "num_hidden_layers"),
    ):
        with pytest.raises(ValueError, match=field):
            D.speculative_generate(other, draft, [1, 2, 3], max_new_tokens=4)
    windowed = copy.deepcopy(target)
    windowed.config.layer_types = ["sliding_attention"] * 3
    with pytest.raises(NotImplementedError, match="sliding-window"):
        D.speculative_generate(windowed, draft, [1, 2, 3], max_new_tokens=4)


def chain_tree(tokens, scores=None):
    n = len(tokens)
    return DraftTree(
        tokens=torch.tensor(tokens),
        parents=torch.arange(-1, n - 1),
        depths=torch.arange(1, n + 1),
        scores=torch.tensor(scores or [-float(i) for i in range(n)]),
    )


def test_accept_greedy_walks_the_argmax():
    # root's children: nodes 0 (token 3) and 1 (token 5); node 2 (token 1) under node 1
    tree = DraftTree(
        tokens=torch.tensor([3, 5, 1]),
        parents=torch.tensor([-1, -1, 1]),
        depths=torch.tensor([1, 1, 2]),
        scores=torch.tensor([-1.0, -0.5, -2.0]),
    )
    logits = torch.full((4, 8), -5.0)
    logits[0, 5] = 1  # the root's argmax is node 1's token
    logits[2, 1] = 1  # node 1's argmax is node 2's token
    logits[3, 7] = 1  # node 2's argmax: the bonus
    assert D.accept_greedy(logits, tree) == ([1, 2], 7)
    logits[2, 1], logits[2, 6] = -5, 1  # node 1 now wants 6: stop there with bonus 6
    assert D.accept_greedy(logits, tree) == ([1], 6)
    logits[0, 5], logits[0, 4] = -5, 1  # the root wants a token the tree lacks
    assert D.accept_greedy(logits, tree) == ([], 4)


def test_accept_sampling_emits_the_target_distribution():
    """Recursive rejection over a node with 3 children of a 6-token vocabulary: the first emitted
    token follows the root's distribution; given an accepted child, the next token follows that
    child's distribution (both exact, chi-square over 20,000 draws)."""
    tree = DraftTree(
        tokens=torch.tensor([2, 0, 4, 1]),
        parents=torch.tensor([-1, -1, -1, 0]),
        depths=torch.tensor([1, 1, 1, 2]),
        scores=torch.tensor([-0.1, -0.2, -0.3, -0.5]),
    )
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 6, generator=g) * 1.5
    p_root = torch.softmax(logits[0].double(), -1).numpy()
    p_node0 = torch.softmax(logits[1].double(), -1).numpy()
    first, second = np.zeros(6), np.zeros(6)
    for _ in range(20000):
        path, bonus = D.accept_sampling(logits, tree, 1.0, g)
        emitted = [int(tree.tokens[n]) for n in path] + [bonus]
        first[emitted[0]] += 1
        if path and path[0] == 0:
            second[emitted[1]] += 1
    assert stats.chisquare(first, p_root * first.sum()).pvalue > 1e-3
    assert stats.chisquare(second, p_node0 * second.sum()).pvalue > 1e-3
    assert first[[0, 2, 4]].sum() > 0 and first[[1, 3, 5]].sum() > 0  # both accepted and bonus-only rounds


def exact_pairs(target, prompt, vocab):
    """p(x1, x2 | prompt) at T = 1 for every pair: (vocab, vocab)."""
    with torch.no_grad():
        p1 = torch.softmax(target(prompt[None]).logits[0, -1].double(), -1)  # (V,)
        seqs = torch.cat([prompt.expand(vocab, -1), torch.arange(vocab)[:, None]], dim=1)  # (V, P + 1)
        p2 = torch.softmax(target(seqs).logits[:, -1].double(), -1)  # (V, V)
    return (p1[:, None] * p2).numpy()


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_sampling_loop_matches_the_target_distribution(arch):
    """The loop at T = 1 (prefill sample, then tree rounds with recursive rejection): the pair of
    its first two tokens against the exact pair distribution, 1,500 seeded runs, chi-square over
    cells with expected count >= 5 (the rest pooled); fails below p = 1e-3."""
    vocab = 8
    target, draft = tiny(arch, vocab, seed=2)
    with torch.no_grad():  # sharpen the target: unequal cells make a wrong distribution visible
        target.get_output_embeddings().weight.mul_(3.0)
    prompt = torch.randint(0, vocab, (5,), generator=torch.Generator().manual_seed(1))
    exact = exact_pairs(target, prompt, vocab).ravel()
    counts, accepted = np.zeros(vocab * vocab), 0
    runs = 1500
    for seed in range(runs):
        out = D.speculative_generate(
            target,
            draft,
            prompt,
            max_new_tokens=3,
            nodes=20,
            depth=3,
            top_k=4,
            temperature=1.0,
            seed=seed,
            stop_at_eos=False,
        )
        counts[out.tokens[0] * vocab + out.tokens[1]] += 1
        accepted += out.accepted[0]
    expected = exact * runs
    big = expected >= 5
    observed, wanted = counts[big], expected[big]
    if (~big).any():
        observed, wanted = np.append(observed, counts[~big].sum()), np.append(wanted, expected[~big].sum())
    assert big.sum() >= 10
    assert stats.chisquare(observed, wanted).pvalue > 1e-3
    print(f"{big.sum()} cells, max share {exact.max():.3f}, accepted in {accepted} of {runs} rounds")
    assert 0 < accepted < runs  # the tree is accepted in some rounds, rejected in others


def test_gumbel_sampler_draws_softmax_over_temperature():
    """Greedy over GumbelSampler's output is a sample of softmax(scores / T): 12,000 draws against the
    exact probabilities (chi-square), and rows with their own seeds draw independently of the batch."""
    scores = torch.tensor([[2.0, 1.0, 0.0, -1.0, 0.5, 1.5]])
    p = torch.softmax(scores[0] / 0.7, -1).numpy()
    draws = [
        int(GumbelSampler(0.7, [s], 0)(torch.zeros(1, 3, dtype=torch.long), scores).argmax()) for s in range(12000)
    ]
    counts = np.bincount(draws, minlength=6)
    assert stats.chisquare(counts, p * len(draws)).pvalue > 1e-3
    pair = GumbelSampler(0.7, [5, 9], 0)(torch.zeros(2, 3, dtype=torch.long), scores.expand(2, -1))
    alone = GumbelSampler(0.7, [9], 0)(torch.zeros(1, 3, dtype=torch.long), scores)
    assert torch.equal(pair[1], alone[0])


def test_sampled_replies_do_not_depend_on_the_batch():
    tokenizer = make_tiny_tokenizer()
    model = random_model(n_layers=2, hidden_size=32, vocab_size=len(tokenizer), seed=0)
    convs = [[{"role": "user", "content": f"hello world {i} " * (1 + i % 3)}] for i in range(5)]
    a, ids_a = generate_responses(
        model,
        tokenizer,
        convs,
        max_new_tokens=10,
        temperature=1.0,
        seed=3,
        with_ids=True,
        batch_size=2,
        cache=False,
        progress=False,
    )
    b, ids_b = generate_responses(
        model, tokenizer, convs, max_new_tokens=10, temperature=1.0, seed=3, with_ids=True, batch_size=5, progress=False
    )  # cached
    assert (a, ids_a) == (b, ids_b)
    assert generate_responses(
        model, tokenizer, convs, max_new_tokens=10, temperature=1.0, seed=3, with_ids=True, batch_size=5, progress=False
    ) == (b, ids_b)  # from the cache
    other = generate_responses(
        model,
        tokenizer,
        convs,
        max_new_tokens=10,
        temperature=1.0,
        seed=4,
        with_ids=True,
        batch_size=5,
        cache=False,
        progress=False,
    )[1]
    greedy = generate_responses(model, tokenizer, convs, max_new_tokens=10, batch_size=5, cache=False, progress=False)
    assert other != ids_a and greedy != a
    with pytest.raises(ValueError, match="temperature"):
        generate_responses(model, tokenizer, convs, temperature=-1.0, cache=False)
    model.generation_config.repetition_penalty = 1.3  # applied before the sampler: not softmax(logits / T)
    with pytest.raises(ValueError, match="repetition_penalty"):
        generate_responses(model, tokenizer, convs, temperature=1.0, cache=False)


@pytest.mark.slow
def test_bundled_model_on_specbench_questions_is_token_identical(bundled, tmp_path):
    """The bundled SmolLM2 on three SpecBench questions, a tree and a chain, each token-identical to
    `generate`'s greedy decoding. The target runs in float64 (so no rounding tie can flip an argmax
    between a one-token step and a tree forward). The draft (layers 9, 10, 29) is trained for a few
    seconds on the target's own replies to these very questions: it has memorised them, so long
    paths are accepted and the real model's cache is pruned to them round after round."""
    import copy

    from elsi_lib.draft import corpus
    from elsi_lib.draft.features import build_features
    from elsi_lib.draft.vocabulary import draft_vocabulary, init_lm_head_from_target
    from elsi_lib.draft.train import TrainSettings, train_drafts
    from elsi_lib.inputs.chat import tokenize_conversation

    model, tokenizer = bundled
    target = copy.deepcopy(model).double()
    source, n = (9, 10, 29), 24
    questions = corpus.eval_questions(1, seed=0).head(3).conversation
    prompts = [torch.tensor(tokenize_conversation(tokenizer, c, add_generation_prompt=True)[0]) for c in questions]
    references = [greedy(target, p, n) for p in prompts]
    replied = [c + [{"role": "assistant", "content": tokenizer.decode(r)}] for c, r in zip(questions, references)]
    store = build_features(model, tokenizer, replied, list(source), progress=False)
    counts = torch.bincount(torch.from_numpy(store.reply_tokens()), minlength=model.config.vocab_size)
    d2t, t2d = draft_vocabulary(counts, 1024)
    draft = Eagle3Draft.from_target(model, source, 1024, seed=0)
    draft.set_vocabulary(d2t, t2d)
    init_lm_head_from_target(draft, model.get_output_embeddings())
    settings = TrainSettings(epochs=30, batch_tokens=4096, warmup=2, lr=3e-3, autocast_bf16=False)
    train_drafts(
        {"d": draft},
        store,
        model.get_output_embeddings().weight[t2d].detach().float(),
        settings,
        key={"test": "memorised"},
        progress=False,
    )
    draft.eval()
    accepted = {}
    for prompt, reference in zip(prompts, references):
        for nodes, depth, top_k in ((16, 4, 4), (3, 3, 1)):
            out = D.speculative_generate(
                target, draft, prompt, max_new_tokens=n, nodes=nodes, depth=depth, top_k=top_k, stop_at_eos=False
            )
            assert out.tokens == reference
            accepted.setdefault(nodes, []).extend(out.accepted)
    for nodes, per_round in accepted.items():  # the memorised draft does get long paths accepted
        assert max(per_round) >= 3 and sum(per_round) >= n, (nodes, per_round)
