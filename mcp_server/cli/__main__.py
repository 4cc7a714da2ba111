"""`python -m mcp_server.cli`: the same as `ptt`."""

import sys

from mcp_server.cli import main

sys.exit(main())
