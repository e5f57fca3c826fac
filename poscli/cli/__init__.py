"""The command line: thin Typer commands over the library (poscli.cli.app)."""
