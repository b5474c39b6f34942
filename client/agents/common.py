"""What the agent modules that normalize a payload share: reading odd fields, deriving ids.

Owns the tolerant readers (``object_of``, ``first``, ``text``: a field of the wrong type counts
as absent), the derived tool call id (``derived``: ``<agent>-<24 hex>``, stable across a retried
hook) and the renaming of lifecycle events (``renamed``).

Promises: never raises on odd input; imports nothing at module level, and ``hashlib`` and
``json`` only when an id is derived or arguments arrive as JSON text.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

def renamed(table: Mapping[str, str], event: Any) -> Any:
    """The hook's name for a lifecycle ``event`` of ``table``; any other event keeps its own."""
    return table[event] if is_lifecycle(table, event) else event


def is_lifecycle(table: Mapping[str, str], event: Any) -> bool:
    # An event name of any other type (a list, an object) is no lifecycle event, and must not
    # reach a dict lookup, which would raise on an unhashable one.
    return isinstance(event, str) and event in table


def derived(agent: str, material: list[Any]) -> str | None:
    """``<agent>-<24 hex>`` from the session, a timestamp and the call; ``None`` when the
    material's first two parts (session and timestamp or turn) are missing."""
    if not material[0] or not material[1]:
        return None
    return f"{agent}-{digest(material)[:24]}"


def digest(material: list[Any]) -> str:
    import hashlib
    import json

    parts = [value if isinstance(value, str) else json.dumps(
        value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
        for value in material]
    return hashlib.sha256("\0".join(parts).encode("utf-8", "surrogatepass")).hexdigest()


def object_of(value: Any) -> dict[str, Any]:
    """``value`` as a dict (a copy), ``{}`` when it is none; some agents send the tool's arguments
    as JSON text (Copilot, Cursor's MCP events)."""
    if isinstance(value, str) and value.startswith("{"):
        try:
            import json

            value = json.loads(value)
        except ValueError:
            return {}
    return dict(value) if isinstance(value, dict) else {}


def first(value: Any) -> str | None:
    """The first of a list of strings (a workspace's roots), else None."""
    if isinstance(value, list) and value and isinstance(value[0], str):
        return value[0]
    return None


def text(value: object) -> str:
    return value if isinstance(value, str) else ""
