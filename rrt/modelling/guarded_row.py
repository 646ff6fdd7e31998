"""A guarded candidate's step while it is sampled: each token drawn under the guard, and a
refused word taken back.

When the guard refuses to let a forbidden word end ("Toss the chicken" + " with"), only letters
could follow it, and a model glues some on ("chickenocks"). Instead the row takes the word back:
its step is cut to before the token that began the word, that token is banned at that index, and
the decode loop feeds the token before the cut again, at its old position, with the cut tokens'
cache columns masked. The next token is then drawn as if the word had never been written. A row
takes back at most TAKE_BACKS words; past them a refused word's end lets only letters follow.

Both decode loops (rrt.modelling.sampling on a growing cache, rrt.modelling.static_decode on a
preallocated one) keep one GuardedRow per guarded candidate and draw through it, so they draw
the same tokens from the same numbers.
"""

from __future__ import annotations

# torch is imported where used: jobs/rewrite.py imports this module (through the rewriter), and its
# --help and driver start without it.
import numpy as np

from rrt.modelling.drawing import Sampled, draw, filtered_probs

GUARD_TRIES = 24  # draws of one token before the row gives up (ended "guard")
TAKE_BACKS = 8  # words a row may take back
TAKEN_BACK = -1  # what `draw` returns when the row took its last word back


class GuardedRow:
    """One candidate's tokens, where each one's text starts, the cache column each was fed at,
    and the tokens banned at an index where a word was taken back."""

    def __init__(self, guard, prompt_token: int, prompt_column: int, position: int):
        self.guard, self.prompt_token = guard, prompt_token
        self.position = position  # token 0's
        self.tokens: list[int] = []
        self.starts: list[int] = []  # where token i's text starts
        self.text = ""
        self.columns = [prompt_column]  # columns[i + 1]: where token i was fed
        self.bans: dict[int, set[int]] = {}
        self.taken_back = 0
        self.hidden: list[int] = []  # the columns the last take-back masks

    @property
    def refeed(self) -> tuple[int, int]:
        """The token to feed again after a take-back, and its position."""
        cut = len(self.tokens)
        return (self.tokens[-1] if cut else self.prompt_token), self.position + cut - 1

    def must_redraw(self) -> bool:
        """Whether the next token has bans (a device's draw, made without them, cannot stand)."""
        return bool(self.bans.get(len(self.tokens)))

    def draw(self, row_logits, settings, rng) -> int | None:
        """A token the guard accepts, TAKEN_BACK when the row took its last word back, or None when
        no token is found; `rng` gives one number a draw."""
        import torch

        logits = row_logits.clone()
        banned = self.bans.get(len(self.tokens))
        if banned:
            logits[torch.as_tensor(sorted(banned), dtype=torch.long)] = float("-inf")
        for _ in range(GUARD_TRIES):
            ids, probs = filtered_probs(logits[None], settings)
            ids, probs = ids[0].numpy(), probs[0].numpy()
            if not np.isfinite(probs).all() or probs.sum() <= 0:
                return None
            token = draw(ids, probs, rng.random())
            verdict = self.guard.check(self.text, token)
            if verdict == "ok":
                return token
            if verdict == "ban_word_end":
                if self.taken_back < TAKE_BACKS:
                    self._take_back()
                    return TAKEN_BACK
                logits[torch.as_tensor(self.guard.word_end_ids, dtype=torch.long)] = float("-inf")
            logits[token] = float("-inf")
        return None

    def accept(self, token: int) -> None:
        """Append a drawn token that is not a stop."""
        self.starts.append(len(self.text))
        self.tokens.append(token)
        self.text += self.guard.piece(token)

    def fed(self, column: int) -> None:
        """The last token (or the one fed again) went into this cache column."""
        self.columns.append(column)

    def _take_back(self) -> None:
        # Cut before the token holding the violation's first character; every later ban is void.
        start = self.guard.violation_start(self.text)
        cut = max(i for i, s in enumerate(self.starts) if s <= start)
        self.bans = {i: b for i, b in self.bans.items() if i < cut}
        self.bans.setdefault(cut, set()).add(self.tokens[cut])
        # columns[cut] holds the token fed again: it goes in a new column, at its old position.
        self.hidden = self.columns[cut:]
        del self.columns[cut:]
        self.text = self.text[: self.starts[cut]]
        del self.tokens[cut:], self.starts[cut:]
        self.taken_back += 1


def guarded_rows(
    guards: list, n: int, last_tokens: list[int], prompt_column: int, first_positions
) -> dict[int, GuardedRow]:
    """A GuardedRow for each candidate (flat index) whose prompt has a guard."""
    first = first_positions.tolist()
    return {
        f: GuardedRow(guards[f // n], last_tokens[f // n], prompt_column, first[f // n])
        for f in range(len(guards) * n)
        if guards[f // n] is not None
    }


def finish_guarded(rows: dict[int, GuardedRow], results: list[Sampled], n: int) -> None:
    """Each guarded candidate's tokens, as its row holds them, and the words taken back."""
    for f, row in rows.items():
        results[f // n].tokens[f % n] = list(row.tokens)
        results[f // n].taken_back += row.taken_back
