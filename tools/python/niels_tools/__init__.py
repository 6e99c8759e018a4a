"""Python helpers shared by nielsd's tools (niels-convert, niels-export)."""
