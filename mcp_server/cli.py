"""`ptt` command line (filled in by the core)."""


def main() -> int:
    raise SystemExit("ptt: not built yet")
