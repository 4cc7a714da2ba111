"""GPU measurement scripts (run as files: python benchmarks/NAME.py); a package only so they share _common."""
