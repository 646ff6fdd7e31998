"""`rrt`: command-line tools over recipe corpora.

rrt convert corpus.csv --rejects rejects.jsonl > recipes.jsonl
rrt tag --constraint vegan,nut-free recipes.jsonl
rrt substitute --constraint vegan recipes.jsonl | rrt tag --constraint vegan
rrt ingredients recipes.jsonl
rrt survey --constraint all data/sample/recipes.jsonl
rrt align source.jsonl target.jsonl [--table out/demo/prepared/translation_table.npz]
rrt serve --model out/demo/grounded_rule/model [--port 8000]
rrt show out/demo/rewrites/grounded_rule_constrained --recipes 3
rrt judge create --study out/demo/study --rewrites out/demo/rewrites/grounded_rule,out/demo/rewrites/rule_based
rrt judge serve --study out/demo/study     (then: rrt judge report --study out/demo/study)
rrt judge packet --study out/demo/study --output out/demo/packets   (offline: rrt judge import --answers F)

Exit status of the commands that read recipes: 0 when at least one recipe was kept, 1 when none
was (every input missing, unreadable or rejected), 2 for a bad argument.
"""

from __future__ import annotations

# Imported where a command uses them, so `rrt --help` and `rrt tag` start in a tenth of a second:
# rrt.config, alignment and pairing (pydantic, numpy), pyarrow and runtime.parquet, the judge
# modules (a tenth more; fastapi and uvicorn for the site) and the service (serve.app, ray).
import argparse
import json
import os
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from tqdm import tqdm

from rrt import __version__
from rrt.corpus.bow import build_bags, recipe_words, write_bags
from rrt.evaluation.side_by_side import read_rewrites, side_by_side
from rrt.recipes.clean import visible_controls
from rrt.recipes.ingredients import recipe_ingredients
from rrt.recipes.lexicon import CONSTRAINTS
from rrt.recipes.loaders import (
    FORMATS,
    INPUT_REASONS,
    RECIPE_INPUTS,
    InputError,
    LoadReport,
    expand_inputs,
    read_recipes,
)
from rrt.recipes.loaders.source import STDIN
from rrt.recipes.recipe import Recipe, Reject
from rrt.recipes.substitutions import substitute_recipe
from rrt.recipes.survey import format_survey, survey
from rrt.recipes.tagger import parse_constraints, tag_recipe

if TYPE_CHECKING:
    from rrt.config import JudgeSettings

INPUTS_HELP = (
    "inputs: files, globs or folders (paper text, JSON, JSONL, CSV; .gz too); '-' reads standard "
    "input, and so does giving none while input is piped in"
)
STDIN_NOTE = (
    "Every command that reads recipes also reads what `rrt convert` and `rrt substitute` write, "
    "so they pipe into each other: rrt substitute --constraint vegan r.jsonl | rrt tag --constraint vegan. "
    "A missing input is one warning and is skipped, an unreadable one a counted reject, and the "
    "others are read; "
    "a recipe id read before is a duplicate_id reject (the first is kept). Exit status: 0 when a "
    "recipe was kept, 1 when none was, 2 for a bad argument."
)
# Rejects after which the reader may have named no recipe input at all.
NOT_RECIPES = ("not_a_recipe", "unreadable_file")
# JSON may hold DEL and the C1 controls raw; escaped, a line means the same and a terminal shows it.
_JSON_CONTROLS = {code: f"\\u{code:04x}" for code in range(0x7F, 0xA0)}


class CliError(Exception):
    """An error to print as one line, then exit 2."""


def input_specs(files: list[str]) -> list[str]:
    """The inputs named on the command line; none means standard input, when it is not a terminal."""
    if files:
        return files
    if sys.stdin is None or sys.stdin.isatty():
        raise CliError("no input: name FILE(s), or pipe recipes in (FILE '-' is standard input)")
    return [STDIN]


def _recipes(args: argparse.Namespace, report: LoadReport) -> Iterator[Recipe]:
    paths = expand_inputs(input_specs(args.files))
    recipes = read_recipes(paths, report, fmt=args.format)
    return tqdm(
        recipes, desc="recipes", unit=" recipes", disable=not sys.stderr.isatty(), file=sys.stderr
    )


def _open_rejects(args: argparse.Namespace, report: LoadReport):
    if not args.rejects:
        report.on_reject = _warn_file_level
        return None
    handle = open(args.rejects, "w", encoding="utf-8")

    def sink(item: Reject) -> None:
        handle.write(json.dumps(item.to_dict(), ensure_ascii=False) + "\n")
        _warn_file_level(item)

    report.on_reject = sink
    return handle


def _say(text: str, file=None) -> None:
    """Print text that came from a file; on a terminal its control characters are shown, not obeyed."""
    file = file or sys.stdout
    print(visible_controls(text) if file.isatty() else text, file=file)


def _warn_file_level(item: Reject) -> None:
    if item.reason in INPUT_REASONS:
        _say(f"rrt: warning: {item.detail}", sys.stderr)


def _warn_duplicates(report: LoadReport) -> None:
    """One line for every recipe id read twice, with the first such record."""
    count, first = report.rejected["duplicate_id"], report.first.get("duplicate_id")
    if count and first is not None:
        _say(
            f"rrt: warning: {count} {'recipes repeat' if count > 1 else 'recipe repeats'} an id read before "
            f"(the first is kept, each later one is a duplicate_id reject), first {first.record_id!r} "
            f"at {first.location}",
            sys.stderr,
        )


def _emit(row: dict) -> None:
    line = json.dumps(row, ensure_ascii=False)
    if not line.isascii():
        line = line.translate(_JSON_CONTROLS)
    sys.stdout.write(line + "\n")


def _constraints(args: argparse.Namespace) -> list[str]:
    try:
        return parse_constraints(args.constraint)
    except ValueError as err:
        raise CliError(str(err)) from None


def cmd_convert(args: argparse.Namespace, recipes: Iterator[Recipe]) -> None:
    """Normalised recipes as JSONL."""
    for recipe in recipes:
        _emit(recipe.to_dict())


def cmd_tag(args: argparse.Namespace, recipes: Iterator[Recipe]) -> None:
    """Validity and violations per constraint."""
    constraints = _constraints(args)
    for recipe in recipes:
        _emit(tag_recipe(recipe, constraints).to_dict())


def cmd_substitute(args: argparse.Namespace, recipes: Iterator[Recipe]) -> None:
    """Recipes rewritten by the substitution guide."""
    constraints = _constraints(args)
    for recipe in recipes:
        result = substitute_recipe(recipe, constraints)
        out = result.recipe
        _emit(
            {
                "id": recipe.id,
                "constraints": constraints,
                "recipe": {"title": out.title, "ingredients": out.ingredients, "steps": out.steps},
                "substitutions": [s.to_dict() for s in result.substitutions],
            }
        )


def cmd_ingredients(args: argparse.Namespace, recipes: Iterator[Recipe]) -> None:
    """Ingredient names per line and ingredients per step."""
    for recipe in recipes:
        found = recipe_ingredients(recipe.ingredients, recipe.steps)
        _emit(
            {
                "id": recipe.id,
                "ingredients": [
                    {"line": line, "name": name}
                    for line, name in zip(recipe.ingredients, found["names"])
                ],
                "steps": found["steps"],
            }
        )


def cmd_survey(args: argparse.Namespace, recipes: Iterator[Recipe]) -> None:
    """Per-constraint summary table (and survey.json in --output)."""
    constraints = _constraints(args)
    result = survey(recipes, constraints)
    print(format_survey(result))
    if args.output:
        os.makedirs(args.output, exist_ok=True)
        path = os.path.join(args.output, "survey.json")
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=2)
        print(f"wrote {path}")


def cmd_align(args: argparse.Namespace) -> None:
    """Print the step alignment table of two recipes and the links prepare_data keeps of them."""
    from rrt.corpus.alignment import (
        AlignSettings,
        TranslationTable,
        alignment_table,
        train_translation_table,
    )
    from rrt.corpus.pairing import MAX_ALIGNED_STEPS, PairSettings, kept_pair, link_scores
    from rrt.corpus.recipe_table import recipe_row

    recipes = []
    for path in (args.source, args.target):
        report = LoadReport()
        found = next(read_recipes(expand_inputs([path]), report), None)
        if found is None:
            why = report.skipped + [reject.detail for reject in report.first.values()]
            raise CliError(f"no usable recipe in {path}" + (f" ({why[0]})" if why else ""))
        recipes.append(found)
    source, target = recipes
    data, alignment, constraints, origin = _pipeline_settings(args.table)
    if args.table:
        try:
            table = TranslationTable.load(args.table)
        except (OSError, ValueError, KeyError) as err:
            raise CliError(f"cannot read translation table {args.table}: {err}") from None
    else:
        table = train_translation_table(
            [(source.steps, target.steps)], alignment.vocab_size, alignment.em_iterations
        )
    kept_at = alignment.link_threshold
    if args.threshold is not None:
        alignment = alignment.model_copy(update={"link_threshold": args.threshold})
    align = AlignSettings.from_config(alignment)
    # The pipeline's own pairing on the rows it makes of these recipes: what it keeps is shown.
    rows = [recipe_row(recipe, constraints, data) for recipe in (source, target)]
    verdict = kept_pair(*rows, constraints, table, PairSettings.from_config(data), align)
    _say(f"{source.title}  ->  {target.title}")
    _say(f"translation table: {origin}")
    if max(len(source.steps), len(target.steps)) <= MAX_ALIGNED_STEPS:
        scores, loglik = link_scores({"steps": source.steps}, {"steps": target.steps}, table, align)
        print(
            "link scores, 0-100: "
            + (
                "the link model's, about the percentage of such links that are right"
                if align.calibrated
                else "the HMM's posterior"
            )
            + f"; per-word log-likelihood of the target given the source {loglik:.3f} "
            "(prepare_data keeps a source's most likely targets)"
        )
        _say(alignment_table(source.steps, target.steps, scores))
    # Reading cleans each method as prepare_data does: the lines that are not steps stay out of the
    # alignment, and are shown so nothing of the recipe goes missing unseen.
    for side, recipe in (("s", source), ("t", target)):
        aside = recipe.metadata.get("non_steps", [])
        if aside:
            print(f"\nset aside, not steps ({'source' if side == 's' else 'target'}):")
            for line in aside:
                at = (
                    f"before {side}{line['before']}"
                    if line["before"] < len(recipe.steps)
                    else "after the last step"
                )
                _say(f"  [{line['kind']}] {at}: {line['text']}")
    if verdict.why_not:
        print(f"\nprepare_data does not pair these: {verdict.why_not}")
    else:
        print(f"\nprepare_data pairs these for: {', '.join(verdict.constraints)}")
    threshold = f"score >= {align.link_threshold:g}" + (
        f" (--threshold; prepare_data keeps >= {kept_at:g})"
        if align.link_threshold != kept_at
        else ""
    )
    fanout = f", at most {align.max_fanout} a source step" if align.max_fanout else ""
    print(f"kept links (source step -> target steps @ link score; {threshold}{fanout}):")
    for link in verdict.alignment:
        print(
            f"  s{link['source_step']} -> "
            + ", ".join(f"t{j} @ {s:.1f}" for j, s in zip(link["target_steps"], link["scores"]))
        )
    if not verdict.alignment:
        print("  none")


def _pipeline_settings(table: str | None):
    """(data, alignment, constraints, where the table comes from): the settings prepare_data ran
    with when the table lies in its output (run.json), else ray_config.yaml's."""
    from pydantic import ValidationError

    from rrt.config import AlignmentSettings, DataSettings, load_settings
    from rrt.recipes.tagger import parse_constraints
    from runtime.runs import JobError, read_manifest

    config = load_settings()
    if not table:
        return (
            config.data,
            config.alignment,
            parse_constraints(config.data.constraints),
            (
                "learned from these two recipes alone (prepare_data aligns with its corpus "
                "table: --table <its output>/translation_table.npz)"
            ),
        )
    try:
        run = read_manifest(os.path.dirname(os.path.abspath(table)))
    except JobError as err:
        raise CliError(str(err)) from None
    if not run or run.get("job") != "prepare_data":
        return (
            config.data,
            config.alignment,
            parse_constraints(config.data.constraints),
            f"{table}, with ray_config.yaml's settings (no prepare_data run.json beside it)",
        )
    try:
        done = run["settings"]
        data = DataSettings.model_validate(
            {
                **config.data.model_dump(),
                **done["pairing"],
                "dish_key": done["dish_key"],
                "seed": done["seed"],
                "split": {"train": done["train"], "dev": done["dev"]},
            }
        )
        alignment = AlignmentSettings.model_validate(done["alignment"])
        constraints = parse_constraints(",".join(done["constraints"]))
    except (KeyError, TypeError, ValueError, ValidationError) as err:
        raise CliError(
            f"the run.json beside {table} does not hold prepare_data's settings ({err})"
        ) from None
    return data, alignment, constraints, f"{table}, with the settings of its prepare_data run"


COMMANDS: dict[str, tuple[Callable, str]] = {
    "convert": (cmd_convert, "write normalised recipes as JSONL to stdout"),
    "tag": (cmd_tag, "tag recipes with the seven dietary constraints"),
    "substitute": (cmd_substitute, "rewrite recipes with the substitution guide"),
    "ingredients": (cmd_ingredients, "ingredient names per line and ingredients per step"),
    "survey": (cmd_survey, "per-constraint summary: valid, invalid, repaired by the guide"),
}


def cmd_serve(args: argparse.Namespace) -> int:
    """Run the Ray Serve app in the foreground (Ray is imported only here)."""
    if not os.path.exists(args.model):
        raise CliError(f"{args.model} does not exist; pass <train output>/model")
    if not os.path.exists(os.path.join(args.model, "config.json")):
        raise CliError(
            f"{args.model} holds no exported model (config.json); pass <train output>/model"
        )
    from serve.app import run

    run(args.model, args.port, args.host, args.config, args.verbose)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    """Print rewritten recipes, source beside rewrite."""
    try:
        records = read_rewrites(args.rewrites)
        shown = [
            side_by_side(record, args.width) for record, _ in zip(records, range(args.recipes))
        ]
    except (OSError, ValueError, KeyError) as err:
        raise CliError(f"cannot read rewrites from {args.rewrites}: {err}") from None
    if not shown:
        raise CliError(f"{args.rewrites} holds no rewritten recipe")
    _say("\n\n".join(shown))
    return 0


def cmd_bow(args: argparse.Namespace) -> int:
    """Write PPLM's bags of words, one per constraint, from a prepared corpus's recipes."""
    import pyarrow.parquet as pq

    from rrt.corpus.pairing import valid_column
    from runtime.parquet import parquet_files

    files = parquet_files(os.path.join(args.data, "recipes"))
    if not files:
        raise CliError(
            f"{args.data}/recipes holds no Parquet files: pass a jobs/prepare_data.py output folder"
        )
    constraints = list(CONSTRAINTS)
    columns = ["title", "ingredients", "steps", *(valid_column(c) for c in constraints)]

    def recipes():
        """Each recipe's words and validity, a file at a time."""
        for path in files:
            for row in pq.read_table(path, columns=columns).to_pylist():
                yield (
                    recipe_words(row["title"], row["ingredients"], row["steps"]),
                    {c: bool(row[valid_column(c)]) for c in constraints},
                )

    try:
        bags = build_bags(recipes(), constraints, args.min_count)
    except (KeyError, ValueError) as err:
        raise CliError(f"cannot read the recipes of {args.data}: {err}") from None
    write_bags(bags, args.output)
    print(f"rrt bow: {', '.join(f'{c} {len(w)}' for c, w in bags.items())} words in {args.output}")
    return 0


def _judge_settings(args: argparse.Namespace) -> JudgeSettings:
    """The judge block of the config with this command's flags over it."""
    from rrt.config import ConfigError, load_settings

    flags = {
        key: getattr(args, key, None)
        for key in (
            "study",
            "recipes",
            "judges",
            "judges_per_item",
            "majority",
            "seed",
            "host",
            "port",
            "best",
            "human_rewrites",
            "public_url",
            "tls_cert",
            "tls_key",
        )
    }
    if getattr(args, "fish_free", False):
        flags["fish_free"] = True
    try:
        return load_settings(args.config, overrides={"judge": flags}).judge
    except ConfigError as err:
        raise CliError(str(err)) from None


def cmd_judge(args: argparse.Namespace) -> int:
    """The human study: create, extend, add judges, print links, serve, report, export, and the
    offline packets (packet, import)."""
    from judge import study as studies
    from judge.store import Study, StudyError

    settings = _judge_settings(args)
    folder = settings.study
    try:
        if args.action == "create":
            folders = [f.strip() for f in args.rewrites.split(",") if f.strip()]
            if not folders:
                raise CliError("--rewrites names no folder")
            out = studies.create_study(folder, folders, settings, settings.best)
            _say(
                f"rrt judge: study in {folder}: {out['recipes']} recipes ({', '.join(f'{c} {n}' for c, n in out['per_constraint'].items())}), "
                f"systems {', '.join(out['systems'])} ({out['best']} compared with each other run), "
                f"{out['assignments']} assignments "
                f"to {out['judges']} judges, seed {out['seed']}; {folder}/create.json"
            )
            _print_links(settings, out["tokens"], out["admin_token"])
            if out["recipes"] < settings.recipes:
                print(
                    f"rrt judge: warning: asked for {settings.recipes} recipes, but the runs share only "
                    f"{out['recipes']} (recipe, constraint) items to rate",
                    file=sys.stderr,
                )
        elif args.action == "extend":
            out = studies.extend_study(folder, args.rewrites)
            missing = (
                f" ({out['missing']} of the study's recipes not in that run)"
                if out["missing"]
                else ""
            )
            _say(
                f"rrt judge: added {out['system']} on {out['items']} recipes{missing}: {out['assignments']} "
                f"new assignments"
            )
        elif args.action == "add-judges":
            names = [n.strip() for n in args.names.split(",") if n.strip()] if args.names else None
            study = Study(folder)
            if not names:
                if not args.count:
                    raise CliError("give --count N or --names a,b")
                names = studies.judge_names(args.count, len(study.judges()) + 1)
            out = study.add_judges(names, rebalance=not args.no_rebalance)
            print(
                f"rrt judge: added {', '.join(out['judges'])}; {out['moved']} unstarted tasks moved to them"
            )
            _print_links(settings, out["tokens"])
        elif args.action == "token":
            _token(Study(folder), args, settings)
        elif args.action == "serve":
            from judge.server import ServeError, run

            try:
                run(folder, settings)
            except ServeError as err:
                raise CliError(str(err)) from None
        elif args.action == "report":
            output = args.output or os.path.join(folder, "report")
            report = studies.write_report(Study(folder), output)
            with open(os.path.join(output, "report.md"), encoding="utf-8") as handle:
                _say(handle.read().removesuffix("\n"))
            print(
                f"rrt judge: report.md, report.json, report.html{', head_to_head.png' if report['head_to_head'] else ''}"
                f" in {output}"
            )
        elif args.action == "packet":
            from judge.packet import write_packets

            if args.judge and args.readers:
                raise CliError("give --judge NAME or --readers N, not both")
            output = args.output or os.path.join(folder, "packets")
            for out in write_packets(Study(folder), output, args.judge, args.readers):
                left = (
                    f" ({out['hand_rewrites_left']} hand rewrites stay on the site)"
                    if out["hand_rewrites_left"]
                    else ""
                )
                print(
                    f"rrt judge: {out['judge']}: {out['tasks']} tasks{left} in {out['folder']} "
                    "(packet.md, packet.html, tasks.csv, answers.json)"
                )
        elif args.action == "import":
            from judge.imports import import_file
            from judge.store import ImportRefused

            try:
                out = import_file(Study(folder), args.answers, args.judge, settings.max_chars)
            except ImportRefused as err:
                for row, reason in err.errors:
                    _say(f"rrt judge: {args.answers} row {row}: {reason}", sys.stderr)
                raise CliError(f"{args.answers}: {err}") from None
            print(
                f"rrt judge: {args.answers}: {out['stored']} tasks stored, {out['already']} already "
                f"stored, {out['skipped']} blank rows skipped"
            )
        elif args.action == "export":
            output = args.output or os.path.join(folder, "export")
            out = studies.export_study(Study(folder), output)
            print(
                f"rrt judge: {out['judgments']} judgments to {output}/judgments.jsonl; {out['human_rewrites']} "
                f"hand rewrites to {output}/human (jobs/evaluate.py --rewrites {output}/human,...)"
            )
    except StudyError as err:
        raise CliError(str(err)) from None
    return 0


def _print_links(
    settings: JudgeSettings, tokens: dict[str, str], admin_token: str | None = None
) -> None:
    """Each new token's link, printed once: the study keeps only their hashes."""
    scheme = "https" if settings.tls_cert else "http"
    base = (settings.public_url or f"{scheme}://{settings.host}:{settings.port}").rstrip("/")
    for name, token in tokens.items():
        print(f"  {name}: {base}/#t={token}")
    if admin_token:
        print(f"  admin: {base}/admin#t={admin_token}")
    print(
        "rrt judge: these links are shown only now; rrt judge token --judge NAME (or --admin) makes a new one"
    )


def _token(study, args: argparse.Namespace, settings: JudgeSettings) -> None:
    """A judge's or the admin's new link, or a judge's revocation."""
    if bool(args.judge) == bool(args.admin):
        raise CliError("give --judge NAME or --admin")
    if args.admin:
        if args.revoke:
            raise CliError("the admin token can be rotated, not revoked")
        _print_links(settings, {}, study.rotate_admin())
    elif args.revoke:
        study.revoke(args.judge)
        print(
            f"rrt judge: {args.judge}'s link no longer works; rrt judge token --judge {args.judge} makes a new one"
        )
    else:
        _print_links(settings, {args.judge: study.rotate(args.judge)})


def _judge_parser(subs) -> None:
    judge = subs.add_parser(
        "judge",
        help="human evaluation: a judging site, its study database and report",
        description="Run the paper's human evaluation on your systems: create a study from "
        "rewrite runs, serve it to judges, then report. Defaults: the judge block "
        "of ray_config.yaml.",
    )
    actions = judge.add_subparsers(dest="action", required=True, metavar="ACTION")

    def action(name: str, help_text: str, description: str):
        sub = actions.add_parser(name, help=help_text, description=description)
        sub.add_argument("--study", help="the study folder (default: judge.study)")
        sub.add_argument("--config", help="config file (default: ray_config.yaml)")
        sub.set_defaults(func=None)
        return sub

    create = action(
        "create",
        "create a study from rewrite runs",
        "Sample recipes every run rewrote (equal shares per constraint), plan ratings, head-to-head "
        "pairs (the best system against each other) and hand rewrites, assign them blind and balanced.",
    )
    create.add_argument(
        "--rewrites", required=True, help="comma list of jobs/rewrite.py output folders"
    )
    create.add_argument(
        "--best", help="the system compared with each other one (default: the first run)"
    )
    create.add_argument("--recipes", type=int, help="recipes rated (default: judge.recipes, 150)")
    create.add_argument("--judges", type=int, help="judges to create (default: judge.judges)")
    create.add_argument(
        "--judges-per-item",
        type=int,
        help="judges per rating and pair (default: judge.judges_per_item)",
    )
    create.add_argument(
        "--majority",
        type=int,
        help="judges who must agree on a head-to-head winner; fewer is a tie (default: judge.majority)",
    )
    create.add_argument(
        "--human-rewrites",
        type=int,
        help="recipes rewritten by hand (default: judge.human_rewrites)",
    )
    create.add_argument("--fish-free", action="store_true", help="sample fish-free recipes too")
    create.add_argument(
        "--seed", type=int, help="the seed of the sample, sides and order (default: judge.seed)"
    )
    create.add_argument(
        "--public-url", help="the links' base URL (default: http(s)://host:port of judge)"
    )
    extend = action(
        "extend",
        "add a system to a study, keeping its judgments",
        "Rate a new run's rewrites of the study's recipes and compare it with the best system.",
    )
    extend.add_argument("--rewrites", required=True, help="one jobs/rewrite.py output folder")
    add = action(
        "add-judges",
        "add judges (unstarted tasks move to them)",
        "Add judges and print their links (once).",
    )
    add.add_argument("--count", type=int, help="how many judges (named judge-NN)")
    add.add_argument("--names", help="comma list of judge names")
    add.add_argument(
        "--no-rebalance", action="store_true", help="leave every assignment where it is"
    )
    add.add_argument(
        "--public-url", help="the links' base URL (default: http(s)://host:port of judge)"
    )
    token = action(
        "token",
        "a new link for a judge or the admin, or revoke a judge's",
        "Make a new token (its link is printed once; the old one stops working), or revoke one.",
    )
    token.add_argument("--judge", help="the judge's name (judge-01, ...)")
    token.add_argument("--admin", action="store_true", help="the admin's token instead")
    token.add_argument(
        "--revoke",
        action="store_true",
        help="the judge's link stops working, and no new one is made",
    )
    token.add_argument("--public-url", help="the link's base URL (default: http(s)://host:port)")
    serve = action(
        "serve",
        "serve the judging site until Ctrl-C",
        "Serve the study's judging site (uvicorn). Off loopback it needs a certificate.",
    )
    serve.add_argument("--host", help="address to bind (default: judge.host)")
    serve.add_argument("--port", type=int, help="HTTP port (default: judge.port)")
    serve.add_argument(
        "--public-url", help="the site's base URL, for the message (default: http(s)://host:port)"
    )
    serve.add_argument("--tls-cert", help="PEM certificate: serve HTTPS (default: judge.tls_cert)")
    serve.add_argument("--tls-key", help="PEM private key of --tls-cert (default: judge.tls_key)")
    report = action(
        "report",
        "write the human tables, chart and agreement",
        "Mean ± 95% CI per question per system, head-to-head wins/ties/losses (PNG), Krippendorff's "
        "alpha, per-judge counts and times: report.md, report.json, report.html.",
    )
    report.add_argument("--output", help="folder (default: <study>/report)")
    export = action(
        "export",
        "export judgments and the hand rewrites (system human)",
        "judgments.jsonl, and human/rewrites.jsonl + run.json for jobs/evaluate.py.",
    )
    export.add_argument("--output", help="folder (default: <study>/export)")
    packet = action(
        "packet",
        "write judges' tasks as blind reading packets (offline study)",
        "Each judge's open rating and head-to-head tasks, in their own order under the study's "
        "random handles: packet.md, packet.html, tasks.csv (crowdsourcing batch layout, Answer.* "
        "columns to fill) and answers.json (a template) in <output>/<judge>/. No system name, run "
        "folder or score is shown.",
    )
    packet.add_argument("--output", help="folder (default: <study>/packets)")
    packet.add_argument("--judge", help="one judge's packet (default: every judge)")
    packet.add_argument("--readers", type=int, help="packets for the study's first N judges")
    imported = action(
        "import",
        "read a packet's answers back into the study",
        "Store answers from a filled answers.json, a filled tasks.csv or a crowdsourcing results "
        "CSV (Input.* / Answer.* columns) as if given on the site. All or nothing per file: each bad "
        "row is listed (row and reason) and nothing is stored. A file imported twice stores nothing twice.",
    )
    imported.add_argument("--answers", required=True, help="the answers file (.json or .csv)")
    imported.add_argument(
        "--judge", help="the judge who answered (default: the file's judge field or column)"
    )


class OneLineParser(argparse.ArgumentParser):
    """argparse with a bad argument as one `rrt: error:` line (and where to read more), not a usage block."""

    def error(self, message: str):
        """Print one line naming the command's --help, and exit 2 as argparse does."""
        self.exit(2, f"rrt: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with one subcommand per tool."""
    parser = OneLineParser(
        prog="rrt",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument("--version", action="version", version=f"rrt {__version__}")
    subs = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    align = subs.add_parser(
        "align",
        help="print the step alignment table of two recipes and the links prepare_data keeps",
        description="Align the steps of two recipes (any readable format; the first "
        "recipe of each file) as prepare_data does: every link's score, 0-100, whether the "
        "pipeline pairs the two and the links it keeps.",
    )
    align.add_argument("source", help="the recipe to rewrite ('-': standard input)")
    align.add_argument("target", help="the recipe that obeys the constraint ('-': standard input)")
    align.add_argument(
        "--table",
        help="translation_table.npz from prepare_data, whose run.json settings are used "
        "(default: learn a table from the pair)",
    )
    align.add_argument(
        "--threshold",
        type=float,
        help="keep links scoring at least this (default: alignment.link_threshold)",
    )
    align.set_defaults(func=None)
    served = subs.add_parser(
        "serve",
        help="serve a trained rewriter over HTTP (Ray Serve) until Ctrl-C",
        description="Start Ray Serve with the rewriter app: POST /v1/rewrite, GET / (page).",
    )
    served.add_argument(
        "--model", required=True, help="an exported model folder (<train output>/model)"
    )
    served.add_argument("--port", type=int, help="HTTP port (default: serve.port, 8000)")
    served.add_argument("--host", help="address to bind (default: serve.host, 127.0.0.1)")
    served.add_argument("--config", help="config file (default: ray_config.yaml)")
    served.add_argument(
        "--verbose",
        action="store_true",
        help="Ray's and Serve's INFO lines on the console too (their logs keep them anyway)",
    )
    served.set_defaults(func=None)
    show = subs.add_parser(
        "show",
        help="print rewritten recipes, source beside rewrite",
        description="Print the first recipes of a rewrite run (jobs/rewrite.py output), "
        "source on the left, rewrite on the right.",
    )
    show.add_argument("rewrites", help="a rewrite run folder or its rewrites.jsonl")
    show.add_argument(
        "--recipes", type=int, default=3, help="how many recipes to print (default 3)"
    )
    show.add_argument(
        "--width", type=int, help="characters per column (default: half the terminal)"
    )
    show.set_defaults(func=None)
    bow = subs.add_parser(
        "bow",
        help="write PPLM's bag of words per constraint from a prepared corpus",
        description="Words seen in at least --min-count recipes that fit a constraint and in "
        "none that break it, one <constraint>.txt per constraint (the paper's rule; "
        "rewrite.pplm.bow takes the folder).",
    )
    bow.add_argument(
        "--data", required=True, help="a jobs/prepare_data.py output folder (reads recipes/)"
    )
    bow.add_argument("--output", required=True, help="folder for the word lists")
    bow.add_argument(
        "--min-count", type=int, default=5, help="recipes a word must appear in (default 5)"
    )
    bow.set_defaults(func=None)
    _judge_parser(subs)
    for name, (func, help_text) in COMMANDS.items():
        description = f"{help_text[0].upper()}{help_text[1:]}. {STDIN_NOTE}"
        sub = subs.add_parser(name, help=help_text, description=description)
        sub.add_argument("files", nargs="*", metavar="FILE", help=INPUTS_HELP)
        sub.add_argument(
            "--format", choices=FORMATS, help="skip detection and read every input as this"
        )
        sub.add_argument(
            "--rejects",
            metavar="PATH",
            help="write every dropped record (location, reason) to this JSONL file",
        )
        if name in ("tag", "substitute", "survey"):
            default = "all" if name != "substitute" else None
            sub.add_argument(
                "--constraint",
                default=default,
                required=default is None,
                help=f"'all' or a comma list of: {', '.join(CONSTRAINTS)}",
            )
        if name == "survey":
            sub.add_argument("--output", metavar="DIR", help="also write survey.json into DIR")
        sub.set_defaults(func=func)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `rrt` console script."""
    args = build_parser().parse_args(argv)
    report = LoadReport()
    handle = None
    try:
        if getattr(args, "constraint", None):
            args.constraint = ",".join(_constraints(args))  # fail on a bad name before reading
        if args.command == "align":
            cmd_align(args)
            return 0
        if args.command == "serve":
            return cmd_serve(args)
        if args.command == "show":
            return cmd_show(args)
        if args.command == "bow":
            return cmd_bow(args)
        if args.command == "judge":
            return cmd_judge(args)
        handle = _open_rejects(args, report)
        args.func(args, _recipes(args, report))
    except (CliError, InputError) as err:
        _say(f"rrt: error: {err}", sys.stderr)
        return 2
    except OSError as err:
        if isinstance(err, BrokenPipeError):
            sys.stderr.close()  # reader went away (| head): not an error
            return 0
        _say(f"rrt: error: {err}", sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("rrt: interrupted", file=sys.stderr)
        return 130
    finally:
        if handle is not None:
            handle.close()
    _warn_duplicates(report)
    hint = "" if args.rejects or not report.rejected else " (keep them with --rejects PATH)"
    print(
        f"rrt {args.command}: {report.summary()}{hint}", file=sys.stderr
    )  # named: two may share a pipe
    if report.kept == 0 and any(report.rejected[r] for r in NOT_RECIPES):
        print(f"rrt {args.command}: no recipe found: {RECIPE_INPUTS}", file=sys.stderr)
    return 1 if report.kept == 0 and (report.rejected or report.skipped) else 0


if __name__ == "__main__":
    sys.exit(main())
