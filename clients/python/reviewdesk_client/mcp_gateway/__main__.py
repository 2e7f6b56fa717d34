import sys

from reviewdesk_client.mcp_gateway.cli import main

sys.exit(main())
