"""The evaluation report: one self-contained HTML page, source and rewrite side by side.

Red marks what breaks the constraint (in the source, and any left in the rewrite); orange marks a
food a rewritten step names that the recipe does not hold (rrt.evaluation.grounding); green marks
what the rewrite changed: the substitutions it lists, and words the source never used. Each
step's candidates and their rule scores sit behind a `<details>` toggle, the chosen one marked.
"""

from __future__ import annotations

# matplotlib is imported where used: jobs/evaluate.py imports this module, and its --help starts
# without it.
import html
import re

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


def _side(recipe: dict, mark, heading: str) -> str:
    return (
        f"<div><h4>{html.escape(heading)}</h4><h3>{mark('title', 0, recipe.get('title', ''))}</h3>"
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

    def rewrite_mark(field, index, text):
        """A rewritten line with leftover violations in red, invented foods (steps) in orange and its
        changes in green."""
        invented = (
            [(m.start, m.end, "invented") for m in unlisted_foods(text, held)]
            if field == "steps"
            else []
        )
        return highlight(
            text,
            violation_spans(text, constraints)
            + invented
            + change_spans(text, source_words, replaced.get(field, [])),
        )

    steps = "".join(candidates_html(s) for s in record.get("steps") or [])
    notes = "".join(f"<li>{html.escape(str(n))}</li>" for n in record.get("notes") or [])
    return (
        f'<div class="recipe"><p class="meta">{html.escape(str(record.get("id", "")))} · '
        f'{html.escape(str(record.get("constraint", "")))}</p><div class="pair">'
        f"{_side(source, source_mark, 'Source')}{_side(rewrite, rewrite_mark, 'Rewrite')}</div>"
        f"{'<b>Candidates</b>' + steps if steps else ''}"
        f"{'<ul class=meta>' + notes + '</ul>' if notes else ''}</div>"
    )


def metrics_table_html(metrics: dict) -> str:
    """The per-system metrics as an HTML table: the paper's, then whether rewrites stay the recipe."""
    columns = METRIC_COLUMNS + GROUNDING_COLUMNS
    head = (
        "<tr><th>system</th>"
        + "".join(f"<th>{html.escape(title)}</th>" for _, title, _ in columns)
        + "<th>recipes</th></tr>"
    )
    rows = "".join(
        f"<tr><td>{html.escape(label)}</td>"
        + "".join(f"<td>{_number(m.get(k))}</td>" for k, _, _ in columns)
        + f"<td>{m.get('n_recipes', '')}</td></tr>"
        for label, m in metrics.get("systems", {}).items()
    )
    return f"<table>{head}{rows}</table>"


def render_report(systems: dict[str, list[dict]], metrics: dict, shown: int) -> str:
    """The whole page: metrics, a system selector, then up to `shown` recipes per system."""
    options = "".join(
        f'<option value="{html.escape(s, quote=True)}">{html.escape(s)}</option>' for s in systems
    )
    sections = []
    for label, records in systems.items():
        body = "".join(recipe_html(r) for r in records[:shown])
        sections.append(
            f'<section class="system" data-system="{html.escape(label, quote=True)}">'
            f"<h2>{html.escape(label)}</h2><p class=meta>{min(shown, len(records))} of {len(records)} "
            f"rewrites shown</p>{body}</section>"
        )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>Rewrite evaluation</title>"
        f"<style>{STYLE}</style><script>{SCRIPT}</script></head><body><h1>Rewrite evaluation</h1>"
        f"{metrics_table_html(metrics)}<p>System: <select onchange='pick(this.value)'>"
        f"<option value='*'>all</option>{options}</select> "
        f"<span class=meta><span class=bad>red</span>: breaks the constraint; "
        f"<span class=invented>orange</span>: a food the recipe does not hold; "
        f"<span class=new>green</span>: changed by the rewrite</span></p>{''.join(sections)}</body></html>"
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
METRIC_COLUMNS = (
    ("perplexity", "perplexity ↓", 2),
    ("adherence", "adherence % ↑", 1),
    ("rouge_l_recall", "ROUGE-L recall ↑", 2),
    ("trigram_diversity", "trigram diversity ↑", 3),
)
# Beyond the paper (rrt.evaluation.grounding): % of chosen steps, then % of recipes.
GROUNDING_COLUMNS = (
    ("invented_food_steps", "invented-food steps % ↓", 1),
    ("same_job", "same job % ↑", 1),
    ("consistency", "consistent % ↑", 1),
    ("title_consistency", "title consistent % ↑", 1),
)


def _cell(value, digits: int) -> str:
    return f"{value:.{digits}f}" if isinstance(value, (int, float)) else "—"


def metrics_markdown(metrics: dict) -> str:
    """table.md: our systems like the paper's Table 2, then the paper's own numbers."""
    head = "| system | " + " | ".join(title for _, title, _ in METRIC_COLUMNS) + " | recipes |"
    rule = "|" + " --- |" * (len(METRIC_COLUMNS) + 2)
    rows = [
        f"| {label} | "
        + " | ".join(_cell(m.get(key), d) for key, _, d in METRIC_COLUMNS)
        + f" | {m.get('n_recipes', 0)} |"
        for label, m in metrics["systems"].items()
    ]
    paper = [
        f"| {label} | "
        + " | ".join(_cell(v, d) for v, (_, _, d) in zip(values, METRIC_COLUMNS))
        + " | 1000 |"
        for label, values in PAPER_RESULTS.items()
    ]
    grounding_head = "| system | " + " | ".join(title for _, title, _ in GROUNDING_COLUMNS) + " |"
    grounding = [
        f"| {label} | " + " | ".join(_cell(m.get(key), d) for key, _, d in GROUNDING_COLUMNS) + " |"
        for label, m in metrics["systems"].items()
    ]
    return "\n".join(
        [
            "## Our systems",
            "",
            head,
            rule,
            *rows,
            "",
            "## Staying the user's recipe (beyond the paper)",
            "",
            grounding_head,
            "|" + " --- |" * (len(GROUNDING_COLUMNS) + 1),
            *grounding,
            "",
            "## Paper (Hegel et al. 2020, Table 2, for reference)",
            "",
            head,
            rule,
            *paper,
            "",
        ]
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
