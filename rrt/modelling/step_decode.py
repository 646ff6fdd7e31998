"""Step-level batching (`rewrite.schedule: step`): each recipe's step decoded on its own clock.

Round-level batching (rrt.modelling.scheduler over `Rewriter.advance`) starts the steps of every
recipe in flight together, and the next round waits for the longest of them, so a recipe whose
candidates all ended early sits idle while the GPU replays the step for everyone. Here each recipe
in flight holds a slot of one SlotDecoder: the shared prompt cache's layout (a prompt's keys and
values once, then its candidates' own columns), with a step count per row. When every candidate of
a slot has ended, its step is handed back, and the recipe's next prompt is prefilled into that slot
while the other slots go on decoding. The step keeps its fixed shapes, so on a GPU each token is
still one graph replay for every slot together.

Every candidate draws its own seeded stream's numbers, as in every other way, so a recipe gets the
tokens that round-level batching gives it (on a CPU in fp32, up to the last bits of a prefill run
beside other prompts). Guarded prompts (ViolationGuard) need the host after every token; the
rewriter keeps round-level batching for them.
"""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

from rrt.modelling.sampling import Sampled, SamplingSettings, device_draw, prefill, record_drawn
from rrt.modelling.static_decode import (
    COLUMN_MULTIPLE,
    STATS,
    SYNC_EVERY,
    NoRoom,
    SharedPromptDecoder,
    _round_up,
    _Stream,
    cache_room,
)


class SlotDecoder(SharedPromptDecoder):
    """A SharedPromptDecoder whose prompt slots run each on its own step count: a slot is loaded with
    a new prompt while the others decode, and a row stops advancing once it drew a stop or its last
    token. An empty slot's rows count as ended."""

    def __init__(
        self,
        lm,
        slots: int,
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

        super().__init__(lm, slots, n, columns, steps, settings, stops, dtype, device, graph)
        self.row_step = torch.full(
            (self.rows,), steps, dtype=torch.long, device=device
        )  # the token drawn next
        self.stopped.fill_(True)
        self.valid[:, :, 0] = True  # an empty slot attends to one (zero) column, never to none

    def _columns(self):
        """Each row's own column for its last token (a row that has ended writes to its last, unused one)."""
        return self.own_from + (self.row_step.clamp(1, self.steps) - 1)

    def _next_token(self, hidden, rows: int) -> None:
        """Each live row's next token drawn from its own next number and recorded; ended rows keep theirs."""
        import torch

        logits = self.body.logits(hidden)
        self.logits.copy_(logits)
        live = (self.row_step < self.steps) & ~self.stopped
        at = self.row_step.clamp(max=self.steps - 1)[:, None]
        token = device_draw(logits, self.uniforms.gather(1, at)[:, 0], self.settings)
        self.tok.copy_(token)
        self.tokens.scatter_(
            1, at, torch.where(live, token, self.tokens.gather(1, at)[:, 0])[:, None]
        )
        self.stopped.logical_or_(live & (token[:, None] == self.stops).any(-1))
        self.pos.add_(live.long())
        self.row_step.add_(live.long())

    def load_slot(
        self, slot: int, keys: list, values: list, first_logits, last_position, uniforms
    ) -> None:
        """A prompt's cache (per layer, [key-value heads, length, dim]) into `slot`, its candidates'
        numbers set, and each candidate's token 0 drawn from the prompt's last logits."""
        n, length = self.n, keys[0].shape[1]
        rows = slice(slot * n, slot * n + n)
        for layer in range(self.layers):
            self.keys[layer][slot, :, :length].copy_(keys[layer])
            self.values[layer][slot, :, :length].copy_(values[layer])
        self.valid[slot].zero_()
        self.valid[slot, :, :length] = True
        self.pos[rows] = last_position + 1
        self.uniforms[rows].copy_(uniforms)
        self.tokens[rows] = -1
        logits = first_logits[None].expand(n, -1)
        self.logits[rows].copy_(logits)
        token = device_draw(logits, self.uniforms[rows, 0], self.settings)
        self.tok[rows] = token
        self.tokens[rows, 0] = token
        self.stopped[rows] = (token[:, None] == self.stops).any(-1)
        self.row_step[rows] = 1

    def park(self, slot: int) -> None:
        """Empty `slot`: its rows count as ended until it is loaded again."""
        rows = slice(slot * self.n, slot * self.n + self.n)
        self.row_step[rows] = self.steps
        self.stopped[rows] = True
        self.valid[slot].zero_()
        self.valid[slot, :, 0] = True

    def ended_slots(self) -> list[bool]:
        """Whether every row of each slot has ended (one copy to the host)."""
        live = (self.row_step < self.steps) & ~self.stopped
        return (~live.view(self.prompts, self.n).any(1)).tolist()


class SlotSampler:
    """Prompts decoded each in a slot of one SlotDecoder of its own, a new prompt started in any
    free slot between decode steps: `start` prefills and loads, `run` decodes until a slot ends.

    The host looks at every slot together, every SYNC_EVERY decode steps of the decoder and when a
    slot reaches its last token, so the slots that ended since the last look start their next
    prompts in one prefill. A step still ends at most SYNC_EVERY - 1 decode steps after its last
    candidate, as in a round. With `decode_ahead` (on CUDA, where the host only queues the GPU's
    work), `run` queues the decode steps to the next look before it hands the ended steps back, so
    the GPU decodes the other slots while the host chooses candidates and prefills the next prompts."""

    def __init__(
        self,
        lm,
        slots: int,
        prompt_tokens: int,
        stop_ids: set[int],
        pad_id: int,
        settings: SamplingSettings,
        device,
        graph: bool,
        decode_ahead: bool | None = None,
    ):
        self.lm, self.slots, self.settings, self.device, self.graph = (
            lm,
            slots,
            settings,
            device,
            graph,
        )
        self.columns = _round_up(prompt_tokens, COLUMN_MULTIPLE)
        self.stop_ids, self.pad_id = set(stop_ids), pad_id
        self.owners: dict[int, tuple] = {}  # slot -> (key, kept prefix)
        self.ages: dict[int, int] = {}  # slot -> decode steps since its prompt was loaded
        self.clock = 0  # decode steps of the decoder so far (looks fall on its multiples)
        self.looked: int | None = None  # the clock at the last look
        self.decode_ahead = str(device).startswith("cuda") if decode_ahead is None else decode_ahead
        self.decoder: SlotDecoder | None = None

    @property
    def keys(self) -> set:
        """The keys of the prompts in the slots (their steps being decoded)."""
        return {key for key, _ in self.owners.values()}

    @property
    def free(self) -> int:
        """Slots without a prompt."""
        return self.slots - len(self.owners)

    def _decoder(self, dtype) -> SlotDecoder:
        import torch

        if self.decoder is None:
            n, steps = self.settings.candidates, self.settings.max_new_tokens
            cache_room(self.lm, self.slots * (self.columns + n * steps), dtype, self.device)
            try:
                self.decoder = SlotDecoder(
                    self.lm,
                    self.slots,
                    n,
                    self.columns,
                    steps,
                    self.settings,
                    tuple(sorted(self.stop_ids)),
                    dtype,
                    self.device,
                    self.graph,
                )
            except torch.cuda.OutOfMemoryError as err:
                raise NoRoom(str(err).splitlines()[0]) from err
            STATS["decoders"] += 1
        return self.decoder

    def start(self, jobs: list[tuple]) -> None:
        """Prefill (key, prompt ids, seed, prefix, keep) jobs together, each into a free slot."""
        import torch

        if not jobs:
            return
        if len(jobs) > self.free:
            raise ValueError(f"{len(jobs)} prompts for {self.free} free slots")
        with torch.no_grad():
            self._load(jobs)

    def _load(self, jobs: list[tuple]) -> None:
        """The jobs' one prefill, each prompt's own columns loaded into a free slot."""
        import torch

        done = prefill(
            self.lm,
            [job[1] for job in jobs],
            self.pad_id,
            self.device,
            [job[3] for job in jobs],
            [job[4] for job in jobs],
        )
        decoder = self._decoder(done.cache.layers[0].keys.dtype)
        n, steps = self.settings.candidates, self.settings.max_new_tokens
        free = [slot for slot in range(self.slots) if slot not in self.owners]
        for row, (job, slot) in enumerate(zip(jobs, free)):
            # The prompt's own columns only: positions are explicit, so its left padding need not come along.
            columns = done.mask[row].nonzero()[:, 0]
            if len(columns) > self.columns:
                raise ValueError(
                    f"a prompt of {len(columns)} tokens does not fit {self.columns} cache columns"
                )
            keys = [layer.keys[row].index_select(1, columns) for layer in done.cache.layers]
            values = [layer.values[row].index_select(1, columns) for layer in done.cache.layers]
            # The numbers every other way draws: candidate j's stream is seeded by (seed, j).
            numbers = np.array(
                [
                    _Stream(np.random.default_rng([job[2], j]), steps).values[:steps]
                    for j in range(n)
                ],
                dtype=np.float32,
            )
            decoder.load_slot(
                slot,
                keys,
                values,
                done.logits[row],
                done.positions[row, -1],
                torch.as_tensor(numbers, device=self.device),
            )
            self.owners[slot] = (job[0], done.kept[row])
            self.ages[slot] = 0

    def run(self) -> list[tuple[Hashable, Sampled]]:
        """Decode until every candidate of at least one slot has ended; those slots' (key, Sampled), the
        slots freed."""
        import torch

        if not self.owners:
            return []
        with torch.no_grad():
            done = self._harvest(self._decode())
            if self.decode_ahead and self.owners:
                self._advance()
        return done

    def _decode(self) -> list[int]:
        """Decode steps until some slot's candidates have all ended; those slots."""
        decoder = self.decoder
        while True:
            # No look again before a step: only a prompt whose every candidate stopped at its first
            # token could have ended since, and the next look finds it.
            if self.looked != self.clock:
                self.looked = self.clock
                ended = decoder.ended_slots()
                done = [slot for slot in self.owners if ended[slot]]
                if done:
                    return done
            self._advance()

    def _advance(self) -> None:
        """Decode steps to the next look: the next multiple of SYNC_EVERY, or sooner where a slot
        reaches its last token."""
        decoder = self.decoder
        last = min(self.settings.max_new_tokens - 1 - self.ages[slot] for slot in self.owners)
        ahead = max(1, min(SYNC_EVERY - self.clock % SYNC_EVERY, last))
        for _ in range(ahead):
            decoder.advance(decoder.rows, decoder.steps)
        self.clock += ahead
        for slot in self.owners:
            self.ages[slot] += ahead

    def _harvest(self, done: list[int]) -> list[tuple[Hashable, Sampled]]:
        """The ended slots' steps as (key, Sampled), their slots freed."""
        decoder, n = self.decoder, self.settings.candidates
        out = []
        for slot in sorted(done):
            key, kept = self.owners.pop(slot)
            del self.ages[slot]
            sampled = Sampled([[] for _ in range(n)], ["length"] * n, kept)
            for j, row in enumerate(decoder.tokens[slot * n : slot * n + n].tolist()):
                record_drawn(sampled, j, row, self.stop_ids)
            decoder.park(slot)
            out.append((key, sampled))
        return out

    def drop(self, keys) -> None:
        """Empty the slots of these keys' prompts (their recipes left the batch)."""
        gone = set(keys)
        for slot in [slot for slot, (key, _) in self.owners.items() if key in gone]:
            del self.owners[slot], self.ages[slot]
            self.decoder.park(slot)

    def clear(self) -> None:
        """Empty every slot."""
        self.drop([key for key, _ in self.owners.values()])
