"""Two agreements between code paths that must compute the same thing, on tiny random targets and
through public functions only:

1. lock-step training: a draft trained by `train_drafts` in a group with others (other layer sets,
   the final-norm source) ends bit-identical to the same draft trained alone with the same settings
   (the group shares batches and the feature read, nothing else);
2. the real loop against replay: at T = 0, `speculative_generate`'s accepted length in every round
   equals what `replay_sequence` computes for that round from the stored (teacher-forced) features
   of the target's greedy continuation, for each tree size, and the loop's tokens are that
   continuation (notebook 06's `loop_agreement`, here asserted round by round).
"""

import pytest
import torch

from conftest import CHAT_TEMPLATE, CORPUS, make_conversations, module_feature_store, perturb_norms
from elsi_lib import random_model
from elsi_lib.draft.decode import speculative_generate
from elsi_lib.draft.features import build_features
from elsi_lib.draft.model import Eagle3Draft
from elsi_lib.draft.config import FINAL_NORM
from elsi_lib.draft.replay import continuation_end, replay_sequence
from elsi_lib.draft.train import TrainSettings, train_drafts
from elsi_lib.draft.vocabulary import draft_vocabulary, init_lm_head_from_target
from elsi_lib.inputs.chat import tokenize_conversation

pytestmark = pytest.mark.usefixtures("one_torch_thread")

LAYERS = (0, 1, 2, 3)


def new_draft(target, source, vocabulary, size, seed, perturb=True):
    """A draft on `target` reading `source`, with the vocabulary maps, its lm_head from the target's
    rows and (with `perturb`) seeded norms away from 1, so that every weight matters."""
    draft = Eagle3Draft.from_target(target, source, size, seed=seed)
    draft.set_vocabulary(*vocabulary)
    init_lm_head_from_target(draft, target.get_output_embeddings())
    if perturb:
        perturb_norms(draft, seed)
    return draft


def vocabulary_of(store, vocab_size, size):
    counts = torch.zeros(vocab_size)
    for i in range(len(store)):
        counts += torch.bincount(store.sequence(i, features=False)["argmax"], minlength=vocab_size)
    return draft_vocabulary(counts, size)


def snapshot(draft):
    return {k: v.detach().clone() for k, v in draft.state_dict().items()}


# ---------------------------------------------------------------- 1. lock-step group == alone

GROUP_VOCAB = 48
GROUP = {"early": ((0, 1), 5), "late": ((1, 3), 6), "eagle2": (FINAL_NORM, 7)}  # method: (source, init seed)


@pytest.fixture(scope="module")
def group_store(tiny_model, tiny_tokenizer, tmp_path_factory):
    return module_feature_store(tiny_model, tiny_tokenizer, tmp_path_factory, 6, LAYERS)


@pytest.mark.parametrize("autocast", [True, False])
def test_a_draft_trained_in_lock_step_equals_the_draft_trained_alone(tiny_model, group_store, autocast):
    store = group_store
    vocabulary = vocabulary_of(store, tiny_model.config.vocab_size, GROUP_VOCAB)
    rows = tiny_model.get_output_embeddings().weight[vocabulary[1]].detach()
    settings = TrainSettings(
        ttt_steps=3,
        epochs=2,
        batch_tokens=400,
        warmup=2,
        lr=2e-3,
        autocast_bf16=autocast,
        seed=3,
        checkpoint_seconds=1e9,
    )
    key = {"test": "lock-step"}

    def drafts(methods):
        return {m: new_draft(tiny_model, GROUP[m][0], vocabulary, GROUP_VOCAB, GROUP[m][1]) for m in methods}

    group = drafts(GROUP)
    initial = {m: snapshot(d) for m, d in group.items()}
    together = train_drafts(group, store, rows, settings, key=key, progress=False)
    assert together["done"] == together["total"] >= 4
    for m, d in group.items():  # training moved every draft, each its own way
        assert not torch.equal(d.fc.weight, initial[m]["fc.weight"]), m
    assert not torch.equal(group["early"].lm_head.weight, group["late"].lm_head.weight)

    for m in GROUP:  # the first, a middle and the last member of the group, each trained alone
        alone = drafts([m])
        before = {k: v.clone() for k, v in alone[m].state_dict().items()}
        assert all(torch.equal(before[k], initial[m][k]) for k in before)  # the same starting point
        out = train_drafts(alone, store, rows, settings, key=key, progress=False)
        # Its own run, from the start: not the group's checkpoint read back.
        assert out["path"] != together["path"]
        assert out["done"] == out["total"] == together["total"] and len(out["log"]) == out["total"]
        weights, reference = alone[m].state_dict(), group[m].state_dict()
        assert weights.keys() == reference.keys()
        for name in weights:
            assert torch.equal(weights[name], reference[name]), (m, name)
        assert [entry[m] for entry in out["log"]] == [entry[m] for entry in together["log"]], m


# ---------------------------------------------------------------- 2. real loop == replay, round by round


def word_tokenizer():
    """A word-level tokenizer over conftest's corpus with the same ChatML template: any token ids
    decode to text that re-tokenises to the same ids (a BPE tokenizer re-merges across token
    boundaries), so the stored reply is exactly the target's greedy continuation."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<unk>", "<|im_start|>", "<|im_end|>", "<s>"]
    words = sorted(set(CORPUS) | set("system user assistant You are a tiny test model.".split()))
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(specials + words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="<|im_end|>", pad_token="<|im_end|>"
    )
    wrapped.add_special_tokens({"additional_special_tokens": specials})
    wrapped.chat_template = CHAT_TEMPLATE
    return wrapped


LOOP_SOURCES = {"layers": (1, 3), "eagle2": FINAL_NORM}
LOOP_VOCAB = 32  # of 48 target tokens: some greedy tokens lie outside the draft vocabulary
REPLY = 24  # greedy tokens per prompt
SIZES, DEPTH, TOP_K = (4, 12), 5, 2  # narrow trees: deep paths get in, up to 4 accepted


@pytest.fixture(scope="module")
def loop_setup(tmp_path_factory):
    """A float64 target (no rounding near-tie between its one-token and tree forwards), its greedy
    replies to 8 prompts, their stored features, and two drafts trained on them for a few epochs
    (paths of 3 and 4 accepted in some rounds, none in others)."""
    tokenizer = word_tokenizer()
    target = random_model(n_layers=4, hidden_size=32, vocab_size=len(tokenizer), seed=1, dtype="float64")
    with torch.no_grad():  # larger weights: continuations that depend on the context, not one short cycle
        for p in target.parameters():
            if p.dim() == 2:
                p.mul_(3.0)
    target.generation_config.eos_token_id = None
    conversations = make_conversations(8, seed=0, words=(3, 8))
    replies, replied = [], []
    for conversation in conversations:
        prompt = torch.tensor(tokenize_conversation(tokenizer, conversation, add_generation_prompt=True)[0])
        generated = target.generate(
            prompt[None],
            attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
            do_sample=False,
            max_new_tokens=REPLY,
            min_new_tokens=REPLY,
        )
        replies.append(generated[0, len(prompt) :].tolist())
        replied.append(conversation + [{"role": "assistant", "content": tokenizer.decode(replies[-1])}])
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ELSI_CACHE_DIR", str(tmp_path_factory.mktemp("loop")))
        store = build_features(target, tokenizer, replied, LAYERS, progress=False)
        vocabulary = vocabulary_of(store, len(tokenizer), LOOP_VOCAB)
        drafts = {
            m: new_draft(target, s, vocabulary, LOOP_VOCAB, seed=0, perturb=False) for m, s in LOOP_SOURCES.items()
        }
        settings = TrainSettings(
            epochs=10, batch_tokens=400, warmup=2, lr=3e-3, autocast_bf16=False, checkpoint_seconds=1e9
        )
        rows = target.get_output_embeddings().weight[vocabulary[1]].detach().float()
        train_drafts(drafts, store, rows, settings, key={"test": "loop"}, progress=False)
    return target, store, replies, {m: d.eval() for m, d in drafts.items()}


@pytest.mark.parametrize("autocast", [True, False])
@pytest.mark.parametrize("method", list(LOOP_SOURCES))
def test_the_real_loop_agrees_with_replay_round_by_round(loop_setup, method, autocast):
    target, store, replies, drafts = loop_setup
    draft = drafts[method]
    loop = {n: [] for n in SIZES}
    for i, reply in enumerate(replies):
        sequence = store.sequence(i, draft.config.source)
        ids, start = sequence["ids"], sequence["start"]
        end = continuation_end(ids, sequence["argmax"], start, REPLY)
        assert ids[start:end].tolist() == reply  # the stored continuation is the target's greedy reply, whole
        rounds = replay_sequence(
            draft, sequence, tree_nodes=SIZES, depth=DEPTH, top_k=TOP_K, max_tokens=REPLY, autocast=autocast
        )
        for nodes in SIZES:
            out = speculative_generate(
                target,
                draft,
                ids[:start],
                max_new_tokens=len(reply),
                nodes=nodes,
                depth=DEPTH,
                top_k=TOP_K,
                stop_at_eos=False,
                autocast=autocast,
            )
            assert out.tokens == reply, (i, nodes)
            assert len(out.tokens) == 1 + sum(a + 1 for a in out.accepted)
            assert out.accepted == rounds[nodes], (i, nodes)
            loop[nodes].append(out.accepted)
    # Not vacuous: rounds with nothing and with long paths accepted, and the tree sizes differ.
    every = [a for n in SIZES for per_prompt in loop[n] for a in per_prompt]
    assert 0 in every and max(every) >= 3, every
    assert loop[SIZES[0]] != loop[SIZES[1]]
