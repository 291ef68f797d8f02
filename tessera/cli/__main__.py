"""`python -m tessera.cli` runs the `tessera` command."""

from tessera.cli import main

main()
