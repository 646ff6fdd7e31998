"""The `rrt` command: the library's tools and the service, from one entry point."""
