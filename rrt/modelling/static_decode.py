"""The decode loop on a preallocated key-value cache, one step of fixed shapes of a GPT-2 or Llama
family model, captured as a CUDA graph on a GPU (`rewrite.decode_step`: static | graph).

The shared prefill stays as it is (rrt.modelling.sampling); its keys and values are copied into a
cache of C rows (candidates, padded to a bucket) x L columns (prompt + new tokens), allocated
once per shape and kept with the model. With graphs, a kept cache of up to COLUMN_REUSE times
the columns a batch needs serves it, the extra columns masked: prompt lengths vary widely at a
1024-token block, and each new shape costs its captures, and past GPU_DECODERS an eviction (eager
steps keep exact shapes: they have no capture to save). One decode step reads and writes only
such fixed buffers: the last token and its position, the column it writes (shared by every row:
left padding ends every prompt in the same column), the valid-column mask, each candidate's
pre-drawn numbers and the tokens so far. So on a GPU the whole step - every block, the LM head,
top-k / top-p and the draw - is one graph replay, with no host work and no host sync per token.
What differs by family is in a body (rrt.modelling.decode_bodies): a Llama model's keys are cached
already rotated to their positions, and its key-value heads are cached once, not once per query
head: the query heads of one key-value head are the queries of one attention call.

The same numbers are drawn in the same order as `rewrite.decode: host` draws them, so the tokens
are the host's (on CPU, token for token; on a GPU up to float rounding). Every SYNC_EVERY tokens
the host looks at which candidates stopped; when at most half the rows are live they move to
the front and a graph of the smaller bucket takes over. A guarded prompt (ViolationGuard) is
checked on the host after each step: the tokens are copied back, and only a token the guard
refuses costs more (that row's logits come back and it redraws as the host would; a row that takes
a word back gets its token before the cut as its next input, the cut columns masked). A batch whose
cache would take more than CACHE_SHARE of the GPU's memory is decoded the dynamic way (NoRoom).
"""

from __future__ import annotations

import warnings
from collections import OrderedDict

import numpy as np

from rrt.modelling.decode_bodies import LLAMA_LIKE, body_of
from rrt.modelling.sampling import (
    Sampled,
    SamplingSettings,
    device_draw,
    finish_guarded,
    record_drawn,
)

SYNC_EVERY = 8  # tokens between the host's looks at finished candidates (unguarded)
EAGER_BEFORE_CAPTURE = (
    2  # eager steps of a new bucket before its capture (lazy kernels, cuBLAS workspaces)
)
COLUMN_MULTIPLE = 64  # cache columns round up to this, so prompts of near lengths share one cache
COLUMN_REUSE = (
    1.25  # a kept graph cache with up to this many times the columns a batch needs serves it
)
MIN_ROWS = 8  # the smallest bucket a batch shrinks to
CACHE_SHARE = 0.4  # of the GPU's memory the kept caches may hold together
CPU_DECODERS = 3  # caches kept per model on the host
GPU_DECODERS = 8  # and on a GPU (each also holds its graphs' memory)

# Counts since the process started, for benchmarks and logs.
STATS = {
    "decoders": 0,
    "captures": 0,
    "capture_failures": 0,
    "replays": 0,
    "eager_steps": 0,
    "guard_redraws": 0,
    "no_room": 0,
    "evictions": 0,
    "batches": 0,
    "columns_needed": 0,
    "columns_held": 0,
}


class NoRoom(Exception):
    """The static cache of a batch does not fit the memory it may take: decode it the dynamic way."""


def supports(lm) -> bool:
    """Whether the static step can run this model: the GPT-2 family (self-attention only) or the
    Llama family (LLAMA_LIKE: every layer attends to the whole sequence, with rotary positions
    whose frequencies do not change with the sequence's length)."""
    config = getattr(lm, "config", None)
    kind = getattr(config, "model_type", None)
    if kind == "gpt2":
        return hasattr(lm, "transformer") and not getattr(config, "add_cross_attention", False)
    if kind in LLAMA_LIKE:
        windowed = (
            getattr(config, "sliding_window", None) is not None
            and getattr(config, "use_sliding_window", True)
            or any(t != "full_attention" for t in getattr(config, "layer_types", None) or [])
        )
        rotary = getattr(getattr(lm, "model", None), "rotary_emb", None)
        # dynamic and longrope rescale the frequencies from the positions seen, on the host.
        rope = getattr(rotary, "rope_type", None)
        return (
            not windowed and isinstance(rope, str) and "dynamic" not in rope and rope != "longrope"
        )
    return False


def resolve_decode_step(value: str, lm, device: str) -> str:
    """The decode step a setting means here: auto is graph on CUDA for the models it supports, else dynamic."""
    cuda = str(device).startswith("cuda")
    if value == "auto":
        return "graph" if cuda and supports(lm) else "dynamic"
    if value in ("static", "graph") and not supports(lm):
        raise ValueError(
            f"decode_step {value} needs a GPT-2 or Llama family model (got {type(lm).__name__}); "
            "use dynamic or auto"
        )
    if value == "graph" and not cuda:
        raise ValueError("decode_step graph needs a CUDA device; use static or auto on the CPU")
    return value


def resolve_prompt_cache(value: str, lm) -> str:
    """The prompt cache a setting means for this model: auto is shared for the GPT-2 family and copied
    for the others (each the faster of the two on an H200: benchmarks/RESULTS.md)."""
    if value == "auto":
        return (
            "shared"
            if getattr(getattr(lm, "config", None), "model_type", None) == "gpt2"
            else "copied"
        )
    return value


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _attention_kernels(device):
    """On CUDA, attention by the memory-efficient kernel (it takes the mask) or plain matmuls: the
    two whose capture in a graph is long established; elsewhere torch's own choice."""
    import contextlib

    if not str(device).startswith("cuda"):
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


def _capture(step, device):
    """A CUDA graph of one call of `step` (recorded, not run); returns its replay."""
    import torch

    graph = torch.cuda.CUDAGraph()
    # thread_local: CUDA calls of other threads (a server's) do not break this thread's capture.
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        step()
    return graph.replay


def _warm(step, device) -> None:
    """One eager step; on CUDA on a side stream, as a capture wants its warm-up."""
    import torch

    if str(device).startswith("cuda"):
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            step()
        torch.cuda.current_stream().wait_stream(stream)
    else:
        step()


class StaticDecoder:
    """The fixed buffers of one (rows, columns, steps, sampling) shape, with a graph per bucket."""

    def __init__(
        self,
        lm,
        rows: int,
        columns: int,
        steps: int,
        settings: SamplingSettings,
        stops: tuple,
        dtype,
        device,
        graph: bool,
    ):
        import torch

        self._buffers(lm, rows, columns, steps, settings, stops, dtype, device, graph)
        shape = (rows, self.kv_heads, columns, self.dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(self.layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(self.layers)]
        self.valid = torch.zeros((rows, columns), dtype=torch.bool, device=device)

    def _buffers(
        self,
        lm,
        rows: int,
        columns: int,
        steps: int,
        settings: SamplingSettings,
        stops: tuple,
        dtype,
        device,
        graph: bool,
    ) -> None:
        """Every buffer but the key-value cache: the rows' tokens, positions, numbers and logits."""
        import torch

        self.body = body_of(lm)
        self.heads, self.kv_heads, self.layers, self.dim = (
            self.body.heads,
            self.body.kv_heads,
            self.body.layers,
            self.body.dim,
        )
        self.groups = self.heads // self.kv_heads  # query heads per key-value head
        self.rows, self.columns, self.steps, self.settings = rows, columns, steps, settings
        self.graph, self.device = graph, device
        vocab = lm.get_output_embeddings().weight.shape[0]
        self.tok = torch.zeros(rows, dtype=torch.long, device=device)  # the last token of each row
        self.pos = torch.zeros(rows, dtype=torch.long, device=device)  # its position id
        self.col = torch.zeros(1, dtype=torch.long, device=device)  # its cache column (every row)
        self.step = torch.zeros(1, dtype=torch.long, device=device)  # the token index drawn next
        self.uniforms = torch.zeros((rows, steps), dtype=torch.float32, device=device)
        self.tokens = torch.full((rows, steps), -1, dtype=torch.long, device=device)
        self.stopped = torch.zeros(rows, dtype=torch.bool, device=device)
        self.logits = torch.zeros(
            (rows, vocab), dtype=dtype, device=device
        )  # the last step's, for the guard
        self.stops = torch.as_tensor(list(stops) or [-1], dtype=torch.long, device=device)
        self.replays: dict[int, object] = {}
        self.warmed: dict[int, int] = {}

    @property
    def bytes(self) -> int:
        """What its cache and logits take."""
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values, self.logits))

    def buckets(self) -> list[int]:
        """The row counts this decoder runs at as its candidates finish."""
        return _buckets(self.rows)

    def load(self, cache, first_logits, mask, positions, owner, uniforms) -> None:
        """The prefill's cache, mask and positions copied to the first rows, one per candidate (`owner`:
        its prompt; rows past the candidates copy prompt 0 and count as stopped); token 0 drawn."""
        import torch

        prefilled, rows = mask.shape[1], len(owner)
        index = torch.as_tensor(owner, dtype=torch.long, device=self.device)
        for layer, cached in enumerate(cache.layers):
            self.keys[layer][:rows, :, :prefilled].copy_(cached.keys.index_select(0, index))
            self.values[layer][:rows, :, :prefilled].copy_(cached.values.index_select(0, index))
        self.valid[:rows].zero_()
        self.valid[:rows, :prefilled].copy_(mask.index_select(0, index).bool())
        self.col.fill_(prefilled)
        self.prefilled = prefilled
        self._first_token(first_logits, positions, index, uniforms)

    def _first_token(self, first_logits, positions, index, uniforms) -> None:
        """Each row's position, numbers and token 0, drawn from its prompt's prefill logits."""
        rows = len(index)
        self.pos[:rows].copy_(positions[:, -1].index_select(0, index) + 1)
        self.step.fill_(1)
        self.uniforms[:rows].copy_(uniforms)
        self.tokens[:rows].fill_(-1)
        logits = first_logits.index_select(0, index)
        self.logits[:rows].copy_(logits)
        token = device_draw(logits, self.uniforms[:rows, 0], self.settings)
        self.tok[:rows].copy_(token)
        self.tokens[:rows, 0].copy_(token)
        self.stopped[:rows].copy_((token[:, None] == self.stops).any(-1))

    def _step(self, rows: int) -> None:
        """One token for the first `rows` rows, reading and writing only the fixed buffers."""
        import torch
        import torch.nn.functional as F

        body, width = self.body, self.heads * self.dim
        self.valid[:rows].index_fill_(1, self.col, True)
        # One additive mask for every layer, in place of a conversion of the boolean one in each.
        mask = torch.zeros(
            (rows, 1, 1, self.columns), dtype=self.keys[0].dtype, device=self.device
        ).masked_fill_(~self.valid[:rows, None, None, :], float("-inf"))
        hidden, where = body.embed(self.tok[:rows], self.pos[:rows])
        with _attention_kernels(self.device):
            for layer in range(self.layers):
                query, key, value = body.qkv(layer, hidden, where)
                keys, values = self.keys[layer][:rows], self.values[layer][:rows]
                keys.index_copy_(2, self.col, key)
                values.index_copy_(2, self.col, value)
                # A key-value head's query heads are queries of one call: no copy of the cache per group.
                grouped = query.reshape(rows, self.kv_heads, self.groups, self.dim)
                out = F.scaled_dot_product_attention(
                    grouped, keys, values, attn_mask=mask, scale=body.scales[layer]
                )
                hidden = body.finish(layer, hidden, out.reshape(rows, 1, width))
        self._next_token(hidden, rows)
        self.col.add_(1)

    def _next_token(self, hidden, rows: int) -> None:
        """The LM head on the last hidden states, each row's next token drawn and recorded."""
        logits = self.body.logits(hidden)
        self.logits[:rows].copy_(logits)
        token = device_draw(
            logits, self.uniforms[:rows].index_select(1, self.step)[:, 0], self.settings
        )
        self.tok[:rows].copy_(token)
        self.tokens[:rows].index_copy_(1, self.step, token[:, None])
        self.stopped[:rows].logical_or_((token[:, None] == self.stops).any(-1))
        self.pos[:rows].add_(1)
        self.step.add_(1)

    def advance(self, rows: int, steps_left: int) -> None:
        """One decode step of `rows` rows: a graph replay once the bucket has one, else eager (the
        first steps of a bucket are eager and warm it up, then it is captured)."""
        replay = self.replays.get(rows)
        if replay is not None:
            STATS["replays"] += 1
            return replay()
        step = lambda: self._step(rows)
        if self.graph and self.warmed.get(rows, 0) >= EAGER_BEFORE_CAPTURE and steps_left > 1:
            try:
                replay = _capture(step, self.device)
            except Exception as err:  # noqa: BLE001 - any capture failure: stay correct, eager
                STATS["capture_failures"] += 1
                warnings.warn(
                    f"CUDA graph capture failed, decoding eagerly: {type(err).__name__}: {err}"
                )
                self.graph = False
            else:
                STATS["captures"] += 1
                self.replays[rows] = replay
                return self.advance(rows, steps_left)
        STATS["eager_steps"] += 1
        self.warmed[rows] = self.warmed.get(rows, 0) + 1
        _warm(step, self.device) if self.graph else step()

    def column(self, row: int, step: int) -> int:
        """The cache column the token drawn at `step` is fed into (every row's is the same)."""
        return self.prefilled + step

    def take_back(self, row: int, hidden: list[int], token: int, position: int) -> None:
        """A row that took a word back: its cut columns masked, and `token` at `position` fed next."""
        self.valid[row, hidden] = False
        self.tok[row], self.pos[row] = token, position

    def compact(self, live: list[int], rows: int) -> None:
        """Move the live rows to the front of the first `rows` (the rest copy the first, stopped)."""
        import torch

        index = torch.as_tensor(
            live + [live[0]] * (rows - len(live)), dtype=torch.long, device=self.device
        )
        for tensor in (
            *self.keys,
            *self.values,
            self.valid,
            self.tok,
            self.pos,
            self.uniforms,
            self.tokens,
            self.stopped,
        ):
            tensor[:rows].copy_(tensor.index_select(0, index))
        self.stopped[len(live) : rows] = True


class SharedPromptDecoder(StaticDecoder):
    """`rewrite.prompt_cache: shared`: each prompt's keys and values are held once, and its n
    candidates attend to them as n queries of one attention call, so a decode step reads a
    prompt's cache once instead of once per candidate. A prompt's buffer holds its C prompt
    columns, then `steps` columns for each of its candidates' own tokens; the mask lets candidate
    j see the prompt and its own columns only, so this is the copied cache's function. Rows stay
    in place (prompt p's candidates are rows p*n .. p*n+n-1): a finished candidate keeps its row,
    which costs little next to the prompt's cache."""

    def __init__(
        self,
        lm,
        prompts: int,
        n: int,
        columns: int,
        steps: int,
        settings: SamplingSettings,
        stops: tuple,
        dtype,
        device,
        graph: bool,
    ):
        import torch

        self._buffers(lm, prompts * n, columns, steps, settings, stops, dtype, device, graph)
        self.prompts, self.n, self.width = prompts, n, columns + n * steps
        shape = (prompts, self.kv_heads, self.width, self.dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(self.layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(self.layers)]
        self.valid = torch.zeros((prompts, n, self.width), dtype=torch.bool, device=device)
        self.row_index = torch.arange(prompts * n, device=device)
        self.prompt_of = self.row_index // n  # each row's prompt
        self.own_from = columns + (self.row_index % n) * steps  # where each row's own columns start

    def buckets(self) -> list[int]:
        """One size: rows stay in place."""
        return [self.rows]

    def load(self, cache, first_logits, mask, positions, owner, uniforms) -> None:
        """The prefill's cache and mask copied once per prompt (slots past the prompts copy prompt 0,
        whose rows count as stopped); token 0 of every candidate drawn."""
        import torch

        prefilled, count = mask.shape[1], mask.shape[0]
        slots = torch.as_tensor(
            [p if p < count else 0 for p in range(self.prompts)],
            dtype=torch.long,
            device=self.device,
        )
        for layer, cached in enumerate(cache.layers):
            self.keys[layer][:, :, :prefilled].copy_(cached.keys.index_select(0, slots))
            self.values[layer][:, :, :prefilled].copy_(cached.values.index_select(0, slots))
        self.valid.zero_()
        self.valid[:, :, :prefilled].copy_(
            mask.index_select(0, slots).bool()[:, None, :].expand(-1, self.n, -1)
        )
        self.prefilled = prefilled
        self._first_token(
            first_logits,
            positions,
            torch.as_tensor(owner, dtype=torch.long, device=self.device),
            uniforms,
        )

    def _step(self, rows: int) -> None:
        """One token for every row, reading and writing only the fixed buffers."""
        import torch
        import torch.nn.functional as F

        body, width = self.body, self.heads * self.dim
        prompts, n, kv, groups, dim = self.prompts, self.n, self.kv_heads, self.groups, self.dim
        column = self._columns()
        self.valid.view(rows, self.width).index_put_(
            (self.row_index, column), torch.ones((), dtype=torch.bool, device=self.device)
        )
        mask = torch.zeros(
            (prompts, 1, n, self.width), dtype=self.keys[0].dtype, device=self.device
        ).masked_fill_(~self.valid[:, None], float("-inf"))
        if groups > 1:  # each candidate's mask row serves its query heads of one key-value head
            mask = mask.repeat_interleave(groups, dim=2)
        hidden, where = body.embed(self.tok, self.pos)
        with _attention_kernels(self.device):
            for layer in range(self.layers):
                query, key, value = body.qkv(layer, hidden, where)
                self.keys[layer][self.prompt_of, :, column] = key.reshape(rows, kv, dim)
                self.values[layer][self.prompt_of, :, column] = value.reshape(rows, kv, dim)
                # A prompt's n candidates (and each key-value head's query heads) are the queries of
                # one call against its one buffer.
                grouped = (
                    query.reshape(prompts, n, kv, groups, dim)
                    .transpose(1, 2)
                    .reshape(prompts, kv, n * groups, dim)
                )
                out = F.scaled_dot_product_attention(
                    grouped,
                    self.keys[layer],
                    self.values[layer],
                    attn_mask=mask,
                    scale=body.scales[layer],
                )
                out = (
                    out.reshape(prompts, kv, n, groups, dim).transpose(1, 2).reshape(rows, 1, width)
                )
                hidden = body.finish(layer, hidden, out)
        self._next_token(hidden, rows)

    def _columns(self):
        """Where each row's last token goes in its prompt's buffer."""
        return self.own_from + (self.step - 1)

    def column(self, row: int, step: int) -> int:
        """The column of its prompt's buffer the row's token drawn at `step` is fed into."""
        return self.width - self.n * self.steps + (row % self.n) * self.steps + step

    def take_back(self, row: int, hidden: list[int], token: int, position: int) -> None:
        """A row that took a word back: its cut columns masked for it alone, `token` at `position` fed next."""
        self.valid[row // self.n, row % self.n, hidden] = False
        self.tok[row], self.pos[row] = token, position

    def compact(self, live: list[int], rows: int) -> None:
        """Rows stay in place (one size)."""
        raise NotImplementedError("a shared-prompt decoder keeps its rows in place")


def cache_room(lm, cells: int, dtype, device) -> tuple[int, float | None]:
    """The bytes a static cache of `cells` positions per layer takes, and what the kept caches may
    take together on this device (None off CUDA); NoRoom when the one cache alone is too much."""
    import torch

    body = body_of(lm)
    need = (
        2
        * body.layers
        * cells
        * body.kv_heads
        * body.dim
        * torch.empty((), dtype=dtype).element_size()
    )
    limit = (
        CACHE_SHARE * torch.cuda.get_device_properties(device).total_memory
        if str(device).startswith("cuda")
        else None
    )
    if limit is not None and need > limit:
        raise NoRoom(f"a static cache of {cells} positions a layer needs {need / 2**30:.1f} GiB")
    return need, limit


def _decoder(
    lm,
    rows: int,
    columns: int,
    steps: int,
    settings: SamplingSettings,
    stops: tuple,
    dtype,
    device,
    graph: bool,
    n: int = 0,
) -> StaticDecoder:
    """The model's kept decoder of this shape, made (evicting the least recently used) when missing;
    with `n` candidates per prompt, a SharedPromptDecoder (its `columns` are the prompt's)."""
    import torch

    kept = lm.__dict__.setdefault("rrt_static_decoders", OrderedDict())
    shape = (
        columns,
        steps,
        settings.top_k,
        settings.top_p,
        settings.temperature,
        settings.banned,
        stops,
        str(dtype),
        str(device),
        graph,
        n,
    )
    # A larger decoder of the same settings serves fewer rows with its smaller buckets' graphs, and
    # with graphs shorter prompts with its extra columns masked: fewer shapes, so fewer captures and
    # evictions when prompt lengths vary (at a 1024-token block, dozens of roundings to COLUMN_MULTIPLE).
    most = columns * (COLUMN_REUSE if graph else 1)
    fits = [
        key
        for key, d in kept.items()
        if key[2:] == shape[1:] and columns <= key[1] <= most and rows in d.buckets()
    ]
    if fits:
        key = min(fits, key=lambda k: (k[1], k[0]))
        kept.move_to_end(key)
        return kept[key]
    key = (rows, *shape)
    cuda = str(device).startswith("cuda")
    cells = (
        (rows // n) * (columns + n * steps) if n else rows * columns
    )  # cached positions per layer
    need, limit = cache_room(lm, cells, dtype, device)
    while kept and (
        len(kept) >= (CPU_DECODERS if limit is None else GPU_DECODERS)
        or (limit is not None and sum(d.bytes for d in kept.values()) + need > limit)
    ):
        kept.popitem(last=False)
        STATS["evictions"] += 1
        if cuda:
            torch.cuda.empty_cache()
    try:
        kept[key] = (
            SharedPromptDecoder(
                lm, rows // n, n, columns, steps, settings, stops, dtype, device, graph
            )
            if n
            else StaticDecoder(lm, rows, columns, steps, settings, stops, dtype, device, graph)
        )
    except torch.cuda.OutOfMemoryError as err:
        kept.clear()
        torch.cuda.empty_cache()
        raise NoRoom(str(err).splitlines()[0]) from err
    STATS["decoders"] += 1
    return kept[key]


def _buckets(rows: int) -> list[int]:
    """The row counts a batch of `rows` runs at as its candidates finish: halving, down to MIN_ROWS."""
    sizes = [rows]
    while sizes[-1] // 2 >= MIN_ROWS:
        sizes.append(sizes[-1] // 2)
    return sizes


def decode_static(
    lm,
    cache,
    first_logits,
    mask,
    positions,
    streams: list,
    results: list[Sampled],
    stop_ids: set[int],
    settings: SamplingSettings,
    guards: list,
    device,
    graph: bool,
    shared: bool = False,
    *,
    last_tokens: list[int],
) -> None:
    """Decode every candidate of a prefilled batch on the static cache (see the module's text);
    `streams` are the candidates' seeded generators, `results` are filled in place; `shared`
    holds each prompt's cache once for its candidates (SharedPromptDecoder); `last_tokens` are
    the prompts' last tokens (a guarded row that takes back its first word feeds its prompt's again)."""
    import torch

    from rrt.modelling.sampling import guarded_rows

    n, steps, count = settings.candidates, settings.max_new_tokens, len(results)
    flat_rows = count * n
    rows = n * (
        1 << max(0, count - 1).bit_length()
    )  # prompts padded to a power of two: fewer shapes
    needed = mask.shape[1] + (0 if shared else steps)
    decoder = _decoder(
        lm,
        rows,
        _round_up(needed, COLUMN_MULTIPLE),
        steps,
        settings,
        tuple(sorted(stop_ids)),
        cache.layers[0].keys.dtype,
        device,
        graph,
        n if shared else 0,
    )
    STATS["batches"] += 1
    STATS["columns_needed"] += needed
    STATS["columns_held"] += decoder.columns
    drawn = [_Stream(rng, steps) for rng in streams]
    uniforms = np.zeros((rows, steps), dtype=np.float32)
    uniforms[:flat_rows] = [s.values[:steps] for s in drawn]
    owner = [min(r // n, count - 1) if r < flat_rows else 0 for r in range(rows)]
    decoder.load(
        cache, first_logits, mask, positions, owner, torch.as_tensor(uniforms, device=device)
    )
    flat = list(range(flat_rows)) + [-1] * (
        rows - flat_rows
    )  # the candidate of each row (-1: padding)
    decoder.stopped[flat_rows:rows] = True
    guarded = guarded_rows(guards, n, last_tokens, mask.shape[1] - 1, positions[:, -1] + 1)
    checker = _GuardChecker(decoder, drawn, guarded, stop_ids, settings, n) if guarded else None
    finished: dict[int, list[int]] = {}
    width = rows
    for step in range(steps):
        if checker:
            checker.check(step, flat, width)
        if step == steps - 1:
            break
        if (step + 1) % SYNC_EVERY == 0:
            stopped = decoder.stopped[:width].tolist()
            live = [r for r in range(width) if flat[r] >= 0 and not stopped[r]]
            if not live:
                break
            smaller = min((b for b in decoder.buckets() if b >= len(live)), default=width)
            if smaller < width:
                done, going = decoder.tokens[:width].tolist(), set(live)
                for r in range(width):
                    if flat[r] >= 0 and r not in going:
                        finished[flat[r]] = done[r]
                decoder.compact(live, smaller)
                flat = [flat[r] for r in live] + [-1] * (smaller - len(live))
                width = smaller
        decoder.advance(width, steps - 1 - step)
    for r, row in enumerate(decoder.tokens[:width].tolist()):
        if flat[r] >= 0:
            finished[flat[r]] = row
    for f in range(flat_rows):
        sample = results[f // n]
        if f in guarded:
            sample.ended[f % n] = checker.ended.get(f, "length")
            continue
        record_drawn(sample, f % n, finished[f], stop_ids)
    finish_guarded(guarded, results, n)


class _Stream:
    """A candidate's seeded numbers: the first `steps` drawn at once for the device, more on demand
    (the same sequence the host draws one at a time)."""

    def __init__(self, rng, steps: int):
        self.rng, self.values, self.used = rng, list(rng.random(steps)), 0

    def at(self, index: int) -> float:
        """The stream's number at `index`."""
        while len(self.values) <= index:
            self.values.append(self.rng.random())
        return float(self.values[index])

    def random(self) -> float:
        """The next number not yet used (as numpy's Generator.random)."""
        self.used += 1
        return self.at(self.used - 1)


class _GuardChecker:
    """The host's side of guarded rows: each drawn token checked against the row's text, and a
    refused one (or one drawn where the row has bans) redrawn from the row's logits as the host
    would draw it."""

    def __init__(
        self,
        decoder: StaticDecoder,
        streams: list[_Stream],
        guarded: dict,
        stop_ids: set[int],
        settings: SamplingSettings,
        n: int,
    ):
        self.decoder, self.streams, self.guarded, self.stop_ids = (
            decoder,
            streams,
            guarded,
            stop_ids,
        )
        self.settings, self.n = settings, n
        self.ended: dict[int, str] = {}

    def check(self, step: int, flat: list[int], width: int) -> None:
        """Judge the tokens drawn at `step` for every open guarded row, redrawing refused ones."""
        import torch

        from rrt.modelling.guarded_row import TAKEN_BACK

        decoder = self.decoder
        drawn = decoder.tok[:width].tolist()
        for r in range(width):
            f = flat[r]
            if f < 0 or f not in self.guarded or f in self.ended:
                continue
            row, stream, token = self.guarded[f], self.streams[f], drawn[r]
            if not row.must_redraw() and row.guard.check(row.text, token) == "ok":
                stream.used += 1
            else:
                STATS["guard_redraws"] += 1
                token = row.draw(decoder.logits[r].float().cpu(), self.settings, stream)
                if token == TAKEN_BACK:
                    decoder.take_back(r, row.hidden, *row.refeed)
                elif token is not None:
                    decoder.tok[r] = token
                    decoder.tokens[r, step] = token
                # The refused token may have been a stop; the redraw decides.
                decoder.stopped[r] = token is None or token in self.stop_ids
                # The row's next numbers follow what its redraw used, as on the host.
                following = [stream.at(stream.used + i) for i in range(decoder.steps - step - 1)]
                if following:
                    decoder.uniforms[r, step + 1 :] = torch.as_tensor(
                        following, dtype=torch.float32
                    )
            if token is None:
                self.ended[f] = "guard"
                decoder.stopped[r] = True
            elif token in self.stop_ids:
                self.ended[f] = "stop"
                decoder.stopped[r] = True
            else:
                if token != TAKEN_BACK:
                    row.accept(token)
                row.fed(decoder.column(r, step))
