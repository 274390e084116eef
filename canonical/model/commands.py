"""Canonical commands (edge → plugin): one name and one argument shape per operation,
whichever dialect asked for it.

A command travels as the envelope ``{cmd, args, edge, conn, dialect, device_id,
request_id, ts[, internal]}``; ``args`` has the shape its ``CommandSpec`` names. The
dialect codecs (``edge/dialects/``) produce these and nothing else; the plugin registers
exactly one handler per spec (``gateway_plugin/commands/registry.py``), and mypy checks
that the handler takes the spec's argument type.

Where the dialects address a lane differently, a command names it by ``Target``: a
conversation id (pheby) or a lane (iris). The rule that follows from the reference, not
from the dialect: a conversation id names only a live conversation, so an archived one
is "not found"; a lane may be archived where that still makes sense (history, a cancel).
"""

from dataclasses import dataclass
from typing import Any, Generic, Literal, TypedDict, TypeVar, final

from .base import Json


# Final, so that `"conversation_id" in target` tells mypy which of the two a target is.
@final
class ConversationRef(TypedDict):
    conversation_id: str


@final
class LaneRef(TypedDict):
    chat_id: str
    thread_id: str | None


Target = ConversationRef | LaneRef


# -- sessions and cursors


class HelloArgs(TypedDict):
    device_name: str
    caps: list[str]
    cursor: int | None
    fcm_token: str | None
    request_id: Any


class CursorArgs(TypedDict):
    cursor: int


class ReadReceiptArgs(TypedDict):
    message_id: str
    cursor: int


class FcmRegisterArgs(TypedDict):
    token: str


# -- sends and runs


class MessageSendArgs(TypedDict):
    target: Target
    text: str
    # Uploads sent with the text (pheby attachment_ids, iris media_refs).
    attachment_ids: list[str]
    # The device's own id for the send: its idempotency key when present.
    client_id: str | None
    # Start a new thread for a conversation starter in the default channel.
    auto_thread: bool
    reply_to: str | None


class RunCancelArgs(TypedDict):
    target: Target
    run_id: str | None


# -- lanes: history, channels, search

HistoryView = Literal["live", "conversation"]


class HistoryArgs(TypedDict):
    target: Target
    limit: int
    before_message_id: str | None
    # "live": messages named as devices saw them live (u-…, draft-…, m<n>);
    # "conversation": transcript rows (m<n>) plus the lane's state a client opening it needs
    # at once (the run in flight, tools, pending decisions, attachments).
    view: HistoryView


class ChannelListArgs(TypedDict):
    # Each entry also with its latest transcript session and activity time.
    activity: bool


class ChannelCreateArgs(TypedDict):
    kind: Literal["channel", "thread"]
    name: str | None
    parent_chat_id: str | None


class ChannelRenameArgs(TypedDict):
    target: Target
    name: str


class ChannelDeleteArgs(TypedDict):
    target: Target
    # Also delete the lane's transcript; a permanent channel then stays (empty).
    purge_history: bool


class ChatIdArgs(TypedDict):
    chat_id: str


class ChannelToggleArgs(TypedDict):
    chat_id: str
    on: bool


class SearchArgs(TypedDict):
    query: str
    scope: Literal["all", "chat"]
    chat_id: str | None
    thread_id: str | None
    limit: int


# -- decisions


class ApprovalRespondArgs(TypedDict):
    approval_id: str
    choice: str
    reason: str | None


class ClarifyRespondArgs(TypedDict):
    clarify_id: str
    response: str


class PickerSelectArgs(TypedDict):
    picker_id: str
    value: str


# -- preferences (a conversation's, or global when conversation_id is None)


class ScopeArgs(TypedDict):
    conversation_id: str | None


class YoloSetArgs(TypedDict):
    conversation_id: str
    enabled: bool


class ModelSetArgs(TypedDict):
    model: str
    provider: str | None
    conversation_id: str | None


class ReasoningSetArgs(TypedDict):
    effort: str
    conversation_id: str | None


# -- operators (only the admin token's digest crosses the bus)


class AdminArgs(TypedDict, total=False):
    admin_digest: str | None
    device_id: str
    token: str


# Requests of an edge itself (HTTP uploads and downloads, iris media): loose by nature,
# validated where they are built (edge/attachments.py, edge/media.py).
AttachmentArgs = Json

A = TypeVar("A")


@dataclass(frozen=True)
class CommandSpec(Generic[A]):
    """A canonical command's name, typed with its argument shape ``A``."""

    name: str


HELLO = CommandSpec[HelloArgs]("hello")
SYNC = CommandSpec[CursorArgs]("sync")
ACK = CommandSpec[CursorArgs]("ack")
READ_RECEIPT = CommandSpec[ReadReceiptArgs]("read.receipt")
FCM_REGISTER = CommandSpec[FcmRegisterArgs]("fcm.register")
MESSAGE_SEND = CommandSpec[MessageSendArgs]("message.send")
RUN_CANCEL = CommandSpec[RunCancelArgs]("run.cancel")
HISTORY = CommandSpec[HistoryArgs]("history")
CHANNEL_LIST = CommandSpec[ChannelListArgs]("channel.list")
CHANNEL_CREATE = CommandSpec[ChannelCreateArgs]("channel.create")
CHANNEL_RENAME = CommandSpec[ChannelRenameArgs]("channel.rename")
CHANNEL_DELETE = CommandSpec[ChannelDeleteArgs]("channel.delete")
CHANNEL_SET_DEFAULT = CommandSpec[ChatIdArgs]("channel.set_default")
CHANNEL_SET_AUTOMATION = CommandSpec[ChannelToggleArgs]("channel.set_automation")
CHANNEL_SET_THREADS = CommandSpec[ChannelToggleArgs]("channel.set_threads")
SEARCH = CommandSpec[SearchArgs]("search")
APPROVAL_RESPOND = CommandSpec[ApprovalRespondArgs]("approval.respond")
CLARIFY_RESPOND = CommandSpec[ClarifyRespondArgs]("clarify.respond")
PICKER_SELECT = CommandSpec[PickerSelectArgs]("picker.select")
YOLO_CURRENT = CommandSpec[ConversationRef]("yolo.current")
YOLO_SET = CommandSpec[YoloSetArgs]("yolo.set")
MODELS_LIST = CommandSpec[ScopeArgs]("models.list")
MODELS_CURRENT = CommandSpec[ScopeArgs]("models.current")
MODEL_SET = CommandSpec[ModelSetArgs]("model.set")
REASONING_CURRENT = CommandSpec[ScopeArgs]("reasoning.current")
REASONING_SET = CommandSpec[ReasoningSetArgs]("reasoning.set")
ADMIN_DEVICES_LIST = CommandSpec[AdminArgs]("admin.devices.list")
ADMIN_DEVICES_REVOKE = CommandSpec[AdminArgs]("admin.devices.revoke")
ADMIN_TOKEN_ROTATE = CommandSpec[AdminArgs]("admin.token.rotate")
ATTACHMENT_CHECK = CommandSpec[AttachmentArgs]("attachment.check")
ATTACHMENT_REGISTER = CommandSpec[AttachmentArgs]("attachment.register")
ATTACHMENT_GET = CommandSpec[AttachmentArgs]("attachment.get")

# Every command the plugin carries out: each has exactly one handler there.
PLUGIN_COMMANDS: tuple[CommandSpec[Any], ...] = (
    HELLO,
    SYNC,
    ACK,
    READ_RECEIPT,
    FCM_REGISTER,
    MESSAGE_SEND,
    RUN_CANCEL,
    HISTORY,
    CHANNEL_LIST,
    CHANNEL_CREATE,
    CHANNEL_RENAME,
    CHANNEL_DELETE,
    CHANNEL_SET_DEFAULT,
    CHANNEL_SET_AUTOMATION,
    CHANNEL_SET_THREADS,
    SEARCH,
    APPROVAL_RESPOND,
    CLARIFY_RESPOND,
    PICKER_SELECT,
    YOLO_CURRENT,
    YOLO_SET,
    MODELS_LIST,
    MODELS_CURRENT,
    MODEL_SET,
    REASONING_CURRENT,
    REASONING_SET,
    ADMIN_DEVICES_LIST,
    ADMIN_DEVICES_REVOKE,
    ADMIN_TOKEN_ROTATE,
    ATTACHMENT_CHECK,
    ATTACHMENT_REGISTER,
    ATTACHMENT_GET,
)

# Decoded by a codec but carried out on the edge itself (edge/media.py): never on the bus.
EDGE_COMMANDS = frozenset({"media.upload.start", "media.upload.chunk", "media.pull"})

__all__ = [
    "EDGE_COMMANDS",
    "PLUGIN_COMMANDS",
    "CommandSpec",
    "ConversationRef",
    "LaneRef",
    "Target",
]
