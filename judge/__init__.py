"""The human study: its SQLite store, the judging site and the report files (`rrt judge`)."""
