"""Step marks and "cookable" (rubric version 1, docs/JUDGING.md): the report's tables and agreement.

mark_rows(judgments)              the step marks and cookable answers of finished rating tasks
mark_tables(marks, cookable)      per system, and per system and constraint: share of steps with
                                  each mark, share of recipes judged cookable
mark_agreement(marks, cookable)   percent agreement and Krippendorff's alpha (nominal)
marks_markdown(section)           the report's Markdown for all of it
"""

from __future__ import annotations

from collections import Counter, defaultdict
from itertools import combinations

from rrt.evaluation.human import COOKABLE, COOKABLE_QUESTION, STEP_MARKS, alpha


def mark_rows(judgments: list[dict]) -> tuple[list[dict], list[dict]]:
    """(marks, cookable) from study judgment rows: one row per step a judge marked ({system, recipe,
    constraint, judge, step, mark}; a step left unmarked on the site is skipped) and one per
    cookable answer ({system, recipe, constraint, judge, value})."""
    marks, cookable = [], []
    for row in judgments:
        if row["kind"] != "rate":
            continue
        base = {k: row[k] for k in ("system", "recipe", "constraint", "judge")}
        if row["question"] == "step_marks":
            marks += [
                {**base, "step": i, "mark": m} for i, m in enumerate(row["value"]) if m is not None
            ]
        elif row["question"] == "cookable":
            cookable.append({**base, "value": row["value"]})
    return marks, cookable


def _group(marks: list[dict], cookable: list[dict], key, order) -> dict[str, dict]:
    steps, cooks = defaultdict(Counter), defaultdict(Counter)
    for row in marks:
        steps[key(row)][row["mark"]] += 1
    for row in cookable:
        cooks[key(row)][row["value"]] += 1
    out = {}
    for group in sorted(set(steps) | set(cooks), key=order):
        n, judged = sum(steps[group].values()), sum(cooks[group].values())
        out[group] = {
            "steps": n,
            "shares": {m: (steps[group][m] / n if n else None) for m in STEP_MARKS},
            "recipes": judged,
            "cookable": cooks[group]["yes"] / judged if judged else None,
        }
    return out


def mark_tables(marks: list[dict], cookable: list[dict], systems: list[str] = ()) -> dict:
    """Per system, and per system and constraint ("system / constraint"): steps marked, the share of
    them with each mark, recipes judged and the share judged cookable. Each judge's mark of each
    step counts once, as does each judge's cookable answer. Systems in the order of `systems`
    (others after, by name)."""
    rank = {s: i for i, s in enumerate(systems)}

    def order(group: str) -> tuple:
        system, _, constraint = group.partition(" / ")
        return (rank.get(system, len(rank)), system, constraint)

    return {
        "by_system": _group(marks, cookable, lambda r: r["system"], order),
        "by_constraint": _group(
            marks, cookable, lambda r: f"{r['system']} / {r['constraint']}", order
        ),
    }


def _agreement(units: dict[tuple, dict[str, str]], codes: tuple[str, ...]) -> dict:
    """Pairwise percent agreement and nominal alpha over units judged by two judges or more."""
    pairs = agreeing = 0
    shared = {u: v for u, v in units.items() if len(v) >= 2}
    for values in shared.values():
        for a, b in combinations(values.values(), 2):
            pairs += 1
            agreeing += a == b
    index = {c: i for i, c in enumerate(codes)}
    numeric = {u: {j: index[v] for j, v in values.items()} for u, values in shared.items()}
    return {
        "units": len(shared),
        "pairs": pairs,
        "percent": 100 * agreeing / pairs if pairs else None,
        "alpha": alpha(numeric, "nominal") if shared else None,
    }


def mark_agreement(marks: list[dict], cookable: list[dict]) -> dict:
    """Agreement between judges on the step marks (a unit: one step of one system's rewrite of one
    item) and on cookable (a unit: one rewrite): the share of judge pairs giving the same answer,
    and Krippendorff's alpha, nominal."""
    steps: dict[tuple, dict] = defaultdict(dict)
    for row in marks:
        steps[(row["system"], row["recipe"], row["constraint"], row["step"])][row["judge"]] = row[
            "mark"
        ]
    cooks: dict[tuple, dict] = defaultdict(dict)
    for row in cookable:
        cooks[(row["system"], row["recipe"], row["constraint"])][row["judge"]] = row["value"]
    return {
        "step_marks": _agreement(steps, tuple(STEP_MARKS)),
        "cookable": _agreement(cooks, COOKABLE),
    }


def _share(value) -> str:
    return "—" if value is None else f"{value:.2f}"


def _table(title: str, first: str, rows: dict[str, dict]) -> list[str]:
    lines = [
        "",
        title,
        "",
        f"| {first} | steps marked | " + " | ".join(STEP_MARKS) + " | recipes judged | cookable |",
        "|" + " --- |" * (len(STEP_MARKS) + 4),
    ]
    for group, r in rows.items():
        shares = " | ".join(_share(r["shares"][m]) for m in STEP_MARKS)
        lines.append(
            f"| {group} | {r['steps']} | {shares} | {r['recipes']} | {_share(r['cookable'])} |"
        )
    if not rows:
        lines.append(f"| (none yet) | 0 | {' | '.join('—' for _ in STEP_MARKS)} | 0 | — |")
    return lines


def marks_markdown(section: dict) -> str:
    """The report's step-mark part: the two tables and the agreement (section: `tables`, `agreement`,
    `rubric_version`)."""
    agreement = section["agreement"]
    lines = [
        f"## Step marks and cookable (rubric version {section['rubric_version']})",
        "",
        (
            "Share of marked steps with each mark (each judge's mark of each step counts once), and "
            f'share of rewrites judged cookable ("{COOKABLE_QUESTION}").'
        ),
    ]
    lines += _table("### By system", "system", section["tables"]["by_system"])
    lines += _table(
        "### By system and constraint", "system / constraint", section["tables"]["by_constraint"]
    )
    lines += [
        "",
        "### Agreement between judges",
        "",
        "| judgment | units judged twice or more | pairs | percent agreement | alpha (nominal) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, label in (("step_marks", "step marks"), ("cookable", "cookable")):
        a = agreement[name]
        percent = "—" if a["percent"] is None else f"{a['percent']:.1f}"
        alpha_text = "—" if a["alpha"] is None else f"{a['alpha']:.3f}"
        lines.append(f"| {label} | {a['units']} | {a['pairs']} | {percent} | {alpha_text} |")
    return "\n".join(lines) + "\n"
