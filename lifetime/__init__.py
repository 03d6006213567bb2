"""The `lifetime` command line: the front door to every stage."""
