"""An MCP server from the official Python SDK (`mcp` on PyPI), for tests/interop/mcp_python.py.

Its tools give each kind of result livegate maps: plain text, structured content (from a typed
return), a tool error (`isError`), and `whoami`, which reports the identity livegate forwards in
`_meta` and, over HTTP, in headers.

Usage: python tests/interop/mcp_server.py stdio
       python tests/interop/mcp_server.py http PORT
"""

import json
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel

server = MCPServer("livegate-interop")


class Weather(BaseModel):
    city: str
    celsius: float


@server.tool(structured_output=False)
def shout(text: str) -> str:
    """Says the text in capitals (text content only)."""
    return text.upper()


@server.tool()
def weather(city: str) -> Weather:
    """Today's weather in a city (structured content, repeated as text)."""
    return Weather(city=city, celsius=21.5)


@server.tool()
def refuse(reason: str) -> str:
    """Always fails, saying why."""
    raise ToolError(f"refused: {reason}")


@server.tool(structured_output=False)
def whoami(ctx: Context) -> str:
    """Who the client says is calling."""
    meta = ctx.request_context.meta or {}
    if not isinstance(meta, dict):
        meta = meta.model_dump(by_alias=True)
    headers = ctx.headers or {}
    return json.dumps({
        "meta_user": meta.get("livegate/user_id"),
        "meta_session": meta.get("livegate/session_id"),
        "meta_claims": meta.get("livegate/claims"),
        "header_user": headers.get("x-livegate-user-id"),
        "header_session": headers.get("x-livegate-session-id"),
        "header_claims": headers.get("x-livegate-claims"),
    })


def main():
    if sys.argv[1:] == ["stdio"]:
        server.run("stdio")
    elif len(sys.argv) == 3 and sys.argv[1] == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
