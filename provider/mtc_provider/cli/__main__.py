"""`python -m mtc_provider.cli ...`: the `mtc` command, where the console script is not on PATH."""

from mtc_provider.cli.app import app

if __name__ == "__main__":
    app()
