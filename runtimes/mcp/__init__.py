"""MCP tools: an agent uses the tools of remote MCP servers (streamable HTTP).

``mcp_extension(servers, connector=, secrets=)`` makes an extension of the configured
servers; each conversation keeps the servers' tool lists in its ``tool_sources``
document (``core/harness/tool_sources.py``), and each tool's replay policy comes from the
server's annotations unless the operator overrides it. The connector is
:class:`runtimes.mcp.sdk.SdkConnector` (the ``mcp`` SDK) where the SDK imports.
"""

from runtimes.mcp.config import (
    SEPARATOR,
    McpProblem,
    McpServer,
    SecretLookup,
    model_name,
    replay_from_annotations,
    servers_from_json,
)
from runtimes.mcp.source import (
    CallOutcome,
    McpArguments,
    McpConnector,
    McpToolSource,
    mcp_extension,
)

__all__ = [
    "SEPARATOR",
    "CallOutcome",
    "McpArguments",
    "McpConnector",
    "McpProblem",
    "McpServer",
    "McpToolSource",
    "SecretLookup",
    "mcp_extension",
    "model_name",
    "replay_from_annotations",
    "servers_from_json",
]
