"""bytewax dataflows that wire connectors to operators, and the ``flowplanner`` CLI."""
