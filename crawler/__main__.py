"""``python -m crawler`` runs the command line."""

from crawler.cli import main

main()
