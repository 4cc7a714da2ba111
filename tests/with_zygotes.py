"""``python tests/with_zygotes.py -m MODULE ARGS...``: ``python -m MODULE ARGS...`` whose runners fork their fork
servers from the test run's zygotes (tests/zygotes.py), as the test processes' runners do, instead of starting each
as a new interpreter that imports torch and triton (seconds of CPU on a 2-core machine).

For the tests that start a server (``ptt serve``) as a real process to test its transport. A test about the fork
servers a process starts by itself (their environment, their restart) runs the command as it is instead.
Without ``PTT_TEST_ZYGOTES`` in the environment the command runs exactly as ``python -m`` would run it.
"""

from __future__ import annotations

import os
import runpy
import sys

import zygotes


def main() -> None:
    if len(sys.argv) < 3 or sys.argv[1] != "-m":
        raise SystemExit("usage: python tests/with_zygotes.py -m MODULE [ARGS...]")
    module = sys.argv[2]
    sys.path[0] = os.getcwd()  # not this folder: the import path `python -m` gives the module
    zygotes.attach()
    sys.argv = [module, *sys.argv[3:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
