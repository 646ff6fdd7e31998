"""What one static decode step (rrt.modelling.static_decode) needs of each model family: the
embeddings of the last tokens, each layer's query, key and value and its output, and the LM head.

    body = body_of(lm)                           # GPT2Body, or LlamaBody for LLAMA_LIKE models
    hidden, where = body.embed(tokens, positions)
    query, key, value = body.qkv(layer, hidden, where)   # [rows, heads | kv_heads, 1, dim]
    hidden = body.finish(layer, hidden, attended)        # attended: [rows, 1, heads * dim]
    logits = body.logits(hidden)
"""

from __future__ import annotations

# transformers is imported where used: jobs/rewrite.py imports this module (through the rewriter),
# and its --help and driver start without it.

# Families whose layers are Llama's (rotary positions, grouped key-value heads, the same module names).
LLAMA_LIKE = ("llama", "mistral", "qwen2")


class GPT2Body:
    """GPT-2's embeddings, blocks and head as one decode step uses them (learned positions)."""

    def __init__(self, lm):
        config = lm.config
        self.lm, self.body = lm, lm.transformer
        self.heads = self.kv_heads = config.n_head
        self.layers, self.dim = config.n_layer, config.n_embd // config.n_head
        self.scales = []
        for layer in range(self.layers):
            scale = self.dim**-0.5 if config.scale_attn_weights else 1.0
            self.scales.append(
                scale / (layer + 1) if config.scale_attn_by_inverse_layer_idx else scale
            )

    def embed(self, tok, pos):
        """The hidden states of each row's last token, and what the blocks need of its position (none)."""
        return self.body.wte(tok[:, None]) + self.body.wpe(pos[:, None]), None

    def qkv(self, layer: int, hidden, where):
        """The layer's query [rows, heads, 1, dim], key and value [rows, kv_heads, 1, dim]."""
        block, rows, width = self.body.h[layer], hidden.shape[0], self.heads * self.dim
        query, key, value = block.attn.c_attn(block.ln_1(hidden)).split(width, dim=2)
        return tuple(
            t.view(rows, 1, self.heads, self.dim).transpose(1, 2) for t in (query, key, value)
        )

    def finish(self, layer: int, hidden, attended):
        """The layer's output from its input and the attention's [rows, 1, heads * dim]."""
        block = self.body.h[layer]
        hidden = block.attn.c_proj(attended) + hidden
        return hidden + block.mlp(block.ln_2(hidden))

    def logits(self, hidden):
        """The LM head on the final hidden states (its hooks, such as the padded rows' mask, run)."""
        return self.lm.get_output_embeddings()(self.body.ln_f(hidden))[:, -1, :]


class LlamaBody:
    """A Llama family model's (LLAMA_LIKE) embeddings, layers and head as one decode step uses them:
    rotary positions applied to queries and keys before the key is cached, grouped key-value heads."""

    def __init__(self, lm):
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        self.lm, self.body, self.rotate = lm, lm.model, apply_rotary_pos_emb
        attention = self.body.layers[0].self_attn
        self.heads, self.kv_heads = lm.config.num_attention_heads, lm.config.num_key_value_heads
        self.layers, self.dim = len(self.body.layers), attention.head_dim
        self.scales = [layer.self_attn.scaling for layer in self.body.layers]

    def embed(self, tok, pos):
        """The hidden states of each row's last token, and its rotary cosines and sines."""
        hidden = self.body.embed_tokens(tok[:, None])
        return hidden, self.body.rotary_emb(hidden, pos[:, None])

    def qkv(self, layer: int, hidden, where):
        """The layer's rotated query [rows, heads, 1, dim] and key, and value [rows, kv_heads, 1, dim]."""
        block, rows = self.body.layers[layer], hidden.shape[0]
        attention, normed = block.self_attn, block.input_layernorm(hidden)
        query = attention.q_proj(normed).view(rows, 1, self.heads, self.dim).transpose(1, 2)
        key = attention.k_proj(normed).view(rows, 1, self.kv_heads, self.dim).transpose(1, 2)
        value = attention.v_proj(normed).view(rows, 1, self.kv_heads, self.dim).transpose(1, 2)
        query, key = self.rotate(query, key, *where)
        return query, key, value

    def finish(self, layer: int, hidden, attended):
        """The layer's output from its input and the attention's [rows, 1, heads * dim]."""
        block = self.body.layers[layer]
        hidden = hidden + block.self_attn.o_proj(attended)
        return hidden + block.mlp(block.post_attention_layernorm(hidden))

    def logits(self, hidden):
        """The LM head on the final hidden states (its hooks, such as the padded rows' mask, run)."""
        return self.lm.get_output_embeddings()(self.body.norm(hidden))[:, -1, :]


def body_of(lm):
    """The model's family as the decode step sees it."""
    return GPT2Body(lm) if lm.config.model_type == "gpt2" else LlamaBody(lm)
