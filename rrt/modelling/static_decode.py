"""The CUDA plan's decode loop: a preallocated key-value cache, one step of fixed shapes of a GPT-2
or Llama family model, captured as a CUDA graph and replayed for every later token.

The shared prefill stays as it is (rrt.modelling.sampling); its keys and values are copied into a
cache of C rows (candidates, padded to a bucket) x L columns (prompt + new tokens), allocated
once per shape and kept in the process's DECODERS for the StaticDecoding that made it. A kept cache
of up to COLUMN_REUSE times the columns a batch needs serves it, the extra columns masked: prompt
lengths vary widely at a 1024-token block, and each new shape costs its captures, and past
GPU_DECODERS an eviction. The bounds hold for the whole process, not for each sampler: a service
replica keeps a rewriter, so a sampler, per candidates value and guard choice, and each of them
may make decoders. One decode step reads and writes only such fixed buffers: the last token and
its position, the column it writes (shared by every row: left padding ends every prompt in the
same column), the valid-column mask, each candidate's pre-drawn numbers and the tokens so far. So
on a GPU the whole step - every block, the LM head, top-k / top-p and the draw - is one graph
replay, with no host work and no host sync per token. What differs by family is in a body
(rrt.modelling.decode_bodies): a Llama model's keys are cached already rotated to their positions,
and its key-value heads are cached once, not once per query head: the query heads of one key-value
head are the queries of one attention call.

The same numbers are drawn in the same order as the plain loop draws them, so the tokens are the
loop's (on CPU, where the steps run eagerly, token for token; on a GPU up to float rounding). Every
SYNC_EVERY tokens the host looks at which candidates stopped; when at most half the rows are live
they move to the front and a graph of the smaller bucket takes over. A guarded prompt
(ViolationGuard) is checked on the host after each step: the tokens are copied back, and only a
token the guard refuses costs more (that row's logits come back and it redraws as the host would; a
row that takes a word back gets its token before the cut as its next input, the cut columns
masked). A batch whose cache would take more than CACHE_SHARE of the GPU's memory raises NoRoom,
and the caller decodes it with the plain loop; so does one whose cache the GPU runs out of memory
for, and then every kept cache of the process is let go.
"""

from __future__ import annotations

# torch is imported where used: jobs/rewrite.py imports this module (through the rewriter), and its
# --help and driver start without it.
import contextlib
import itertools
import threading
import warnings
import weakref
from collections import Counter, OrderedDict

import numpy as np

from rrt.modelling.decode_bodies import LLAMA_LIKE, body_of
from rrt.modelling.drawing import Sampled, SamplingSettings, Stream, device_draw, record_drawn
from rrt.modelling.guarded_row import TAKEN_BACK, finish_guarded, guarded_rows

SYNC_EVERY = 8  # tokens between the host's looks at finished candidates (unguarded)
# Eager steps of a new bucket before its capture (lazy kernels, cuBLAS workspaces).
EAGER_BEFORE_CAPTURE = 2
COLUMN_MULTIPLE = 64  # cache columns round up to this, so prompts of near lengths share one cache
COLUMN_REUSE = 1.25  # a kept graph cache with up to this many times the columns needed serves it
MIN_ROWS = 8  # the smallest bucket a batch shrinks to
CACHE_SHARE = 0.4  # of the GPU's memory the process's kept caches may hold together
CPU_DECODERS = 3  # caches the process keeps on the host
GPU_DECODERS = 8  # and on a GPU (each also holds its graphs' memory)


class NoRoom(Exception):
    """The static cache of a batch does not fit the memory it may take: decode it the plain way."""


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


def round_up(value: int, multiple: int) -> int:
    """The smallest multiple of `multiple` at least `value`."""
    return -(-value // multiple) * multiple


def _buckets(rows: int) -> list[int]:
    sizes = [rows]
    while sizes[-1] // 2 >= MIN_ROWS:
        sizes.append(sizes[-1] // 2)
    return sizes


def _attention_kernels(device):
    """On CUDA, attention by the memory-efficient kernel (it takes the mask) or plain matmuls: the
    two whose capture in a graph is long established; elsewhere torch's own choice."""
    if not str(device).startswith("cuda"):
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


def _capture(step):
    """A CUDA graph of one call of `step` (recorded, not run); returns its replay."""
    import torch

    graph = torch.cuda.CUDAGraph()
    # thread_local: CUDA calls of other threads (a server's) do not break this thread's capture.
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        step()
    return graph.replay


def _warm(step) -> None:
    """One eager step on a side stream, as a capture wants its warm-up."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        step()
    torch.cuda.current_stream().wait_stream(stream)


class StaticDecoder:
    """The fixed buffers of one (rows, columns, steps, sampling) shape, with a graph per bucket
    (on CUDA); `counts` are its owner's."""

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
        counts: Counter,
    ):
        import torch

        self.body = body_of(lm)
        body = self.body
        self.heads, self.kv_heads, self.layers, self.dim = (
            body.heads,
            body.kv_heads,
            body.layers,
            body.dim,
        )
        self.groups = self.heads // self.kv_heads  # query heads per key-value head
        self.rows, self.columns, self.steps, self.settings = rows, columns, steps, settings
        self.graph, self.device, self.counts = graph, device, counts
        vocab = lm.get_output_embeddings().weight.shape[0]
        self.tok = torch.zeros(rows, dtype=torch.long, device=device)  # the last token of each row
        self.pos = torch.zeros(rows, dtype=torch.long, device=device)  # its position id
        self.col = torch.zeros(1, dtype=torch.long, device=device)  # its cache column (every row)
        self.step = torch.zeros(1, dtype=torch.long, device=device)  # the token index drawn next
        self.uniforms = torch.zeros((rows, steps), dtype=torch.float32, device=device)
        self.tokens = torch.full((rows, steps), -1, dtype=torch.long, device=device)
        self.stopped = torch.zeros(rows, dtype=torch.bool, device=device)
        # The last step's logits, for the guard.
        self.logits = torch.zeros((rows, vocab), dtype=dtype, device=device)
        self.stops = torch.as_tensor(list(stops) or [-1], dtype=torch.long, device=device)
        self.replays: dict[int, object] = {}
        self.warmed: dict[int, int] = {}
        shape = (rows, self.kv_heads, columns, self.dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(self.layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(self.layers)]
        self.valid = torch.zeros((rows, columns), dtype=torch.bool, device=device)

    @property
    def bytes(self) -> int:
        """What its cache and logits take."""
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values, self.logits))

    def buckets(self) -> list[int]:
        """The row counts this decoder runs at as its candidates finish: halving, down to MIN_ROWS."""
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
        self.col.add_(1)

    def advance(self, rows: int, steps_left: int) -> None:
        """One decode step of `rows` rows: a graph replay once the bucket has one, else eager (the
        first steps of a bucket are eager and warm it up, then it is captured)."""
        replay = self.replays.get(rows)
        if replay is not None:
            self.counts["replays"] += 1
            return replay()
        step = lambda: self._step(rows)
        if self.graph and self.warmed.get(rows, 0) >= EAGER_BEFORE_CAPTURE and steps_left > 1:
            try:
                replay = _capture(step)
            except Exception as err:  # noqa: BLE001 - any capture failure: stay correct, eager
                self.counts["capture_failures"] += 1
                warnings.warn(
                    f"CUDA graph capture failed, decoding eagerly: {type(err).__name__}: {err}"
                )
                self.graph = False
            else:
                self.counts["captures"] += 1
                self.replays[rows] = replay
                return self.advance(rows, steps_left)
        self.counts["eager_steps"] += 1
        self.warmed[rows] = self.warmed.get(rows, 0) + 1
        _warm(step) if self.graph else step()

    def column(self, step: int) -> int:
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


class DecoderRegistry:
    """Every static decoder the process keeps, for all its models and samplers, by the sampler that
    made it (its StaticDecoding's `owner`) and its shape: at most CPU_DECODERS (GPU_DECODERS on
    CUDA), on a GPU at most CACHE_SHARE of its memory together, the least recently used out."""

    def __init__(self):
        self.kept: OrderedDict[tuple, StaticDecoder] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """How many decoders are kept."""
        return len(self.kept)

    def _bytes_on(self, device) -> int:
        return sum(d.bytes for d in self.kept.values() if str(d.device) == str(device))

    def find(self, owner: int, serves) -> StaticDecoder | None:
        """The owner's kept decoder that `serves(key)` accepts with the fewest columns, then rows
        (it becomes the most recently used); None when none does."""
        with self._lock:
            fits = [key for key in self.kept if key[0] == owner and serves(key[1:])]
            if not fits:
                return None
            key = min(fits, key=lambda k: (k[2], k[1]))
            self.kept.move_to_end(key)
            return self.kept[key]

    def make_room(self, need: int, limit: float | None, device, counts: Counter) -> None:
        """Evict the least recently used until one more decoder of `need` bytes fits the count and,
        on a GPU (`limit`), the memory its kept caches may take."""
        cuda = limit is not None
        most = GPU_DECODERS if cuda else CPU_DECODERS
        evicted = 0
        with self._lock:
            while self.kept and (
                len(self.kept) >= most or cuda and self._bytes_on(device) + need > limit
            ):
                self.kept.popitem(last=False)
                evicted += 1
        counts["evictions"] += evicted
        if evicted and cuda:
            import torch

            torch.cuda.empty_cache()

    def add(self, owner: int, key: tuple, decoder: StaticDecoder) -> None:
        """Keep a new decoder of `owner` (made after `make_room`)."""
        with self._lock:
            self.kept[(owner, *key)] = decoder

    def drop(self, owner: int) -> None:
        """Let go of every decoder of `owner` (its sampler is gone)."""
        with self._lock:
            for key in [k for k in self.kept if k[0] == owner]:
                del self.kept[key]

    def clear(self) -> None:
        """Let go of every kept decoder (the GPU ran out of memory)."""
        with self._lock:
            self.kept.clear()


DECODERS = DecoderRegistry()
_OWNERS = itertools.count()


class StaticDecoding:
    """One model's static decode loop on one device: its caches, kept in the process's DECODERS, and
    its counts (caches made, captures, replays, eager steps, guard redraws, evictions, no room).
    Graphs are captured on CUDA; elsewhere the same steps run eagerly."""

    def __init__(self, lm, device, counts: Counter | None = None):
        self.lm, self.device = lm, device
        self.cuda = str(device).startswith("cuda")
        self.counts = counts if counts is not None else Counter()
        self.owner = next(_OWNERS)
        # Its caches go with it: a registry entry must not keep a model and its caches alive.
        weakref.finalize(self, DECODERS.drop, self.owner)

    def release(self) -> None:
        """Let go of the caches this loop keeps (the next batch makes what it needs)."""
        DECODERS.drop(self.owner)

    def _room(self, cells: int, dtype) -> tuple[int, float | None]:
        """The bytes a cache of `cells` positions per layer takes, and what the kept caches may
        take together (None off CUDA); NoRoom when the one cache alone is too much."""
        import torch

        body = body_of(self.lm)
        size = torch.empty((), dtype=dtype).element_size()
        need = 2 * body.layers * cells * body.kv_heads * body.dim * size
        limit = (
            CACHE_SHARE * torch.cuda.get_device_properties(self.device).total_memory
            if self.cuda
            else None
        )
        if limit is not None and need > limit:
            raise NoRoom(
                f"a static cache of {cells} positions a layer needs {need / 2**30:.1f} GiB"
            )
        return need, limit

    def _decoder(
        self, rows: int, columns: int, steps: int, settings: SamplingSettings, stops: tuple, dtype
    ) -> StaticDecoder:
        """The kept decoder of this shape, made (evicting the least recently used) when missing."""
        import torch

        shape = (
            columns,
            steps,
            settings.top_k,
            settings.top_p,
            settings.temperature,
            settings.banned,
            stops,
            str(dtype),
        )
        # A larger decoder of the same settings serves fewer rows with its smaller buckets' graphs, and
        # shorter prompts with its extra columns masked: fewer shapes, so fewer captures and
        # evictions when prompt lengths vary.
        most = columns * COLUMN_REUSE
        kept = DECODERS.find(
            self.owner,
            lambda key: (
                key[2:] == shape[1:] and columns <= key[1] <= most and rows in _buckets(key[0])
            ),
        )
        if kept is not None:
            return kept
        need, limit = self._room(rows * columns, dtype)
        DECODERS.make_room(need, limit, self.device, self.counts)
        key = (rows, *shape)
        try:
            decoder = StaticDecoder(
                self.lm,
                rows,
                columns,
                steps,
                settings,
                stops,
                dtype,
                self.device,
                self.cuda,
                self.counts,
            )
        except torch.cuda.OutOfMemoryError as err:
            # Another sampler's caches may be what filled the GPU: every kept cache goes.
            DECODERS.clear()
            torch.cuda.empty_cache()
            raise NoRoom(str(err).splitlines()[0]) from err
        DECODERS.add(self.owner, key, decoder)
        self.counts["decoders"] += 1
        return decoder

    def decode(
        self,
        cache,
        first_logits,
        mask,
        positions,
        streams: list,
        results: list[Sampled],
        stop_ids: set[int],
        settings: SamplingSettings,
        guards: list,
        last_tokens: list[int],
    ) -> None:
        """Decode every candidate of a prefilled batch on the static cache (see the module's text);
        `streams` are the candidates' seeded generators, `results` are filled in place;
        `last_tokens` are the prompts' last tokens (a guarded row that takes back its first word
        feeds its prompt's again)."""
        import torch

        n, steps, count = settings.candidates, settings.max_new_tokens, len(results)
        flat_rows = count * n
        rows = n * (1 << max(0, count - 1).bit_length())  # prompts padded to a power of two
        needed = mask.shape[1] + steps
        decoder = self._decoder(
            rows,
            round_up(needed, COLUMN_MULTIPLE),
            steps,
            settings,
            tuple(sorted(stop_ids)),
            cache.layers[0].keys.dtype,
        )
        self.counts["batches"] += 1
        self.counts["columns_needed"] += needed
        self.counts["columns_held"] += decoder.columns
        drawn = [Stream(rng, steps) for rng in streams]
        uniforms = np.zeros((rows, steps), dtype=np.float32)
        uniforms[:flat_rows] = [s.values[:steps] for s in drawn]
        owner = [min(r // n, count - 1) if r < flat_rows else 0 for r in range(rows)]
        decoder.load(
            cache,
            first_logits,
            mask,
            positions,
            owner,
            torch.as_tensor(uniforms, device=self.device),
        )
        flat = list(range(flat_rows)) + [-1] * (rows - flat_rows)  # each row's candidate (-1: none)
        decoder.stopped[flat_rows:rows] = True
        guarded = guarded_rows(guards, n, last_tokens, mask.shape[1] - 1, positions[:, -1] + 1)
        checker = (
            _GuardChecker(decoder, drawn, guarded, stop_ids, settings, self.counts)
            if guarded
            else None
        )
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


class _GuardChecker:
    """The host's side of guarded rows: each drawn token checked against the row's text, and a
    refused one (or one drawn where the row has bans) redrawn from the row's logits as the host
    would draw it."""

    def __init__(
        self,
        decoder: StaticDecoder,
        streams: list[Stream],
        guarded: dict,
        stop_ids: set[int],
        settings: SamplingSettings,
        counts: Counter,
    ):
        self.decoder, self.streams, self.guarded = decoder, streams, guarded
        self.stop_ids, self.settings, self.counts = stop_ids, settings, counts
        self.ended: dict[int, str] = {}

    def check(self, step: int, flat: list[int], width: int) -> None:
        """Judge the tokens drawn at `step` for every open guarded row, redrawing refused ones."""
        import torch

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
                self.counts["guard_redraws"] += 1
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
                row.fed(decoder.column(step))
