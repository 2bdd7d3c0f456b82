"""One module per ``flowplanner`` subcommand, each exposing ``add_to(subparsers)``."""
