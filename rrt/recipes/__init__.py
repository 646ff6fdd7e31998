"""Recipes as records: reading, cleaning, the constraint lexicon and tagger, substitutions."""
