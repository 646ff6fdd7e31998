"""The aligned corpus: dish keys, step alignment, pairing and the training formats."""
