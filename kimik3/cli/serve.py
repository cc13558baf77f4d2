"""``kimik3 serve``: vLLM's OpenAI server for a K3 model directory, or several replicas of it behind
vLLM's router (``--replicas N --router POLICY``; :class:`~kimik3.engines._cluster.Cluster`)."""

from __future__ import annotations

import os
import signal
import sys
import time
from types import FrameType

import click

from .._exceptions import KimiK3Error
from ..engines._cluster import ROUTER_POLICIES, Cluster
from ..engines._quiet import without_leak_warnings
from .progress import one_line

__all__ = ["serve_command"]


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("model_dir", type=click.Path(exists=True))
@click.argument("vllm_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--host", default="127.0.0.1", show_default=True, help="The address to listen on.")
@click.option("--port", type=click.IntRange(1, 65535), default=8000, show_default=True,
              help="The port (with --replicas: the router's; the replicas take the ports after it).")
@click.option("--replicas", type=click.IntRange(1, 64), default=None,
              help="Serve this many vLLM replicas behind vLLM's router (vllm-router) on one host.")
@click.option("--router", "policy", type=click.Choice(ROUTER_POLICIES), default=None,
              help="The router's policy (default consistent_hash: a conversation stays on one replica by the "
                   "routing key kimik3 sends; docs/scale-out.md).")
@click.option("--router-arg", multiple=True, metavar="ARG", help="A vllm-router flag or value (repeatable).")
@click.option("--log-dir", type=click.Path(file_okay=False),
              help="Where the replicas' and the router's logs go (default: a temporary folder, removed at a clean "
                   "stop, kept and named when something failed).")
@click.option("--keep-logs", is_flag=True, help="Keep the temporary log folder after a clean stop too.")
@click.option("--dry-run", is_flag=True, help="Print the command(s) instead of running them.")
def serve_command(model_dir: str, vllm_args: tuple[str, ...], host: str, port: int, replicas: int | None,
          policy: str | None, router_arg: tuple[str, ...], log_dir: str | None, dry_run: bool,
          keep_logs: bool = False) -> None:
    """Serve a K3 model directory with vLLM's OpenAI-compatible server, ready for kimik3.

    Runs ``python -m vllm.entrypoints.openai.api_server`` with vLLM's kimi_k3 tokenizer mode,
    tool-call and reasoning parsers (chat mode), --enable-prompt-tokens-details (the cached
    prompt tokens in usage: "% cached" in ``kimik3 run``, eval's cache hits) and, on a CPU,
    --enforce-eager and a KV-cache size kimik3 picks (as VLLMEngine does). Any other vLLM server
    flag goes after MODEL_DIR, e.g. ``kimik3 serve models/k3-tiny --max-model-len 8192``. Then: ``kimik3 run TASK
    --base-url http://HOST:PORT/v1`` (chat mode) or ``--mode raw --tokenizer MODEL_DIR``.

    With ``--replicas N`` (or ``--router POLICY``): N such servers on the ports after PORT and
    vllm-router on PORT in front of them, started together (each replica's /health waited for)
    and stopped together by Ctrl-C, with every process they started.
    """
    from ..engines._cluster import run_supervised
    from ..engines._vllm import server_command

    if replicas is None and policy is None:
        try:
            cmd = server_command(model_dir, *vllm_args, host=host, port=port)
        except KimiK3Error as e:
            click.echo(f"error: {one_line(e)}", err=True)
            sys.exit(1)
        click.echo(" ".join(cmd), err=not dry_run)
        if dry_run:
            return
        sys.stdout.flush()
        # its exit code is vLLM's; no process of it outlives this one; without the resource
        # tracker's leak report at Ctrl-C (engines/quiet.py: LEAK_WARNINGS)
        sys.exit(run_supervised(cmd, without_leak_warnings(dict(os.environ))))
    cluster = Cluster(model_dir, replicas=replicas or 1, policy=policy or "consistent_hash", host=host, port=port,
                      vllm_args=vllm_args, router_args=router_arg, log_dir=log_dir, keep_logs=keep_logs)
    try:
        lines = cluster.describe()
    except KimiK3Error as e:
        click.echo(f"error: {one_line(e)}", err=True)
        sys.exit(1)
    for line in lines:
        click.echo(line, err=not dry_run)
    if not dry_run:
        sys.exit(_run_cluster(cluster))


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # SIGTERM stops the cluster the way Ctrl-C does


def _run_cluster(cluster: Cluster) -> int:
    """Start the cluster, serve until Ctrl-C / SIGTERM or a child exits, stop everything; the exit code."""
    signal.signal(signal.SIGTERM, _interrupt)
    cluster.env = without_leak_warnings(cluster.env)  # no leak report from the replicas at Ctrl-C
    code = 0
    try:
        click.echo(f"kimik3 serve: starting {len(cluster.replica_urls)} replica(s) and the router "
                   f"({cluster.policy}); logs in {cluster.log_dir}", err=True)
        cluster.start()
        click.echo(f"kimik3 serve: ready at {cluster.base_url} ({cluster.policy} over "
                   f"{', '.join(cluster.replica_urls)}); Ctrl-C stops everything", err=True)
        while (why := cluster.exited()) is None:
            time.sleep(1.0)
        click.echo(f"kimik3 serve: {why}; stopping the rest", err=True)
        code = 1
    except KeyboardInterrupt:
        click.echo("kimik3 serve: stopping", err=True)
    except KimiK3Error as e:
        click.echo(f"error: {one_line(e)}", err=True)
        code = 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the clean-up short
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        kept = cluster.stop(failed=code != 0)
    click.echo("kimik3 serve: stopped" + (f"; logs in {kept}" if kept is not None else ""), err=True)
    return code
