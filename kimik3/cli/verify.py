"""Checking a node or an endpoint: ``kimik3 preflight`` (can this node serve K3?) and ``kimik3 verify``
(does an endpoint keep Moonshot's contract? docs/verify.md)."""

from __future__ import annotations

import time

import click

from .._exceptions import KimiK3Error
from .._text import printable, redact_url, redact_urls
from ..engines import FEATURES, preflight
from .engine import PRESET_NAMES, FiniteFloat, quiet

__all__ = ["preflight_command", "verify_command"]


@click.command(name="preflight")
@click.option("--weights-dir", type=click.Path(file_okay=False), metavar="DIR",
              help="Where the checkpoint will live (its free space is checked; default $HF_HOME or here).")
@click.option("--preset", type=click.Choice(PRESET_NAMES), default="auto", show_default=True,
              help="Which launch of vLLM's K3 recipe to check for (auto: the one that fits the GPUs found).")
@click.option("--feature", type=click.Choice(sorted(FEATURES)), multiple=True,
              help="An opt-in feature of the recipe (repeatable).")
@click.option("--gpus", type=click.IntRange(min=1), help="GPUs the launch uses (default: the preset's).")
@click.option("--verbose", "-v", is_flag=True, help="Show vLLM's logs and Python warnings (hidden by default).")
@click.pass_context
def preflight_command(
    ctx: click.Context, weights_dir: str | None, preset: str, feature: tuple[str, ...], gpus: int | None,
    verbose: bool = False,
) -> None:
    """Check whether this node can serve K3 (GPUs, preset, driver, memory, vLLM's kimi_k3 support, disk).

    Prints the preset's environment variables and its ``vllm serve`` command too. Exits 0 when
    nothing failed, 1 otherwise.
    """
    quiet(verbose)
    try:
        report = preflight(weights_dir=weights_dir, preset=preset, features=feature, gpus_needed=gpus)
    except KimiK3Error as e:
        click.echo(f"kimik3 preflight: {type(e).__name__}: {e}", err=True)
        ctx.exit(1)
    click.echo(str(report))
    ctx.exit(0 if report.ok else 1)


@click.command(name="verify")
@click.option("--base-url", required=True, envvar=["KIMIK3_BASE_URL", "OPENAI_BASE_URL"], metavar="URL",
              help="The endpoint's OpenAI base URL, e.g. http://127.0.0.1:8000/v1 "
                   "(default $KIMIK3_BASE_URL, else $OPENAI_BASE_URL).")
@click.option("--model", metavar="NAME", help="Served model name (default: the first one /models lists).")
@click.option("--api-key", envvar="OPENAI_API_KEY", metavar="KEY", help="API key (default $OPENAI_API_KEY).")
@click.option("--quick", is_flag=True, help="Wire-level checks only (no check that needs a capable model).")
@click.option("--tokenizer", "tokenizer_dir", type=click.Path(exists=True, file_okay=False), metavar="DIR",
              help="The served model's tokenizer directory when it is not K3's vocabulary (e.g. models/k3-tiny).")
@click.option("--no-images", is_flag=True, help="Do not send the image requests.")
@click.option("--max-tokens", type=click.IntRange(min=1), default=1024, show_default=True,
              help="Completion budget of each generation the model checks read.")
@click.option("--concurrency", type=click.IntRange(min=1), default=8, show_default=True, help="Requests in flight.")
@click.option("--timeout", type=FiniteFloat(min=0, min_open=True, max=86400), default=60.0, show_default=True,
              metavar="SECONDS", help="Total time per request, connect to last byte.")
@click.option("--max-body-bytes", type=click.IntRange(min=1024), default=4 * 1024 * 1024, show_default=True,
              metavar="BYTES", help="The largest answer body read (a stream's chunks together); a larger one "
                                    "is a failed row.")
@click.pass_context
def verify_command(ctx: click.Context, base_url: str, model: str | None, api_key: str | None, quick: bool,
                   tokenizer_dir: str | None, no_images: bool, max_tokens: int, concurrency: int,
                   timeout: float, max_body_bytes: int) -> None:  # fmt: skip
    """Check a K3 endpoint against Moonshot's contract: exact prompt_tokens, reasoning round-trip,
    rejected requests, raw mode, and (without --quick) tool calls, JSON output and the walle schemas.

    Prints one row per check with its evidence. Exits 0 when no row failed, 1 otherwise.
    """
    from .._verify import CheckResult, verify  # only when verifying: the CLI starts without it

    click.echo(f"kimik3 verify {redact_url(base_url)}{' --quick' if quick else ''} (timeout {timeout:g} s per request)")

    started = time.monotonic()

    def step(text: str) -> None:  # where a long run is, on stderr (a full run takes ~15 minutes: docs/verify.md)
        click.echo(f"... {text} ({time.monotonic() - started:.0f} s)", err=True)

    def row(r: CheckResult) -> None:  # each row as it is decided
        mark = r.status.upper() if r.status == "fail" else r.status
        name = r.check + (" *" if r.needs_model else "")
        click.echo(f"{name:<56}  {mark:<6}  {r.evidence}")  # two spaces at least: names can be long

    try:
        report = verify(base_url, model=model, api_key=api_key, quick=quick, tokenizer=tokenizer_dir,
                        images=not no_images, max_tokens=max_tokens, concurrency=concurrency, timeout=timeout,
                        max_body_bytes=max_body_bytes, progress=row, on_step=step)  # fmt: skip
    except KimiK3Error as e:
        click.echo(f"kimik3 verify: {type(e).__name__}: {' '.join(printable(redact_urls(str(e))).split())}", err=True)
        ctx.exit(1)
    fails = len(report.failures())
    if any(r.needs_model for r in report.rows):
        click.echo("(* needs a capable model)")
    click.echo(f"model: {report.model_line}")
    if report.hint:
        click.echo(f"hint: {report.hint}")
    click.echo("verify: " + ("OK" if report.ok else f"FAILED ({fails} row{'s' if fails != 1 else ''})"))
    ctx.exit(0 if report.ok else 1)
