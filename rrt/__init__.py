"""rrt: rewrite whole recipes so they obey a dietary constraint (Hegel et al., EMNLP 2020, on Ray)."""

__version__ = "0.1.0"
