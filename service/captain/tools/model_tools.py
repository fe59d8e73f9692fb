"""The captain's tools: one short text update, screenshots, diagrams, and (privileged only) a shell.

The model supplies only the content fields; who and where are stamped by the
host from the turn (:class:`TurnCapture`). Host failures come back to the
model as a clear error text (``browser_unavailable`` …) so he can say so out
loud; they never fail the turn. A tool that makes a picture appends its
governed ref to the turn's media; the last one rides with the reply.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from clankie import allow, ipc
from clankie.artifacts import ArtifactError, resolve_artifact
from clankie.errors import ChannelBroken, ChannelClosed, RemoteError, RequestTimeout
from clankie.protocol import Artifact, DiagramRequest, Room, ScreenshotRequest, TextUpdate, TextUpdateReply
from clankie.redact import Redactor
from clankie.waits import within
from service.agent.tools import Tool, ToolContext, ToolResult
from service.captain.tools.hosts import HostClient, HostUnavailable

log = logging.getLogger(__name__)

TEXT_UPDATE_MAX = 600
IMAGE_TO_MODEL_MAX = 4 * 1024 * 1024

TEXT_UPDATE_DESCRIPTION = (
    "Post one short text message to this channel right now, threaded onto the message you are answering, "
    "without ending your turn. Your final reply still posts when the turn ends. Use it only when someone is "
    "actually waiting on slow work and a meaningful delay would otherwise leave them hanging (looking up a "
    "bracket, reading a long page). Never use it for an unsolicited link or task you chose to inspect on your "
    "own: work quietly. Say what you are off to do, in your own voice, in a sentence or two. Never pad a turn "
    "you can simply answer."
)


@dataclass
class DeliveryContext:
    """One delivery as the captain holds it: where it came from and the bridge connection to answer on."""

    delivery_id: str
    room: Room
    conn: ipc.Connection | None
    accepted_at: float | None = None  # the service's monotonic clock when it accepted the delivery (first-words time)


@dataclass
class TurnCapture:
    """Host-stamped facts of the live run that tools read: the delivery being answered, media made so far.

    The delivery being answered is read from the lane's shell through ``owner_of`` (the shell keeps it, from
    the lane machine's owner turn): None between runs.
    """

    room: Room
    owner_of: Callable[[], DeliveryContext | None] = field(default=lambda: None)
    actor_id: str = ""
    message_id: str = ""
    media: list[str] = field(default_factory=list)

    @property
    def owner(self) -> DeliveryContext | None:
        return self.owner_of()


@dataclass(frozen=True, kw_only=True)
class Admission:
    """The rooms a channel write may target: the bridge's admission lists, read by the one rule (:mod:`clankie.allow`)."""

    guild_ids: tuple[str, ...]
    channel_ids: tuple[str, ...]

    def admits(self, room: Room) -> bool:
        return allow.admits(self.guild_ids, self.channel_ids, room.guild_id, room.channel_id)


def _error(text: str) -> ToolResult:
    return ToolResult(content=text, is_error=True)


def redacted(tool: Tool, redact: Redactor) -> Tool:
    """``tool`` whose results never carry a secret this process holds: the model (and the tree) never sees one."""
    if not redact:
        return tool
    execute = tool.execute

    async def clean(args: dict[str, Any], ctx: ToolContext) -> ToolResult | str:
        result = await execute(args, ctx)
        if isinstance(result, str):
            return redact(result)
        if isinstance(result.content, str):
            return dataclasses.replace(result, content=redact(result.content))
        blocks = [{**b, "text": redact(b["text"])} if isinstance(b.get("text"), str) else b for b in result.content]
        return dataclasses.replace(result, content=blocks)

    return dataclasses.replace(tool, execute=clean)


def text_update_tool(capture: TurnCapture, admission: Admission, redact: Redactor) -> Tool:
    async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        text = redact(str(args.get("text", "")).strip())
        if not 1 <= len(text) <= TEXT_UPDATE_MAX:
            return _error(f"The update must be 1 to {TEXT_UPDATE_MAX} characters.")
        room = capture.room
        if room.guild_id is None:
            return _error("That Discord action is not available in DMs.")
        if not admission.admits(room):
            return _error("That channel is outside my admitted Discord channels.")
        owner = capture.owner
        if owner is None or owner.conn is None or owner.conn.closed:
            return _error("I can't reach my live Discord body for that action.")
        try:
            await owner.conn.request("text_update", TextUpdate(delivery_id=owner.delivery_id, text=text),
                                     expect=TextUpdateReply, timeout=20)
        except RemoteError as exc:
            return _error(f"My Discord body refused that action: {exc.code}")
        except (ChannelBroken, ChannelClosed, RequestTimeout):
            return _error("I can't reach my live Discord body for that action.")
        return ToolResult(content="I posted that text update. Keep working; your final text reply still posts when the turn ends.")

    return Tool(
        name="send_text_update",
        description=TEXT_UPDATE_DESCRIPTION,
        input_schema={
            "type": "object",
            "properties": {
                "text": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": TEXT_UPDATE_MAX,
                    "description": "What to say now, in your own voice. One or two sentences.",
                }
            },
            "required": ["text"],
            "additionalProperties": False,
        },
        execute=execute,
        timeout=30.0,
    )


async def _artifact_call(
    client: HostClient, method: str, params: Any, capture: TurnCapture, root: Path, what: str
) -> ToolResult:
    try:
        artifact = await client.request(method, params, timeout=90)
    except HostUnavailable as exc:
        return _error(f"{exc.code}: the {client.name} host is not available right now. Tell the room plainly if it matters.")
    except RemoteError as exc:
        return _error(f"{exc.code}: the {client.name} host refused: {exc.message[:300]}")
    except RequestTimeout:
        return _error(f"{client.name}_timeout: the {client.name} host did not answer in time.")
    assert isinstance(artifact, Artifact)
    capture.media.append(artifact.ref)
    note = f"{what} ready ({artifact.ref}). It will be attached to your reply; do not paste the ref."
    content: list[dict[str, Any]] = [{"type": "text", "text": note}]
    if artifact.mime in ("image/png", "image/jpeg", "image/webp"):
        try:
            resolved = resolve_artifact(root, artifact.ref, IMAGE_TO_MODEL_MAX)
        except ArtifactError as exc:
            log.warning("%s artifact not readable for the model: %s", client.name, exc.code)
        else:
            data = base64.b64encode(resolved.data).decode("ascii")
            content.append({"type": "image", "source": {"type": "base64", "media_type": resolved.content_type, "data": data}})
    return ToolResult(content=content)


def screenshot_tool(client: HostClient, capture: TurnCapture, root: Path) -> Tool:
    async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        try:
            request = ScreenshotRequest(url=str(args.get("url", "")), full_page=bool(args.get("full_page", False)))
        except ValueError:
            return _error("The url must be 1 to 2048 characters.")
        return await _artifact_call(client, "screenshot", request, capture, root, "Screenshot")

    return Tool(
        name="browser_screenshot",
        description="Open a web page in a headless browser and take a screenshot of it. You see the picture, "
        "and the last picture of your turn is attached to your reply.",
        input_schema={
            "type": "object",
            "properties": {
                "url": {"type": "string", "description": "The http(s) address to open."},
                "full_page": {"type": "boolean", "description": "Capture the whole page, not just the first screen."},
            },
            "required": ["url"],
            "additionalProperties": False,
        },
        execute=execute,
        timeout=120.0,
        subject=url_host,
        reads_untrusted=True,  # the page is the internet's words: a run that saw one loses the shell
    )


def url_host(args: dict[str, Any]) -> str | None:
    """A screenshot call's subject: the URL's host name alone (no scheme, path, query or credentials)."""
    host = urlsplit(str(args.get("url", ""))).hostname
    return host[:253] if host else None


# The tldraw host's limits (hosts/tldraw/schema_er.py, schema_sequence.py), stated here because the
# service may not import hosts/; tests/service/captain/test_tool_schemas.py keeps them no looser.
ER_ENTITIES, ER_FIELDS_PER_ENTITY, ER_FIELDS_TOTAL, ER_RELATIONS = 60, 40, 600, 120
ER_NAME_CHARS, ER_TYPE_CHARS, ER_LABEL_CHARS, ER_TITLE_CHARS = 64, 48, 80, 120
SEQ_PARTICIPANTS, SEQ_MESSAGES, SEQ_NAME_CHARS, SEQ_TEXT_CHARS, SEQ_TITLE_CHARS = 16, 120, 48, 120, 120


def _text(max_chars: int, *, required: bool = True) -> dict[str, Any]:
    return {"type": "string", "minLength": 1 if required else 0, "maxLength": max_chars}


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


ER_SCHEMA: dict[str, Any] = _object(
    {
        "title": _text(ER_TITLE_CHARS, required=False),
        "entities": {
            "type": "array",
            "minItems": 1,
            "maxItems": ER_ENTITIES,
            "description": f"Unique entity names; at most {ER_FIELDS_TOTAL} fields across all entities.",
            "items": _object(
                {
                    "name": _text(ER_NAME_CHARS),
                    "fields": {
                        "type": "array",
                        "maxItems": ER_FIELDS_PER_ENTITY,
                        "items": _object(
                            {
                                "name": _text(ER_NAME_CHARS),
                                "type": _text(ER_TYPE_CHARS, required=False),
                                "key": {"enum": ["pk", "fk", "pk_fk", "uk"]},
                            },
                            ["name"],
                        ),
                    },
                },
                ["name"],
            ),
        },
        "relations": {
            "type": "array",
            "maxItems": ER_RELATIONS,
            "description": "Between two different entities, named exactly as in entities.",
            "items": _object(
                {
                    "from": _text(ER_NAME_CHARS),
                    "to": _text(ER_NAME_CHARS),
                    "cardinality": {"enum": ["one_to_one", "one_to_many", "many_to_one", "many_to_many"]},
                    "label": _text(ER_LABEL_CHARS, required=False),
                },
                ["from", "to", "cardinality"],
            ),
        },
    },
    ["entities"],
)

SEQUENCE_SCHEMA: dict[str, Any] = _object(
    {
        "title": _text(SEQ_TITLE_CHARS, required=False),
        "participants": {
            "type": "array",
            "minItems": 1,
            "maxItems": SEQ_PARTICIPANTS,
            "description": "Unique participant names.",
            "items": _object({"name": _text(SEQ_NAME_CHARS)}, ["name"]),
        },
        "messages": {
            "type": "array",
            "minItems": 1,
            "maxItems": SEQ_MESSAGES,
            "description": "Top to bottom; from/to name participants exactly.",
            "items": _object(
                {
                    "from": _text(SEQ_NAME_CHARS),
                    "to": _text(SEQ_NAME_CHARS),
                    "text": _text(SEQ_TEXT_CHARS, required=False),
                    "kind": {"enum": ["sync", "async", "reply"]},
                },
                ["from", "to"],
            ),
        },
    },
    ["participants", "messages"],
)


def diagram_tool(method: str, client: HostClient, capture: TurnCapture, root: Path) -> Tool:
    er = method == "draw_er_diagram"

    async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return await _artifact_call(client, method, DiagramRequest(spec=dict(args)), capture, root, "Diagram")

    return Tool(
        name=method,
        description=(
            "Draw an entity-relationship diagram from described entities, fields and relations."
            if er
            else "Draw a sequence diagram from described participants and the messages between them, top to bottom."
        )
        + " The picture is attached to your reply.",
        input_schema=ER_SCHEMA if er else SEQUENCE_SCHEMA,
        execute=execute,
        timeout=120.0,
    )


SHELL_OUTPUT_MAX = 16_000


def shell_tool(cwd: Path) -> Tool:
    """Privileged turns only: run one shell command (60 s), see its output."""

    async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        command = str(args.get("command", ""))
        if not command.strip():
            return _error("Give a command to run.")
        proc = await asyncio.create_subprocess_shell(
            command, cwd=cwd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, start_new_session=True
        )
        try:
            out, _ = await within(proc.communicate(), 60)
        except (TimeoutError, asyncio.CancelledError):
            proc.kill()
            await proc.wait()
            raise
        text = out.decode("utf-8", "replace")[-SHELL_OUTPUT_MAX:]
        return ToolResult(content=f"exit {proc.returncode}\n{text}", is_error=proc.returncode != 0)

    return Tool(
        name="bash",
        description="Run one shell command on the host (granted to this actor for this turn only).",
        input_schema={"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
        execute=execute,
        timeout=70.0,
        clean_only=True,  # never after a web page in the same run (service.agent.tools.Toolbox)
    )
