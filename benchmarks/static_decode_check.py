"""The CUDA decoding plan (static cache, graph-captured) against the plain loop, per precision.

    python benchmarks/static_decode_check.py            # on a GPU: the loop and the graph plan
    python benchmarks/static_decode_check.py --device cpu --layers 2 --width 128
    python benchmarks/static_decode_check.py --family llama   # a Llama: rotary positions, grouped heads

A gpt2-medium-shaped model (or, with --family llama, a Llama of the same width with four query
heads per key-value head) with random weights samples ten candidates for each of 16 random
prompts; each row prints the share of candidates whose tokens are the same under the two plans
(off CUDA the graph plan's steps run eagerly), and the mean index of the first token where they
part. `--peaky` scales the embedding (tied to the LM head), so the
next-token distributions are as sharp as a trained model's instead of nearly flat; rounding then
rarely changes a draw. TF32 is off, so fp32 rows compare exact arithmetic orders only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda or cpu (captures need cuda)")
    parser.add_argument("--family", choices=("gpt2", "llama"), default="gpt2")
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--width", type=int, default=1024, help="hidden size (heads: width / 64)")
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--peaky", default="1,8", help="comma list of embedding scales")
    parser.add_argument("--dtypes", default="float32,float16,bfloat16")
    return parser


def agreement(out: dict, a: str, b: str, first: int | None = None) -> float:
    """Share of candidates whose tokens (the first `first`) are the same under decode steps a and b."""
    pairs = [
        (x[:first], y[:first])
        for ra, rb in zip(out[a], out[b])
        for x, y in zip(ra.tokens, rb.tokens)
    ]
    return round(sum(x == y for x, y in pairs) / len(pairs), 3)


def first_difference(out: dict, a: str, b: str, length: int) -> float:
    """Mean index of the first token where two decode steps' candidates differ (length: never)."""
    found = []
    for ra, rb in zip(out[a], out[b]):
        for x, y in zip(ra.tokens, rb.tokens):
            found.append(next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), length))
    return round(sum(found) / len(found), 1)


def main(argv: list[str] | None = None) -> int:
    """Print one JSON line per precision, sharpness and top-k."""
    import torch
    from transformers import AutoModelForCausalLM, GPT2Config, LlamaConfig

    from rrt.modelling.sampling import PLANS, CandidateSampler, SamplingSettings

    args = build_parser().parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("static_decode_check: no CUDA device (use --device cpu)", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    heads = max(1, args.width // 64)
    if args.family == "gpt2":
        config = GPT2Config(
            vocab_size=8000, n_layer=args.layers, n_head=heads, n_embd=args.width, n_positions=1024
        )
    else:
        config = LlamaConfig(
            vocab_size=8000,
            num_hidden_layers=args.layers,
            hidden_size=args.width,
            intermediate_size=args.width * 8 // 3,
            num_attention_heads=heads,
            num_key_value_heads=heads // 4 if heads % 4 == 0 else heads,
            max_position_embeddings=1024,
            tie_word_embeddings=True,
        )
    draw = torch.Generator().manual_seed(0)
    prompts = [
        torch.randint(
            10, 7990, (int(torch.randint(60, 200, (1,), generator=draw)),), generator=draw
        ).tolist()
        for _ in range(16)
    ]
    for dtype in args.dtypes.split(","):
        for peaky in (float(p) for p in args.peaky.split(",")):
            for top_k in (40, 1):
                torch.manual_seed(1)
                lm = AutoModelForCausalLM.from_config(config).eval()
                with torch.no_grad():
                    lm.get_input_embeddings().weight.mul_(peaky)  # tied to the LM head
                lm = lm.to(args.device, getattr(torch, dtype))
                settings = SamplingSettings(
                    top_k=top_k,
                    top_p=1.0,
                    temperature=1.0,
                    candidates=10,
                    max_new_tokens=args.new_tokens,
                )
                with torch.no_grad():
                    out = {
                        plan: CandidateSampler(lm, args.device, plan).sample(
                            prompts, list(range(len(prompts))), set(), 0, settings
                        )
                        for plan in PLANS
                    }
                row = {
                    "family": args.family,
                    "dtype": dtype,
                    "peaky": peaky,
                    "top_k": top_k,
                    "graph = loop": agreement(out, "graph", "loop"),
                    "graph = loop, first 8": agreement(out, "graph", "loop", 8),
                    "first differing token": first_difference(
                        out, "graph", "loop", args.new_tokens
                    ),
                }
                print(json.dumps(row), flush=True)
                del lm
    return 0


if __name__ == "__main__":
    sys.exit(main())
