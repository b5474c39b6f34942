"""The MCP server: ``snapshotd mcp`` serves the read, review and restore tools over stdio."""

from snapshotd.faces import face

FACE: dict[str, tuple[str, ...]] = {
    "server": ("serve_stdio",),
}
__all__, __getattr__, __dir__ = face(__name__, FACE)
