"""Build rrt/data/foods.txt: the food names a rewritten step is checked against.

    apt-get install wordnet-base     # WordNet 3.0's database files (/usr/share/wordnet)
    python data/foods/prepare.py     # writes rrt/data/foods.txt (committed; run again only to change it)

A name is a noun of WordNet's food file (noun.food) whose most common sense is a food or a
plant, that is not more often a verb ("roast", "puff"), that is not a word for a part of any
dish ("batter", "filling", "sauce": generic.txt beside this file), and whose every word the
ingredient matcher keeps ("bay leaf" would read as "bay"), plus every term of the
tagger's lexicon (rrt.recipes.lexicon) and the cooking words of extra.txt, which WordNet lacks
("seitan", "tempeh"). WordNet 3.0 is Princeton University's, under the WordNet License (a
BSD-style licence that allows this use, kept in the output's header).
"""
from __future__ import annotations

import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from rrt.recipes.ingredients import STOP_WORDS, content_words
from rrt.recipes.lexicon import CATEGORIES

HERE = os.path.dirname(os.path.abspath(__file__))
FOOD_FILE, PLANT_FILE = 13, 20     # WordNet lexicographer files noun.food and noun.plant
_NAME = re.compile(r"^[a-z][a-z -]*[a-z]$")   # no possessives: the matcher reads "cow's" as "cow'"
HEADER = """# Food names for the check that a rewritten step names only foods its recipe holds.
# Made by data/foods/prepare.py from WordNet 3.0 (noun.food), the tagger's lexicon and
# data/foods/extra.txt; edit those and run it again rather than this file.
# WordNet 3.0 Copyright 2006 by Princeton University. All rights reserved. THIS SOFTWARE AND
# DATABASE IS PROVIDED "AS IS" AND PRINCETON UNIVERSITY MAKES NO REPRESENTATIONS OR WARRANTIES,
# EXPRESS OR IMPLIED. Permission to use, copy, modify and distribute this database for any
# purpose and without fee or royalty is granted, provided that this notice appears on all copies.
"""


def read_list(name: str) -> set[str]:
    """The names of a list beside this file (one a line, # comments)."""
    with open(os.path.join(HERE, name), encoding="utf-8") as handle:
        return {line.split("#", 1)[0].strip().lower() for line in handle if line.split("#", 1)[0].strip()}


def synsets(wordnet: str) -> dict[str, tuple[int, list[str]]]:
    """offset -> (lexicographer file, lemmas) of WordNet's nouns."""
    out = {}
    with open(os.path.join(wordnet, "data.noun"), encoding="latin-1") as handle:
        for line in handle:
            if line.startswith("  "):
                continue
            fields = line.split(" | ")[0].split()
            count = int(fields[3], 16)
            out[fields[0]] = (int(fields[1]), [fields[4 + 2 * i].lower().split("(")[0] for i in range(count)])
    return out


def index(wordnet: str, part: str) -> dict[str, tuple[int, list[str]]]:
    """lemma -> (senses tagged in the semantic concordance, synset offsets by frequency)."""
    out = {}
    with open(os.path.join(wordnet, f"index.{part}"), encoding="latin-1") as handle:
        for line in handle:
            if line.startswith("  "):
                continue
            fields = line.split()
            pointers = int(fields[3])
            tagged = int(fields[5 + pointers])
            out[fields[0]] = (tagged, fields[6 + pointers:])
    return out


def wordnet_foods(wordnet: str, generic: set[str]) -> set[str]:
    """noun.food lemmas whose first sense is a food or a plant and that are not more often verbs."""
    nouns, verbs, by_offset = index(wordnet, "noun"), index(wordnet, "verb"), synsets(wordnet)
    names = set()
    for lexfile, lemmas in by_offset.values():
        if lexfile != FOOD_FILE:
            continue
        for lemma in lemmas:
            tagged, senses = nouns.get(lemma, (0, []))
            if not senses or by_offset[senses[0]][0] not in (FOOD_FILE, PLANT_FILE):
                continue
            if verbs.get(lemma, (0, []))[0] > tagged:
                continue
            name = lemma.replace("_", " ")
            if _NAME.match(name) and len(name.split()) <= 3 and name not in generic:
                names.add(name)
    return names


def lexicon_terms() -> set[str]:
    """Every food term the tagger knows."""
    return {t.lower() for c in CATEGORIES.values() for t in c.terms if _NAME.match(t.lower())}


def whole(name: str) -> bool:
    """Whether the matcher keeps every word of a name: "bay leaf" reads as "bay" (a leaf is a unit) and
    "pound cake" as "cake", which would name another food."""
    return len(content_words(name)) == sum(1 for word in name.split() if word not in STOP_WORDS)


def main(argv: list[str] | None = None) -> int:
    """Write the food list."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wordnet", default="/usr/share/wordnet", help="WordNet 3.0 database folder")
    parser.add_argument("--output", default=os.path.join(ROOT, "rrt", "data", "foods.txt"))
    args = parser.parse_args(argv)
    if not os.path.isfile(os.path.join(args.wordnet, "data.noun")):
        print(f"prepare: no WordNet database in {args.wordnet} (apt-get install wordnet-base)", file=sys.stderr)
        return 2
    generic = read_list("generic.txt")
    names = {name for name in (wordnet_foods(args.wordnet, generic) | lexicon_terms() | read_list("extra.txt"))
             if name not in generic and whole(name)}
    with open(args.output, "w", encoding="utf-8") as handle:
        handle.write(HEADER + "".join(f"{name}\n" for name in sorted(names)))
    print(f"prepare: {len(names)} food names -> {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
