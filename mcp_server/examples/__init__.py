"""Example problem and kernel used by `ptt demo`."""
