"""The evaluation report: one self-contained HTML page, source and rewrite side by side.

Red marks what breaks the constraint (in the source, and any left in the rewrite); orange marks a
food a rewritten step names that the recipe does not hold (rrt.evaluation.grounding); green marks
what the rewrite changed: the substitutions it lists, and words the source never used (a line
identical to a source line is not painted). Each rewritten step carries a small label saying how
it was decided (kept, guide, model) where its record says so. Each step's candidates and their rule
scores sit behind a `<details>` toggle, the chosen one marked. The page and table.md open with what
each system and each column is (rrt.evaluation.glossary); the best value of each column is marked by
its direction, and the paper's Table 2 rows sit beside ours.
"""

from __future__ import annotations

# matplotlib is imported where used: jobs/evaluate.py imports this module, and its --help starts
# without it.
import html
import re

from rrt.evaluation.glossary import (
    CAVEAT,
    DECISION_MEANINGS,
    DECISION_MEASURES,
    GROUNDING_MEASURES,
    MEASURES,
    PAPER_MEASURES,
    PAPER_ROWS,
    READER_MEASURES,
    describe_system,
    heading,
)
from rrt.evaluation.grounding import held_words
from rrt.evaluation.metrics import words
from rrt.recipes.foods import unlisted_foods
from rrt.recipes.tagger import parse_constraints, text_violations

_WORD_SPAN = re.compile(r"\w+(?:['’]\w+)*")
STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.25em .5em;text-align:right}
td:first-child,th:first-child{text-align:left}
.recipe{border:1px solid #bbb;border-radius:6px;padding:.5em 1em;margin:1em 0}
.pair{display:grid;grid-template-columns:1fr 1fr;gap:1.5em}
.bad{background:#f8c4c4;color:#900}.new{background:#c8f0c8;color:#064}
.invented{background:#fde2b8;color:#8a4b00;text-decoration:underline wavy}
.cands td{text-align:left;font-size:.9em}.chosen{font-weight:bold;background:#eef8ee}
.meta{color:#666;font-size:.9em}
.best{font-weight:bold;background:#fff3b0}
tr.paper td{color:#555;font-style:italic}tr.paper-head th{text-align:left;background:#f4f4f4}
.caveat{background:#fff8e1;border-left:4px solid #e0a800;padding:.4em .8em;max-width:70em}
dl.glossary dt{font-weight:bold;margin-top:.3em}dl.glossary dd{margin-left:1.5em}
.decision{font-size:.75em;border:1px solid;border-radius:3px;padding:0 .3em;margin-left:.4em}
.decision-kept{color:#666}.decision-guide{color:#1a4d8f}.decision-model{color:#7a2e8f}
"""
SCRIPT = """
function pick(label){document.querySelectorAll('section.system').forEach(
  s=>{s.hidden=label!=='*'&&s.dataset.system!==label})}
"""


def highlight(text: str, spans: list[tuple[int, int, str]]) -> str:
    """Escaped text with each (start, end, css class) span wrapped in a `<span>`; earlier spans win."""
    out, at = [], 0
    for start, end, cls in sorted(spans, key=lambda s: (s[0], -s[1])):
        if start < at:
            continue
        out.append(html.escape(text[at:start]))
        out.append(f'<span class="{cls}">{html.escape(text[start:end])}</span>')
        at = end
    out.append(html.escape(text[at:]))
    return "".join(out)


def violation_spans(text: str, constraints: list[str]) -> list[tuple[int, int, str]]:
    """Red spans: the harmful mentions the tagger finds in a text."""
    return [(m.start, m.end, "bad") for m in text_violations(text, constraints)]


def change_spans(
    text: str, source_words: set[str], replacements: list[str]
) -> list[tuple[int, int, str]]:
    """Green spans: listed replacements found in the text, and words the source never used."""
    spans = []
    for replacement in replacements:
        if replacement:
            spans += [
                (m.start(), m.end(), "new")
                for m in re.finditer(re.escape(replacement), text, re.IGNORECASE)
            ]
    spans += [
        (m.start(), m.end(), "new")
        for m in _WORD_SPAN.finditer(text)
        if m.group().lower() not in source_words
    ]
    return spans


def _lines(items: list[str], tag: str, mark) -> str:
    body = "".join(f"<li>{mark(i, line)}</li>" for i, line in enumerate(items))
    return f"<{tag}>{body}</{tag}>" if items else '<p class="meta">(none)</p>'


def _side(recipe: dict, mark, caption: str) -> str:
    return (
        f"<div><h4>{html.escape(caption)}</h4><h3>{mark('title', 0, recipe.get('title', ''))}</h3>"
        f"<b>Ingredients</b>{_lines(recipe.get('ingredients') or [], 'ul', lambda i, t: mark('ingredients', i, t))}"
        f"<b>Steps</b>{_lines(recipe.get('steps') or [], 'ol', lambda i, t: mark('steps', i, t))}</div>"
    )


def candidates_html(step: dict) -> str:
    """One source step's candidates with their rule scores, behind a toggle; the chosen one marked."""
    candidates = step.get("candidates") or []
    chosen = step.get("chosen")
    rules = [
        r
        for r in dict.fromkeys(k for c in candidates for k in (c.get("scores") or {}))
        if r != "total"
    ]
    head = "".join(f"<th>{html.escape(str(r))}</th>" for r in [*rules, "total"])
    rows = []
    for i, cand in enumerate(candidates):
        scores = cand.get("scores") or {}
        cells = "".join(f"<td>{_number(scores.get(r))}</td>" for r in [*rules, "total"])
        mark = "✓ " if i == chosen else ""
        rows.append(
            f'<tr class="{"chosen" if i == chosen else ""}"><td>{mark}{html.escape(str(cand.get("text", "")))}'
            f"</td>{cells}</tr>"
        )
    # Retrieval and End-to-End steps answer the whole source, not one of its steps.
    source = step.get("source_step")
    where = f"Source step {int(source) + 1}" if isinstance(source, int) else "Whole recipe"
    summary = f"{where}: {len(candidates)} candidate(s)"
    return (
        f'<details><summary>{html.escape(summary)}</summary><table class="cands"><tr><th>candidate</th>'
        f"{head}</tr>{''.join(rows)}</table></details>"
    )


def _number(value) -> str:
    return (
        f"{value:.2f}"
        if isinstance(value, (int, float))
        else html.escape(str(value if value is not None else ""))
    )


def step_decisions(record: dict) -> list[str | None]:
    """How each rewritten step was decided (kept, guide, model), from the record's step entries;
    None where an entry records none (runs from before decisions) or steps and entries differ."""
    steps = (record.get("rewrite") or {}).get("steps") or []
    entries = record.get("steps") or []
    if len(entries) != len(steps):
        return [None] * len(steps)
    return [
        e.get("decision")
        if isinstance(e, dict) and e.get("decision") in DECISION_MEANINGS
        else None
        for e in entries
    ]


def decision_label(decision: str) -> str:
    """The small label beside a rewritten step: its decision, the meaning on hover."""
    return (
        f'<span class="decision decision-{html.escape(decision)}" '
        f'title="{html.escape(DECISION_MEANINGS[decision], quote=True)}">{html.escape(decision)}</span>'
    )


def recipe_html(record: dict) -> str:
    """One rewrite: source (violations red) beside rewrite (changes green, leftovers red), candidates."""
    constraints = parse_constraints(record.get("constraint") or "all")
    source, rewrite = record.get("source") or {}, record.get("rewrite") or {}
    source_words = {
        w
        for line in [
            source.get("title", ""),
            *(source.get("ingredients") or []),
            *(source.get("steps") or []),
        ]
        for w in words(line)
    }
    replaced: dict[str, list[str]] = {}
    for sub in record.get("substitutions") or []:
        replaced.setdefault(sub.get("field", ""), []).append(str(sub.get("replacement", "")))

    def source_mark(field, index, text):
        """A source line with its violations in red."""
        return highlight(text, violation_spans(text, constraints))

    held = held_words(record)
    source_lines = {
        "title": {str(source.get("title", "")).strip()},
        "ingredients": {str(x).strip() for x in source.get("ingredients") or []},
        "steps": {str(x).strip() for x in source.get("steps") or []},
    }
    decisions = step_decisions(record)

    def rewrite_mark(field, index, text):
        """A rewritten line with leftover violations in red, invented foods (steps) in orange, its
        changes in green (none when the line is a source line as it was) and, for a step, how it
        was decided."""
        invented = (
            [(m.start, m.end, "invented") for m in unlisted_foods(text, held)]
            if field == "steps"
            else []
        )
        unchanged = str(text).strip() in source_lines.get(field, set())
        changes = [] if unchanged else change_spans(text, source_words, replaced.get(field, []))
        marked = highlight(text, violation_spans(text, constraints) + invented + changes)
        if field == "steps" and decisions[index]:
            marked += decision_label(decisions[index])
        return marked

    steps = "".join(candidates_html(s) for s in record.get("steps") or [])
    notes = "".join(f"<li>{html.escape(str(n))}</li>" for n in record.get("notes") or [])
    return (
        f'<div class="recipe"><p class="meta">{html.escape(str(record.get("id", "")))} · '
        f'{html.escape(str(record.get("constraint", "")))}</p><div class="pair">'
        f"{_side(source, source_mark, 'Source')}{_side(rewrite, rewrite_mark, 'Rewrite')}</div>"
        f"{'<b>Candidates</b>' + steps if steps else ''}"
        f"{'<ul class=meta>' + notes + '</ul>' if notes else ''}</div>"
    )


# Hegel et al. 2020, Table 2 (test set, 1000 recipes): perplexity, adherence %, ROUGE-L recall, diversity.
PAPER_RESULTS = {
    "Rule-Based": (10.24, 96.1, 98.76, 0.550),
    "Retrieval": (9.01, 93.4, 28.40, 0.344),
    "End-to-End": (9.51, 97.0, 25.60, 0.488),
    "No-Context": (10.79, 99.9, 31.81, 0.615),
    "Contextual": (11.61, 99.6, 31.16, 0.634),
    "+ Rule ingredient prompt": (12.54, 99.5, 34.06, 0.674),
    "Human rewrite (30 vegetarian)": (13.91, 99.7, 77.08, 0.906),
}
PAPER_RECIPES = {"Human rewrite (30 vegetarian)": 30}  # every other row: 1000
METRIC_COLUMNS = tuple((k, heading(k), MEASURES[k].digits) for k in PAPER_MEASURES)
# Beyond the paper (rrt.evaluation.grounding): % of chosen steps, then % of recipes.
GROUNDING_COLUMNS = tuple((k, heading(k), MEASURES[k].digits) for k in GROUNDING_MEASURES)
# The tables' column groups: the paper's measures and form rules, staying the recipe and how each
# step was decided, then the readers' marks (only with a study).
FIRST_TABLE = (*PAPER_MEASURES, "form_rules")
SECOND_TABLE = (*GROUNDING_MEASURES, *DECISION_MEASURES)
BLANK_WHEN_MISSING = frozenset((*DECISION_MEASURES, *READER_MEASURES))  # "does not apply"


def _cell(value, digits: int) -> str:
    return f"{value:.{digits}f}" if isinstance(value, (int, float)) else "—"


def cell_text(key: str, value) -> str:
    """A column's value as the tables print it: its digits; blank or "—" when there is none."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:.{MEASURES[key].digits}f}"
    return "" if key in BLANK_WHEN_MISSING else "—"


def best_labels(rows: dict[str, dict], key: str) -> set[str]:
    """The rows holding a column's best value by its direction, compared as printed (ties all
    win); none for a column without a direction or with fewer than two values."""
    direction = MEASURES[key].direction
    values = {
        label: round(float(row[key]), MEASURES[key].digits)
        for label, row in rows.items()
        if isinstance(row.get(key), (int, float)) and not isinstance(row.get(key), bool)
    }
    if not direction or len(values) < 2:
        return set()
    best = max(values.values()) if direction == "↑" else min(values.values())
    return {label for label, value in values.items() if value == best}


def system_rows(metrics: dict) -> dict[str, dict]:
    """Each system's automatic measures with its readers' measures (metrics["readers"]) merged in."""
    readers = metrics.get("readers") or {}
    return {
        label: {**m, **(readers.get(label) or {})}
        for label, m in (metrics.get("systems") or {}).items()
    }


def table_keys(metrics: dict, keys: tuple[str, ...]) -> tuple[str, ...]:
    """The columns shown: decision columns only when a system records decisions, reader columns only
    with a study."""
    rows = system_rows(metrics).values()
    decided = any(isinstance(r.get(k), (int, float)) for r in rows for k in DECISION_MEASURES)
    return tuple(
        k
        for k in keys
        if (k not in DECISION_MEASURES or decided)
        and (k not in READER_MEASURES or "readers" in metrics)
    )


# ---- reader-judged measures (a study's report.json, `rrt judge report`) ---------------------


def _dig(data, *keys):
    for key in keys:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def _share(value) -> float | None:
    return (
        100.0 * value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    )


def reader_measures(study: dict) -> dict[str, dict]:
    """Per system of a study's report.json: overall quality mean, % of steps marked OK, % judged
    cookable, % of decided head-to-head comparisons won; None for whatever the report lacks."""
    if not isinstance(study, dict):
        return {}
    best = study.get("best")
    h2h = study.get("head_to_head") if isinstance(study.get("head_to_head"), dict) else {}
    marks = (
        _dig(study, "step_marks", "tables", "by_system")
        or _dig(study, "step_marks", "by_system")
        or {}
    )
    labels = [
        *(study["systems"] if isinstance(study.get("systems"), list) else []),
        *(study["table"] if isinstance(study.get("table"), dict) else {}),
        *(marks if isinstance(marks, dict) else {}),
    ]

    def counts(row) -> tuple[int, int, int]:
        wins, ties, losses = (_dig(row, k) for k in ("wins", "ties", "losses"))
        ok = all(isinstance(x, int) for x in (wins, ties, losses))
        return (wins, ties, losses) if ok else (0, 0, 0)

    def won(label) -> float | None:
        if label == best:
            rows = [counts(r) for r in h2h.values()]
            decided = sum(sum(r) for r in rows)
            return 100.0 * sum(r[0] for r in rows) / decided if decided else None
        wins, ties, losses = counts(h2h.get(label))
        decided = wins + ties + losses
        return 100.0 * losses / decided if decided else None

    out = {}
    for label in dict.fromkeys(str(x) for x in labels):
        overall = _dig(study, "table", label, "overall", "mean")
        out[label] = {
            "overall": overall if isinstance(overall, (int, float)) else None,
            "steps_ok": _share(_dig(marks, label, "shares", "ok")),
            "cookable": _share(_dig(marks, label, "cookable")),
            "head_to_head": won(label),
        }
    return out


# ---- table.md -----------------------------------------------------------------------------


def glossary_markdown(labels: list[str], keys: tuple[str, ...]) -> str:
    """What each system of the run and each column shown is, and the caveat, as Markdown."""
    lines = ["## What the rows are", ""]
    lines += [f"- **{label}**: {describe_system(label)}" for label in labels]
    lines += ["", "## What the columns mean (↑ higher is better, ↓ lower is better)", ""]
    lines += [f"- **{heading(k)}**: {MEASURES[k].meaning}" for k in keys]
    lines += ["", f"Caveat: {CAVEAT}", ""]
    return "\n".join(lines)


def _markdown_table(rows: dict[str, dict], keys: tuple[str, ...], recipes: bool) -> list[str]:
    best = {k: best_labels(rows, k) for k in keys}
    head = (
        "| system | " + " | ".join(heading(k) for k in keys) + (" | recipes |" if recipes else " |")
    )
    out = [head, "|" + " --- |" * (len(keys) + 1 + recipes)]
    for label, row in rows.items():
        cells = [
            f"**{cell_text(k, row.get(k))}**" if label in best[k] else cell_text(k, row.get(k))
            for k in keys
        ]
        out.append(
            f"| {label} | "
            + " | ".join(cells)
            + (f" | {row.get('n_recipes', 0)} |" if recipes else " |")
        )
    return out


def tables_markdown(metrics: dict) -> str:
    """Our systems' tables (best of each column in bold): the paper's measures and form rules, then
    staying the user's recipe and step decisions, then readers' marks when a study was given."""
    rows = system_rows(metrics)
    lines = ["## Our systems (best of each column in bold)", ""]
    lines += _markdown_table(rows, table_keys(metrics, FIRST_TABLE), recipes=True)
    lines += ["", "## Staying the user's recipe (beyond the paper)", ""]
    lines += _markdown_table(rows, table_keys(metrics, SECOND_TABLE), recipes=False)
    if "readers" in metrics:
        lines += ["", f"## Readers' marks (study {metrics.get('study') or ''})".rstrip(), ""]
        lines += _markdown_table(rows, READER_MEASURES, recipes=False)
    return "\n".join(lines) + "\n"


def paper_markdown() -> str:
    """The paper's Table 2 rows, each with the system that rebuilds it here."""
    head = (
        "| paper row (our system) | "
        + " | ".join(heading(k) for k in PAPER_MEASURES)
        + " | recipes |"
    )
    rows = [
        f"| {label} ({PAPER_ROWS[label]}) | "
        + " | ".join(_cell(v, MEASURES[k].digits) for v, k in zip(values, PAPER_MEASURES))
        + f" | {PAPER_RECIPES.get(label, 1000)} |"
        for label, values in PAPER_RESULTS.items()
    ]
    return "\n".join(
        [
            "## Paper (Hegel et al. 2020, Table 2: its own test set, for reference)",
            "",
            head,
            "|" + " --- |" * (len(PAPER_MEASURES) + 2),
            *rows,
            "",
        ]
    )


def metrics_markdown(metrics: dict) -> str:
    """table.md: what the rows and columns are, our systems' tables, then the paper's numbers."""
    keys = (
        *table_keys(metrics, FIRST_TABLE),
        *table_keys(metrics, SECOND_TABLE),
        *(READER_MEASURES if "readers" in metrics else ()),
    )
    return "\n".join(
        [
            "# Rewrite evaluation",
            "",
            glossary_markdown(list(metrics.get("systems") or {}), keys),
            tables_markdown(metrics),
            paper_markdown(),
        ]
    )


# ---- report.html --------------------------------------------------------------------------


def systems_html(labels: list[str]) -> str:
    """What each system of the run is, one line each, as HTML."""
    systems = "".join(
        f"<dt>{html.escape(label)}</dt><dd>{html.escape(describe_system(label))}</dd>"
        for label in labels
    )
    return f"<h2>What the rows are</h2><dl class='glossary'>{systems}</dl>"


def columns_html(keys: tuple[str, ...]) -> str:
    """The caveat, then what each column shown counts and which way is better, as HTML."""
    columns = "".join(
        f"<dt>{html.escape(heading(k))}</dt><dd>{html.escape(MEASURES[k].meaning)}</dd>"
        for k in keys
    )
    return (
        f"<p class='caveat'><b>Caveat.</b> {html.escape(CAVEAT)}</p>"
        f"<h2>What the columns mean</h2><p class=meta>↑ higher is better, ↓ lower is better; the "
        f"best of our systems in each column is <span class='best'>bold on yellow</span>.</p>"
        f"<dl class='glossary'>{columns}</dl>"
    )


def metrics_table_html(metrics: dict) -> str:
    """Every system's measures in one table, the best of each column marked (class "best"), then
    the paper's Table 2 rows, marked as the paper's."""
    rows = system_rows(metrics)
    keys = (
        *table_keys(metrics, FIRST_TABLE),
        *table_keys(metrics, SECOND_TABLE),
        *(READER_MEASURES if "readers" in metrics else ()),
    )
    best = {k: best_labels(rows, k) for k in keys}
    head = (
        "<tr><th>system</th>"
        + "".join(
            f"<th title='{html.escape(MEASURES[k].meaning, quote=True)}'>{html.escape(heading(k))}</th>"
            for k in keys
        )
        + "<th>recipes</th></tr>"
    )
    ours = "".join(
        f"<tr><td title='{html.escape(describe_system(label), quote=True)}'>{html.escape(label)}</td>"
        + "".join(
            f"<td{' class=best' if label in best[k] else ''}>{html.escape(cell_text(k, row.get(k)))}</td>"
            for k in keys
        )
        + f"<td>{html.escape(str(row.get('n_recipes', '')))}</td></tr>"
        for label, row in rows.items()
    )
    paper_head = (
        f"<tr class='paper-head'><th colspan='{len(keys) + 2}'>Paper: Hegel et al. 2020, Table 2 "
        "(its own test set, not ours; for reference)</th></tr>"
    )
    paper = "".join(
        f"<tr class='paper'><td>{html.escape(label)} (paper; ours: {html.escape(PAPER_ROWS[label])})</td>"
        + "".join(
            f"<td>{html.escape(_cell(dict(zip(PAPER_MEASURES, values)).get(k), MEASURES[k].digits)) if k in PAPER_MEASURES else ''}</td>"
            for k in keys
        )
        + f"<td>{PAPER_RECIPES.get(label, 1000)}</td></tr>"
        for label, values in PAPER_RESULTS.items()
    )
    return f"<table class='metrics'>{head}{ours}{paper_head}{paper}</table>"


def render_report(systems: dict[str, list[dict]], metrics: dict, shown: int) -> str:
    """The whole page: what rows and columns are, metrics beside the paper's, a system selector, then
    up to `shown` recipes per system."""
    options = "".join(
        f'<option value="{html.escape(s, quote=True)}">{html.escape(s)}</option>' for s in systems
    )
    sections = []
    for label, records in systems.items():
        body = "".join(recipe_html(r) for r in records[:shown])
        sections.append(
            f'<section class="system" data-system="{html.escape(label, quote=True)}">'
            f"<h2>{html.escape(label)}</h2><p class=meta>{html.escape(describe_system(label))}</p>"
            f"<p class=meta>{min(shown, len(records))} of {len(records)} rewrites shown</p>{body}</section>"
        )
    keys = (
        *table_keys(metrics, FIRST_TABLE),
        *table_keys(metrics, SECOND_TABLE),
        *(READER_MEASURES if "readers" in metrics else ()),
    )
    labels = list(dict.fromkeys([*(metrics.get("systems") or {}), *systems]))
    decisions = "".join(
        f"<li>{decision_label(d)} {html.escape(meaning)}</li>"
        for d, meaning in DECISION_MEANINGS.items()
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>Rewrite evaluation</title>"
        f"<style>{STYLE}</style><script>{SCRIPT}</script></head><body><h1>Rewrite evaluation</h1>"
        f"{systems_html(labels)}<h2>Measures</h2>{metrics_table_html(metrics)}{columns_html(keys)}"
        f"<h2>Rewrites</h2><p>System: <select onchange='pick(this.value)'>"
        f"<option value='*'>all</option>{options}</select> "
        f"<span class=meta><span class=bad>red</span>: breaks the constraint; "
        f"<span class=invented>orange</span>: a food the recipe does not hold; "
        f"<span class=new>green</span>: changed by the rewrite (a line as the source had it is "
        f"not painted)</span></p><p class=meta>Beside each rewritten step, how it was decided "
        f"(runs that record it):</p><ul class=meta>{decisions}</ul>{''.join(sections)}</body></html>"
    )


def per_constraint_markdown(metrics: dict) -> str:
    """per_constraint.md: adherence % per system (rows) and constraint (columns)."""
    per = metrics["per_constraint"]
    constraints = sorted({c for table in per.values() for c in table})
    lines = [
        "## Adherence % per constraint",
        "",
        "| system | " + " | ".join(constraints) + " |",
        "|" + " --- |" * (len(constraints) + 1),
    ]
    lines += [
        f"| {label} | " + " | ".join(_cell(table.get(c), 1) for c in constraints) + " |"
        for label, table in per.items()
    ]
    grounding = metrics.get("grounding_per_constraint") or {}
    for key, title, digits in GROUNDING_COLUMNS:
        lines += [
            "",
            f"## {title.rstrip(' ↑↓')} per constraint",
            "",
            "| system | " + " | ".join(constraints) + " |",
            "|" + " --- |" * (len(constraints) + 1),
        ]
        lines += [
            f"| {label} | "
            + " | ".join(_cell((table.get(c) or {}).get(key), digits) for c in constraints)
            + " |"
            for label, table in grounding.items()
        ]
    return "\n".join(lines) + "\n"


def plot_metrics(metrics: dict, path: str) -> None:
    """metrics.png: one bar chart per metric, one bar per system (a missing value is left out)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(metrics["systems"])
    figure, axes = plt.subplots(1, len(METRIC_COLUMNS), figsize=(4 * len(METRIC_COLUMNS), 4))
    for axis, (key, title, _) in zip(axes, METRIC_COLUMNS):
        values = [metrics["systems"][label].get(key) for label in labels]
        axis.bar(
            range(len(labels)),
            [v if isinstance(v, (int, float)) else 0 for v in values],
            color=[f"C{i}" for i in range(len(labels))],
        )
        axis.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize=8)
        axis.set_title(title)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
