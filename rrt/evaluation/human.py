"""Human evaluation as the paper ran it (Hegel et al. 2020, section 6): the sample, blind balanced
assignments, and the tables computed from the judgments. No web and no database here: the judging
app (`judge/`) stores what this plans and hands the judgments back for the report.

    sample_items(records_by_system, size, constraints, seed)   150 (recipe, constraint), equal shares
    plan_tasks(items, systems, best, ...)                       rating, head-to-head and rewrite tasks
    assign(tasks, judges, seed, load)                           each task to N distinct judges, loads even
    human_table / head_to_head / agreement / judge_times        the report's figures
"""

from __future__ import annotations

# krippendorff, numpy and matplotlib are imported where used: only the report needs them, and `rrt
# judge create` and `rrt judge serve` start without them.
import math
import random
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable

# The paper's four questions, worded as its judges read them.
QUESTIONS = {
    "ingredients": (
        "Ingredient usage",
        "Does this recipe use appropriate ingredients for the type of dish it is making?",
    ),
    "closeness": (
        "Closeness to source",
        "How close is this recipe to the source while fitting the dietary constraint?",
    ),
    "constraint": ("Dietary constraint", "Does this recipe fit the specified dietary constraint?"),
    "overall": (
        "Overall quality",
        "Is this a good recipe for someone who follows this dietary constraint?",
    ),
}
COMPARE_QUESTION = "Which is better overall?"
# The rubric's one version string: packets and the report carry it (docs/JUDGING.md, "Rubric (version 1)").
RUBRIC_VERSION = "1"
# Asked with the four ratings: one mark per rewritten step, and one yes/no per recipe.
STEP_MARKS = {
    "ok": "does its source step's job, sensibly, with the recipe's own foods",
    "another_job": "does something other than its source step, or drops what the step was for",
    "no_sense": "physically absurd or incoherent",
    "unlisted_food": "names a food the rewrite's ingredient list lacks (water, salt and pepper aside)",
    "breaks_constraint": "uses or adds something the dietary constraint forbids",
}
# Where more than one mark fits, the first of these that fits; ok only when none does.
MARK_ORDER = ("breaks_constraint", "no_sense", "another_job", "unlisted_food")
# Two examples a mark, as the packets and docs/JUDGING.md give them.
MARK_EXAMPLES = {
    "ok": (
        (
            '"Warm the taco shells in the oven at 350°F for a few minutes." -> "Warm the taco shells '
            'in the oven at 350°F for 3 to 5 minutes."'
        ),
        'vegan: "Stir in the sour cream." -> "Stir in the vegan sour cream." (listed)',
    ),
    "another_job": (
        (
            '"Warm the taco shells in the oven at 350°F for a few minutes." -> "Stir in the taco '
            'seasoning and water, then bake at 350°F for 5 minutes."'
        ),
        '"Drain the pasta and toss it with the butter." -> "Boil the pasta for 10 minutes."',
    ),
    "no_sense": ('"Melt the hard taco shells in a heavy pot."', '"Whisk the flour tortillas."'),
    "unlisted_food": (
        '"Sprinkle with chopped peanuts." in a taco recipe that lists no peanuts',
        '"Stir in the coconut milk." where no coconut milk is listed',
    ),
    "breaks_constraint": (
        'vegan: "Top with grated parmesan."',
        'egg-free: "Brush the crust with beaten egg."',
    ),
}
COOKABLE_QUESTION = "Could a cook follow this and get the dish, within the constraint?"
COOKABLE = ("yes", "no")
CHOICES = ("left", "right", "same")
KINDS = ("rate", "compare", "rewrite")
TASK_NAMES = {
    "rate": "rating (four questions)",
    "compare": "head to head",
    "rewrite": "hand rewrite",
}
RATING_RANGE = (1, 5)
# Two-sided 95%: the normal quantile; a system has hundreds of ratings per question.
Z95 = 1.959963984540054


def item_key(record: dict) -> tuple[str, str]:
    """A rewrite's source recipe and constraint: what the same item means across systems."""
    return str(record["id"]), str(record.get("constraint") or "")


def sample_items(
    records_by_system: dict[str, list[dict]], size: int, constraints: list[str], seed: int
) -> list[tuple[str, str]]:
    """`size` (recipe, constraint) items every system rewrote, in equal shares per constraint; a
    constraint with too few items gives its share to the others."""
    common = None
    for records in records_by_system.values():
        keys = {item_key(r) for r in records}
        common = keys if common is None else common & keys
    pools = {c: sorted(k for k in common or () if k[1] == c) for c in constraints}
    rng = random.Random(seed)
    for pool in pools.values():
        rng.shuffle(pool)
    quota = {c: 0 for c in constraints}
    left = size
    # Round-robin one at a time: equal shares, and a short pool simply stops taking.
    while left > 0 and any(quota[c] < len(pools[c]) for c in constraints):
        for c in constraints:
            if left and quota[c] < len(pools[c]):
                quota[c] += 1
                left -= 1
    chosen = [k for c in constraints for k in pools[c][: quota[c]]]
    rng.shuffle(chosen)
    return chosen


def plan_tasks(
    items: list[tuple[str, str]],
    systems: list[str],
    best: str | None,
    judges_per_item: int,
    rewrite_items: list[tuple[str, str]],
    rewriters_per_item: int,
    seed: int,
) -> list[dict]:
    """Every task of a study: each system's rewrite of each item rated, the best system against each
    other one per item (sides drawn at random), and each rewrite item rewritten by hand."""
    rng = random.Random(seed)
    tasks = [
        {
            "kind": "rate",
            "recipe": rid,
            "constraint": c,
            "system": s,
            "other": None,
            "judges": judges_per_item,
        }
        for rid, c in items
        for s in systems
    ]
    if best is not None:
        for rid, c in items:
            for other in systems:
                if other == best:
                    continue
                left, right = (best, other) if rng.random() < 0.5 else (other, best)
                tasks.append(
                    {
                        "kind": "compare",
                        "recipe": rid,
                        "constraint": c,
                        "system": left,
                        "other": right,
                        "judges": judges_per_item,
                    }
                )
    tasks += [
        {
            "kind": "rewrite",
            "recipe": rid,
            "constraint": c,
            "system": None,
            "other": None,
            "judges": rewriters_per_item,
        }
        for rid, c in rewrite_items
    ]
    return tasks


def assign(
    tasks: list[dict],
    judges: list[str],
    seed: int,
    load: dict[str, int] | None = None,
    seen: dict[str, set] | None = None,
) -> list[tuple[int, str]]:
    """(task index, judge) pairs: each task to its `judges` distinct judges, always the least loaded
    (so loads differ by at most one), preferring judges who have not met that recipe yet."""
    rng = random.Random(seed)
    load = dict.fromkeys(judges, 0) | dict(load or {})
    seen = defaultdict(set, {j: set(s) for j, s in (seen or {}).items()})
    order = list(range(len(tasks)))
    rng.shuffle(order)
    pairs = []
    for index in order:
        task = tasks[index]
        need = task["judges"]
        if need > len(judges):
            raise ValueError(
                f"a {task['kind']} task needs {need} judges; the study has {len(judges)}"
            )
        recipe = (task["recipe"], task["constraint"])
        ranked = sorted(judges, key=lambda j: (load[j], recipe in seen[j], rng.random()))
        for judge in ranked[:need]:
            load[judge] += 1
            seen[judge].add(recipe)
            pairs.append((index, judge))
    return pairs


def judge_order(count: int, rng: random.Random) -> list[int]:
    """A random order for one judge's tasks."""
    positions = list(range(count))
    rng.shuffle(positions)
    return positions


def mean_ci(values: list[float]) -> dict:
    """Mean with its 95% confidence half-width (normal approximation; 0 for fewer than two values)."""
    n = len(values)
    if not n:
        return {"mean": None, "ci95": None, "n": 0}
    mean = statistics.fmean(values)
    half = Z95 * statistics.stdev(values) / math.sqrt(n) if n > 1 else 0.0
    return {"mean": mean, "ci95": half, "n": n}


def human_table(ratings: Iterable[dict]) -> dict[str, dict[str, dict]]:
    """Per system and question: mean ± 95% CI of the 1-5 ratings (rows {system, question, value})."""
    by: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for row in ratings:
        by[row["system"]][row["question"]].append(row["value"])
    return {system: {q: mean_ci(by[system].get(q, [])) for q in QUESTIONS} for system in sorted(by)}


def pair_outcome(
    votes: list[str], first: str, second: str, majority: int, expected: int
) -> str | None:
    """'first', 'second' or 'tie' for one compared item from its votes (system names or 'same');
    None while undecided (too few votes in and no side at the majority yet)."""
    counts = Counter(votes)
    if counts[first] >= majority:
        return "first"
    if counts[second] >= majority:
        return "second"
    return "tie" if len(votes) >= expected else None


def head_to_head(
    votes: Iterable[dict], best: str, majority: int, expected: int, others: Iterable[str] = ()
) -> dict[str, dict]:
    """Per other system: the best system's wins, ties and losses over the items compared (rows
    {recipe, constraint, other, vote}, vote a system name or 'same'); fewer than `majority` judges
    agreeing is a tie. Each of `others` has a row even before its first vote."""
    by: dict[str, dict[tuple, list]] = defaultdict(lambda: defaultdict(list))
    for other in others:
        by[other] = defaultdict(list)
    for row in votes:
        by[row["other"]][(row["recipe"], row["constraint"])].append(row["vote"])
    out = {}
    for other, items in by.items():
        counts = Counter(pair_outcome(v, best, other, majority, expected) for v in items.values())
        out[other] = {
            "wins": counts["first"],
            "ties": counts["tie"],
            "losses": counts["second"],
            "pending": counts[None],
            "items": len(items),
        }
    return out


def alpha(units: dict, level: str) -> float | None:
    """Krippendorff's alpha of {unit: {judge: value}} (the `krippendorff` package); None when no
    unit has two values or the values never vary."""
    import krippendorff
    import numpy as np

    judges = sorted({j for values in units.values() for j in values})
    keys = [u for u, values in units.items() if len(values) >= 2]
    if not keys:
        return None
    data = np.full((len(judges), len(keys)), np.nan)
    where = {j: i for i, j in enumerate(judges)}
    for column, unit in enumerate(keys):
        for judge, value in units[unit].items():
            data[where[judge], column] = value
    if len(set(data[~np.isnan(data)].tolist())) < 2:
        return None
    return float(krippendorff.alpha(reliability_data=data, level_of_measurement=level))


def agreement(ratings: Iterable[dict], votes: Iterable[dict]) -> dict:
    """Krippendorff's alpha: ordinal per rating question (units: one system's rewrite of one item)
    and nominal for the head-to-head votes (units: one compared pair of one item)."""
    per_question: dict[str, dict] = {q: defaultdict(dict) for q in QUESTIONS}
    for row in ratings:
        per_question[row["question"]][(row["system"], row["recipe"], row["constraint"])][
            row["judge"]
        ] = row["value"]
    codes: dict[str, int] = {}
    compared: dict = defaultdict(dict)
    for row in votes:
        code = codes.setdefault(
            row["vote"]
            if row["vote"] == "same"
            else ("best" if row["vote"] != row["other"] else "other"),
            len(codes),
        )
        compared[(row["other"], row["recipe"], row["constraint"])][row["judge"]] = code
    return {
        "ratings": {q: alpha(units, "ordinal") for q, units in per_question.items()},
        "head_to_head": alpha(compared, "nominal"),
    }


def judge_times(tasks: Iterable[dict]) -> dict[str, dict]:
    """Per judge: tasks assigned and done, and median / mean seconds per finished task (rows
    {judge, done, seconds})."""
    by: dict[str, dict] = defaultdict(lambda: {"assigned": 0, "done": 0, "seconds": []})
    for row in tasks:
        entry = by[row["judge"]]
        entry["assigned"] += 1
        if row["done"]:
            entry["done"] += 1
            if row.get("seconds") is not None:
                entry["seconds"].append(row["seconds"])
    return {
        judge: {
            "assigned": e["assigned"],
            "done": e["done"],
            "median_s": statistics.median(e["seconds"]) if e["seconds"] else None,
            "mean_s": statistics.fmean(e["seconds"]) if e["seconds"] else None,
        }
        for judge, e in sorted(by.items())
    }


def _cell(stat: dict) -> str:
    return "—" if stat["mean"] is None else f"{stat['mean']:.2f} ± {stat['ci95']:.2f}"


def _number(value, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def report_markdown(report: dict, sections: list[str] | None = None) -> str:
    """report.md: the human table, the head-to-head counts, agreement, any further Markdown
    `sections` (the step marks) and the judges."""
    questions = list(QUESTIONS)
    lines = [
        "## Human evaluation (mean ± 95% CI, 1-5)",
        "",
        f"Rubric version {report.get('rubric_version', RUBRIC_VERSION)}.",
        "",
        "| system | "
        + " | ".join(QUESTIONS[q][0] for q in questions)
        + " | ratings per question |",
        "|" + " --- |" * (len(questions) + 2),
    ]
    for system, row in report["table"].items():
        n = max((row[q]["n"] for q in questions), default=0)
        lines.append(f"| {system} | " + " | ".join(_cell(row[q]) for q in questions) + f" | {n} |")
    if report.get("head_to_head"):
        lines += [
            "",
            (
                f'## Head to head: {report["best"]} against each system ("{COMPARE_QUESTION}"; '
                f"fewer than {report['majority']} of {report['judges_per_item']} agreeing is a tie)"
            ),
            "",
            "| against | wins | ties | losses | undecided |",
            "| --- | --- | --- | --- | --- |",
        ]
        lines += [
            f"| {other} | {r['wins']} | {r['ties']} | {r['losses']} | {r['pending']} |"
            for other, r in report["head_to_head"].items()
        ]
    alphas = report["agreement"]
    lines += [
        "",
        "## Agreement (Krippendorff's alpha)",
        "",
        "| judgment | alpha |",
        "| --- | --- |",
    ]
    lines += [
        f"| {QUESTIONS[q][0]} (ordinal) | {_number(a)} |" for q, a in alphas["ratings"].items()
    ]
    lines += [f"| head to head (nominal) | {_number(alphas['head_to_head'])} |"]
    for section in sections or []:
        lines += ["", *section.rstrip("\n").split("\n")]
    if report.get("tasks"):
        lines += [
            "",
            "## Tasks",
            "",
            "| task | assigned | done | median s/task |",
            "| --- | --- | --- | --- |",
        ]
        lines += [
            f"| {TASK_NAMES[k]} | {r['assigned']} | {r['done']} | {_number(r['median_s'], 1)} |"
            for k, r in report["tasks"].items()
        ]
    lines += [
        "",
        "## Judges",
        "",
        "| judge | assigned | done | median s/task | mean s/task |",
        "| --- | --- | --- | --- | --- |",
    ]
    lines += [
        f"| {j} | {r['assigned']} | {r['done']} | {_number(r['median_s'], 1)} | {_number(r['mean_s'], 1)} |"
        for j, r in report["judges"].items()
    ]
    return "\n".join(lines) + "\n"


def plot_head_to_head(results: dict[str, dict], best: str, path: str) -> None:
    """head_to_head.png: one stacked bar per other system, wins / ties / losses of the best system."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    others = list(results)
    figure, axis = plt.subplots(figsize=(7, 0.6 * max(len(others), 1) + 2))
    left = [0] * len(others)
    for key, colour, label in (
        ("wins", "#2a8a3e", f"{best} wins"),
        ("ties", "#bbbbbb", "tie"),
        ("losses", "#c0392b", f"{best} loses"),
    ):
        values = [results[o][key] for o in others]
        bars = axis.barh(range(len(others)), values, left=left, color=colour, label=label)
        axis.bar_label(
            bars, labels=[str(v) if v else "" for v in values], label_type="center", fontsize=8
        )
        left = [a + b for a, b in zip(left, values)]
    axis.set_yticks(range(len(others)), [f"vs {o}" for o in others])
    axis.set_xlabel("items")
    axis.invert_yaxis()
    axis.legend(loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=3, fontsize=8, frameon=False)
    axis.set_title(f"Head to head: {best}")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
