"""`python -m analyzer` runs the `hpa` command line."""

from analyzer.cli import main

main()
