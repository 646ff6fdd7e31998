"""A blind reading packet per judge: `rrt judge packet` (answers come back with `rrt judge import`).

Each judge's open tasks, in the study's own order and under its random handles, as

    <output>/<judge>/packet.md     plain text (Markdown): rubric, then each task's recipes and questions
    <output>/<judge>/packet.html   the same as one static HTML page
    <output>/<judge>/tasks.csv     a crowdsourcing batch: one row per task, the text shown in its
                                   fields, the answer columns (Answer.<field>) left empty
    <output>/<judge>/answers.json  the answers template: per task handle, null where an answer goes

Only the source recipe, the rewrite(s) ("Rewrite A", "Rewrite B") and the constraint are shown:
never a system name, a run folder or a score. Hand-rewrite tasks stay on the site.
"""

from __future__ import annotations

import csv
import html
import json
import os
import re

from judge.store import Study, StudyError
from rrt.evaluation.human import (
    COMPARE_QUESTION,
    COOKABLE_QUESTION,
    MARK_EXAMPLES,
    MARK_ORDER,
    QUESTIONS,
    RATING_RANGE,
    RUBRIC_VERSION,
    STEP_MARKS,
)

KIND_NAMES = {"rate": "rating", "compare": "head to head"}
BETTER = {"A": "left", "B": "right", "same": "same"}  # the packet's answer -> the study's choice
INPUT_COLUMNS = [
    "task_number",
    "task_handle",
    "judge",
    "kind",
    "constraint",
    "rubric_version",
    "recipe_source",
    "rewrite_a",
    "rewrite_a_steps",
    "rewrite_b",
]
ANSWER_FIELDS = [*QUESTIONS, "cookable", "step_marks", "better"]


def recipe_lines(recipe: dict) -> list[str]:
    """A recipe as plain text: title, ingredient lines, numbered steps."""
    lines = [f"Title: {recipe.get('title') or '(no title)'}", "", "Ingredients:"]
    lines += [f"- {x}" for x in recipe.get("ingredients") or []] or ["(none)"]
    lines += ["", "Steps:"]
    lines += [f"{i}. {x}" for i, x in enumerate(recipe.get("steps") or [], 1)] or ["(none)"]
    return lines


def rubric_lines() -> list[str]:
    """The rubric as every packet states it (docs/JUDGING.md has the examples)."""
    low, high = RATING_RANGE
    lines = [
        f"## Rubric (version {RUBRIC_VERSION})",
        "",
        (
            f"Rating tasks show the source recipe and one rewrite (Rewrite A). Answer each question "
            f"{low} (not at all) to {high} (completely):"
        ),
        "",
    ]
    lines += [f"- {key} ({label}): {text}" for key, (label, text) in QUESTIONS.items()]
    lines += [
        f"- cookable: {COOKABLE_QUESTION} (yes or no)",
        "- step_marks: one mark per step of Rewrite A, in step order, each one of:",
        "",
    ]
    for mark, meaning in STEP_MARKS.items():
        lines.append(f"  - {mark}: {meaning}. For example: {'; '.join(MARK_EXAMPLES[mark])}")
    lines += [
        "",
        (
            "Mark each step of the rewrite against the source step that does the same job (steps may "
            "be merged, split or reordered). If more than one mark fits, give the first that fits in "
            f"this order: {', '.join(MARK_ORDER)}; ok only when none does."
        ),
        "",
        (
            f'Head-to-head tasks show the source and two rewrites (Rewrite A, Rewrite B): "{COMPARE_QUESTION}" '
            "Answer better: A, B or same."
        ),
    ]
    return lines


def task_lines(number: int, total: int, task: dict) -> list[str]:
    """One task as plain text: the recipes, then its exact questions."""
    lines = [
        "---",
        "",
        f"## Task {number} of {total} ({KIND_NAMES[task['kind']]})",
        "",
        f"Task handle: {task['handle']}",
        f"Constraint: {task['constraint']}",
        "",
        "### Source recipe",
        "",
        *recipe_lines(task["source"]),
    ]
    for label, rewrite in zip("AB", task["rewrites"]):
        lines += ["", f"### Rewrite {label}", "", *recipe_lines(rewrite)]
    lines += ["", "### Questions", ""]
    if task["kind"] == "rate":
        low, high = RATING_RANGE
        steps = len(task["rewrites"][0].get("steps") or [])
        lines += [
            f"{i}. {text} ({key}, {low}-{high})"
            for i, (key, (_, text)) in enumerate(QUESTIONS.items(), 1)
        ]
        lines += [
            f"{len(QUESTIONS) + 1}. {COOKABLE_QUESTION} (cookable, yes or no)",
            (
                f"{len(QUESTIONS) + 2}. Mark each of Rewrite A's {steps} steps (step_marks, in order: "
                f"{' | '.join(STEP_MARKS)})"
            ),
        ]
    else:
        lines.append(f"1. {COMPARE_QUESTION} (better: A, B or same)")
    return lines + [""]


def packet_markdown(judge: str, tasks: list[dict]) -> str:
    """packet.md: how to answer, the rubric, then every task."""
    lines = [
        f"# Recipe rewrites: reading packet for {judge}",
        "",
        f"Rubric version {RUBRIC_VERSION}. {len(tasks)} tasks, in the order to read them.",
        "",
        (
            "Each task shows a source recipe and one or two rewrites of it, each meant to fit the "
            "constraint named. Write your answers in answers.json (next to this file: one entry per "
            "task handle, replace each null) or in the Answer.* columns of tasks.csv, and send that "
            "file back."
        ),
        "",
        *rubric_lines(),
        "",
    ]
    for number, task in enumerate(tasks, 1):
        lines += task_lines(number, len(tasks), task)
    return "\n".join(lines)


def packet_html(judge: str, markdown: str) -> str:
    """packet.html: the same text as one static page (headings, lists, numbered steps)."""
    body, listing = [], None

    def close():
        nonlocal listing
        if listing:
            body.append(f"</{listing}>")
            listing = None

    for line in markdown.splitlines():
        stripped = line.strip()
        kind = (
            "ul"
            if stripped.startswith("- ")
            else "ol"
            if stripped[:1].isdigit() and ". " in stripped[:5]
            else None
        )
        if kind != listing:
            close()
            if kind:
                body.append(f"<{kind}>")
                listing = kind
        if kind == "ul":
            body.append(f"<li>{html.escape(stripped[2:])}</li>")
        elif kind == "ol":
            number, _, text = stripped.partition(". ")
            body.append(f'<li value="{html.escape(number)}">{html.escape(text)}</li>')
        elif line.startswith("#"):
            level = min(len(line) - len(line.lstrip("#")), 4)
            body.append(f"<h{level}>{html.escape(line.lstrip('#').strip())}</h{level}>")
        elif stripped == "---":
            body.append("<hr>")
        elif stripped:
            body.append(f"<p>{html.escape(stripped)}</p>")
    close()
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'><meta name='viewport' "
        f"content='width=device-width, initial-scale=1'><title>Reading packet: {html.escape(judge)}"
        "</title><style>body{font-family:Georgia,serif;margin:1.5rem;max-width:900px;"
        "color:#222;line-height:1.4}hr{margin:2rem 0}</style></head><body>"
        + "\n".join(body)
        + "</body></html>\n"
    )


def packet_rows(judge: str, tasks: list[dict]) -> list[dict]:
    """tasks.csv's rows: the text shown in the input fields, each Answer.<field> empty."""
    rows = []
    for number, task in enumerate(tasks, 1):
        rewrites = ["\n".join(recipe_lines(r)) for r in task["rewrites"]] + ["", ""]
        rows.append(
            {
                "task_number": number,
                "task_handle": task["handle"],
                "judge": judge,
                "kind": task["kind"],
                "constraint": task["constraint"],
                "rubric_version": RUBRIC_VERSION,
                "recipe_source": "\n".join(recipe_lines(task["source"])),
                "rewrite_a": rewrites[0],
                "rewrite_a_steps": len(task["rewrites"][0].get("steps") or []),
                "rewrite_b": rewrites[1],
                **{f"Answer.{f}": "" for f in ANSWER_FIELDS},
            }
        )
    return rows


def answers_template(judge: str, tasks: list[dict]) -> dict:
    """answers.json: per task handle, null where each answer goes (step_marks: one per step)."""
    answers = {}
    for number, task in enumerate(tasks, 1):
        entry = {"task": number, "kind": task["kind"]}
        if task["kind"] == "rate":
            steps = len(task["rewrites"][0].get("steps") or [])
            entry |= {
                "ratings": dict.fromkeys(QUESTIONS),
                "cookable": None,
                "step_marks": [None] * steps,
            }
        else:
            entry["better"] = None
        answers[task["handle"]] = entry
    return {
        "judge": judge,
        "rubric_version": RUBRIC_VERSION,
        "how": "ratings: whole numbers 1-5; cookable: yes or no; step_marks: one of "
        + ", ".join(STEP_MARKS)
        + " per step of Rewrite A, in order; better: A, B or same",
        "answers": answers,
    }


def write_packet(study: Study, judge: str, output: str) -> dict:
    """One judge's packet in `output`/<judge>/; what was written."""
    tasks = [t for t in study.open_tasks(judge) if t["kind"] in KIND_NAMES]
    folder = os.path.join(output, judge)
    os.makedirs(folder, exist_ok=True)
    markdown = packet_markdown(judge, tasks)
    with open(os.path.join(folder, "packet.md"), "w", encoding="utf-8") as handle:
        handle.write(markdown)
    with open(os.path.join(folder, "packet.html"), "w", encoding="utf-8") as handle:
        handle.write(packet_html(judge, markdown))
    with open(os.path.join(folder, "tasks.csv"), "w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(
            handle, fieldnames=INPUT_COLUMNS + [f"Answer.{f}" for f in ANSWER_FIELDS]
        )
        writer.writeheader()
        writer.writerows(packet_rows(judge, tasks))
    text = json.dumps(answers_template(judge, tasks), indent=2, ensure_ascii=False)
    # Each step_marks list on one line: [null, null, null], easier to fill by hand.
    text = re.sub(
        r"\[\s+((?:null|\"[^\"]*\")(?:,\s+(?:null|\"[^\"]*\"))*)\s+\]",
        lambda m: "[" + re.sub(r",\s+", ", ", m.group(1)) + "]",
        text,
    )
    with open(os.path.join(folder, "answers.json"), "w", encoding="utf-8") as handle:
        handle.write(text + "\n")
    skipped = sum(t["kind"] not in KIND_NAMES for t in study.open_tasks(judge))
    return {"judge": judge, "folder": folder, "tasks": len(tasks), "hand_rewrites_left": skipped}


def write_packets(
    study: Study, output: str, judge: str | None = None, readers: int | None = None
) -> list[dict]:
    """Packets for one judge, the study's first `readers` judges, or every judge."""
    names = [j["name"] for j in study.judges()]
    if judge is not None:
        if judge not in names:
            raise StudyError(f"the study has no judge {judge} (it has {', '.join(names)})")
        names = [judge]
    elif readers is not None:
        if not 1 <= readers <= len(names):
            raise StudyError(f"--readers must be 1 to {len(names)}, the study's judges")
        names = names[:readers]
    return [write_packet(study, name, output) for name in names]
