"""The `recorder` command line: one module per command group, each thin."""
