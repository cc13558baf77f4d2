"""The kimik3 exception tree (one module, like httpx's ``_exceptions.py``).

::

    KimiK3Error
    ├── UserError (ValueError, TypeError)  kimik3 used wrongly: a bad option, an unknown preset, ...
    │   ├── ToolDefinitionError            a function that cannot become a tool (at decoration time)
    │   └── SandboxUnavailableError        sandbox="bwrap" where bubblewrap cannot run (names the fix)
    ├── MessageError (ValueError)          bad input to the encoder / typed messages
    │   ├── UnknownRoleError
    │   ├── UnknownContentPartError
    │   ├── InvalidEffortError (UserError)  a reasoning effort outside low / high / max / none
    │   ├── ToolNameError                  a tool message whose tool name cannot be resolved
    │   ├── InvalidArgumentsError          tool-call arguments that are JSON but not an object
    │   ├── InvalidRequestError            a request K3's endpoint contract says must be rejected
    │   └── JSONLimitError                 JSON beyond kimik3's limits (depth, digits, non-finite)
    │       └── DuplicateKeyError          a JSON object with one key twice (tool-call arguments)
    ├── TokenizerError                     a model directory without a usable tokenizer
    ├── ParserStateError (RuntimeError)    a K3 StreamParser fed after finish()
    ├── MediaError (ValueError)
    │   ├── ImageTooLargeError             over Pillow's decompression-bomb limit
    │   ├── MediaDecodeError               corrupt or unsupported file
    │   ├── NoVideoStreamError
    │   └── VideoTooLongError              more samples / tokens than MediaConfig's caps
    ├── EngineError                        engine set-up / transport problems
    │   ├── EngineNotAvailableError        e.g. ``vllm`` not installed
    │   ├── EngineRequestError (ValueError)  the in-process engine refused / failed a request
    │   ├── APIConnectionError
    │   │   └── APITimeoutError
    │   ├── APIResponseValidationError     a 2xx answer that is not the protocol (HTML, bad JSON)
    │   └── APIStatusError                 the server answered with an error status (HTTP or in-band)
    │       ├── BadRequestError            400
    │       │   ├── ContextLengthExceededError  (also an EngineRequestError: raised in-process too)
    │       │   └── RequestTooLargeError   the request's bytes over the server's limit (413 too)
    │       ├── AuthenticationError        401 / 403
    │       ├── NotFoundError              404
    │       ├── RateLimitError             429
    │       └── ServiceUnavailableError    5xx
    ├── ToolError                          raised by or around a tool; the agent turns it into a
    │   ├── ToolArgumentsError             tool-error message for the model, it never escapes a run
    │   ├── ToolTimeoutError               a call that overran its time limit (and was abandoned)
    │   ├── TrajectoryError                a UI trajectory that cannot be recorded, read or replayed
    │   │   └── ReplayMismatchError        the screen no longer matches the recorded step
    │   └── MCPServerError                 an MCP server that cannot be started, reached or read
    ├── AgentError
    │   ├── SessionError                   a session file that cannot be read or resumed
    │   └── CheckpointError                a workspace checkpoint that cannot be taken or restored
    └── EvalError                          an eval suite, or a results directory, that cannot be
                                           read or continued (kimik3.eval)

Malformed *model output* never raises: the parser recovers and reports what it dropped.
"""

from __future__ import annotations

__all__ = [
    "APIConnectionError",
    "APIResponseValidationError",
    "APIStatusError",
    "APITimeoutError",
    "AgentError",
    "AuthenticationError",
    "BadRequestError",
    "CheckpointError",
    "ContextLengthExceededError",
    "DuplicateKeyError",
    "EngineError",
    "EngineNotAvailableError",
    "EngineRequestError",
    "EvalError",
    "ImageTooLargeError",
    "InvalidArgumentsError",
    "InvalidEffortError",
    "InvalidRequestError",
    "JSONLimitError",
    "KimiK3Error",
    "MCPServerError",
    "MediaDecodeError",
    "MediaError",
    "MessageError",
    "NoVideoStreamError",
    "NotFoundError",
    "ParserStateError",
    "RateLimitError",
    "ReplayMismatchError",
    "RequestTooLargeError",
    "SandboxUnavailableError",
    "ServiceUnavailableError",
    "SessionError",
    "TokenizerError",
    "ToolArgumentsError",
    "ToolDefinitionError",
    "ToolError",
    "ToolNameError",
    "ToolTimeoutError",
    "TrajectoryError",
    "UnknownContentPartError",
    "UnknownRoleError",
    "UserError",
    "VideoTooLongError",
]


class KimiK3Error(Exception):
    """Base class of every error kimik3 raises on purpose."""


class UserError(KimiK3Error, ValueError, TypeError):
    """kimik3 was used wrongly: an unknown option or preset, a bad argument value, a call out
    of order (e.g. reading a model call's ``completion`` before the stream ended). Also a
    ``ValueError`` and a ``TypeError``, so ``except`` clauses written for those still work."""


# -- messages / encoding ---------------------------------------------------------------------


class MessageError(KimiK3Error, ValueError):
    """A message, tool spec or encoding option that K3's format cannot express."""


class UnknownRoleError(MessageError):
    """A message role other than system, developer, user, assistant or tool."""


class UnknownContentPartError(MessageError):
    """A content part whose ``type`` is not text, image_url / image or video_url / video."""


class InvalidEffortError(MessageError, UserError):
    """A ``thinking_effort`` / ``reasoning_effort`` outside low / high / max (or "none"); also a
    :class:`UserError`, since :class:`~kimik3.ModelSettings` raises it for a bad option."""


class ToolNameError(MessageError):
    """A tool message whose tool name is neither given nor found on the preceding assistant."""


class InvalidArgumentsError(MessageError):
    """Tool-call arguments that parse as JSON but are not a JSON object."""


class InvalidRequestError(MessageError):
    """A request Moonshot's K3 endpoint contract says a server must reject (duplicate tool names,
    ``tools`` on a non-system message, a tool message without ``tool_call_id``, a system message
    with both tools and content); raised before any network call."""


class JSONLimitError(MessageError):
    """JSON beyond the limits of :mod:`kimik3._json` (nesting depth, integer digits,
    non-finite numbers, non-JSON types): refused with the reason instead of failing later."""


class DuplicateKeyError(JSONLimitError):
    """A JSON object that gives one key twice, where which value is meant cannot be told
    (tool-call arguments: dynamo #13654): raised by :func:`kimik3._json.unique_keys`.

    Attributes:
        key: the key given twice (after JSON unescaping: ``"q"`` and ``"\\u0071"`` are one key).
    """

    def __init__(self, key: str) -> None:
        super().__init__(f"the key {key!r} is given more than once")
        self.key = key


class TokenizerError(KimiK3Error):
    """A model directory whose tokenizer files are missing or inconsistent."""


class ParserStateError(KimiK3Error, RuntimeError):
    """A :class:`~kimik3.formats.k3.StreamParser` used out of order (fed after ``finish()``)."""


# -- media -----------------------------------------------------------------------------------


class MediaError(KimiK3Error, ValueError):
    """An image or video that cannot be prepared for K3."""


class ImageTooLargeError(MediaError):
    """An image over Pillow's decompression-bomb limit (raised before pixels are decoded)."""


class MediaDecodeError(MediaError):
    """A corrupt, truncated or unsupported image or video file."""


class NoVideoStreamError(MediaError):
    """A container with no video stream."""


class VideoTooLongError(MediaError):
    """A video that would give more samples or tokens than ``MediaConfig.max_video_samples`` /
    ``max_video_tokens`` (the message says which, and how many)."""


# -- engines / client ------------------------------------------------------------------------


class EngineError(KimiK3Error):
    """An engine could not be built or could not serve a request."""


class EngineNotAvailableError(EngineError):
    """An optional dependency of an engine (``vllm``, a server) is missing."""


class EngineRequestError(EngineError, ValueError):
    """The in-process engine refused or failed a request (vLLM's own validation, or its engine
    died); no HTTP status is involved."""


class APIConnectionError(EngineError):
    """The endpoint could not be reached (the message names its base URL when known).

    Attributes:
        url: the endpoint's base URL, e.g. ``"http://127.0.0.1:8000/v1"`` (None when not known).
    """

    def __init__(self, message: str, *, url: str | None = None) -> None:
        super().__init__(message)
        self.url = url


class APITimeoutError(APIConnectionError):
    """The request timed out."""


class APIResponseValidationError(EngineError):
    """The endpoint answered with a success status but not with the protocol: an HTML page, a
    server-sent event whose ``data`` is not JSON, or a chunk of the wrong shape (the name
    openai-python gives this case). Not retried: the same endpoint answers the same way again.

    Attributes:
        body: an excerpt of what the endpoint sent (at most 500 characters).
    """

    def __init__(self, message: str, *, body: str = "") -> None:
        super().__init__(message)
        self.body = body


class APIStatusError(EngineError):
    """The endpoint answered with an error status (as openai-python's ``APIStatusError``).

    Attributes:
        status_code: the HTTP status (int); None only for a :class:`ContextLengthExceededError`
            raised by an in-process engine.
        body: the decoded error body, when there was one.
        retry_after: seconds the server asked to wait (``Retry-After``), when it said.
        response: the ``httpx.Response`` (None when the error was built without one).
        request_id: the server's ``x-request-id`` header, when it sent one.
    """

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None,
        body: object = None,
        retry_after: float | None = None,
        response: object = None,
        request_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.body = body
        self.retry_after = retry_after
        self.response = response
        self.request_id = request_id


class BadRequestError(APIStatusError):
    """HTTP 400: the server rejected the request itself."""


class ContextLengthExceededError(BadRequestError, EngineRequestError):
    """The prompt plus ``max_tokens`` does not fit the model's context window (from a server:
    ``status_code`` 400; from the in-process engine: ``status_code`` None).

    Attributes:
        limit: the window in tokens the server stated ("Your request exceeded model token
            limit: 262144 (requested: 263932)" gives 262144; vLLM's "maximum context length is
            4096 tokens" gives 4096); None when the message names none.
        requested: the tokens the server counted for the request (263932 above), when it said.
    """

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None,
        body: object = None,
        retry_after: float | None = None,
        response: object = None,
        request_id: str | None = None,
        limit: int | None = None,
        requested: int | None = None,
    ) -> None:
        super().__init__(message, status_code=status_code, body=body, retry_after=retry_after, response=response,
                         request_id=request_id)
        self.limit = limit
        self.requested = requested


class RequestTooLargeError(BadRequestError):
    """The request's size in bytes is over what the server takes (Moonshot's hosted API: "total
    message size 2100954 exceeds limit 2097152"; a proxy's HTTP 413). Not a token overflow:
    large images fill it first, so the agent drops the oldest images, then compacts.

    Attributes:
        limit: the largest request the server takes, in bytes (None: not stated).
        size: the size the server measured for this request, in bytes (None: not stated).
    """

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None,
        body: object = None,
        retry_after: float | None = None,
        response: object = None,
        request_id: str | None = None,
        limit: int | None = None,
        size: int | None = None,
    ) -> None:
        super().__init__(message, status_code=status_code, body=body, retry_after=retry_after, response=response,
                         request_id=request_id)
        self.limit = limit
        self.size = size


class AuthenticationError(APIStatusError):
    """HTTP 401 / 403."""


class NotFoundError(APIStatusError):
    """HTTP 404: wrong base URL or model name."""


class RateLimitError(APIStatusError):
    """HTTP 429 (retried with backoff before it is raised)."""


class ServiceUnavailableError(APIStatusError):
    """HTTP 5xx (retried with backoff before it is raised)."""


# -- tools / agent ---------------------------------------------------------------------------


class ToolError(KimiK3Error):
    """A tool failed; inside an agent run this becomes a tool-error message for the model."""


class ToolArgumentsError(ToolError):
    """Tool-call arguments that do not match the tool's schema (names the offending field)."""


class ToolDefinitionError(UserError):
    """A Python function that cannot be turned into a tool (raised when the tool is defined)."""


class SandboxUnavailableError(UserError):
    """``sandbox="bwrap"`` was asked for where bubblewrap cannot run (not installed, or user
    namespaces disabled), or ``sandbox="landlock"`` on a kernel without Landlock; the message names
    the fix. ``sandbox="auto"`` falls back to Landlock, then to none, instead (issue 39)."""


class ToolTimeoutError(ToolError):
    """A tool call that did not finish within its time limit; the call was cancelled, or its
    worker thread abandoned (Python cannot kill a thread). See :meth:`kimik3.tools.Tool.run`."""


class TrajectoryError(ToolError):
    """A UI trajectory (``kimik3.tools.ui``) that cannot be recorded, read or replayed."""


class ReplayMismatchError(TrajectoryError):
    """Replaying a trajectory: the screen before a step (or at the end) does not match the
    recorded screenshot over the step's target region.

    Attributes:
        step: the 1-based index of the step that was not run (``len(steps) + 1`` for the end
            state after the last step).
        difference: fraction (0-1) of the region's pixels that differ.
        region: ``(left, top, right, bottom)`` in screen pixels.
    """

    def __init__(self, message: str, *, step: int, difference: float, region: tuple[int, int, int, int]) -> None:
        super().__init__(message)
        self.step = step
        self.difference = difference
        self.region = region


class MCPServerError(ToolError):
    """An MCP server that cannot be started, reached or read (raised when it is opened; a call
    that fails inside a run becomes that call's tool-error result and the run goes on)."""


class AgentError(KimiK3Error):
    """A problem with how an agent was configured or resumed."""


class SessionError(AgentError):
    """A session file that cannot be read or resumed."""


class CheckpointError(AgentError):
    """A workspace checkpoint could not be taken or restored (git failed, a file changed since the
    agent's turn, a session without checkpoints)."""


class EvalError(KimiK3Error):
    """An eval suite that cannot be read (a ``task.toml`` with a missing or unknown field, a task
    folder without one), or a results directory that cannot be continued (another suite's, a
    line that is not a result); :mod:`kimik3.eval` names the file and what is wrong."""
