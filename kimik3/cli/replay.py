"""``kimik3 replay``: replay a recorded UI trajectory without a model, or render it (HTML, GIF)."""

from __future__ import annotations

import click

from .._exceptions import KimiK3Error
from .engine import FiniteFloat
from .progress import progress_view
from .run import execute

__all__ = ["replay_command"]


@click.command(name="replay")
@click.argument("trajectory", type=click.Path(exists=True), metavar="FILE")
@click.option("--html", "html_out", type=click.Path(dir_okay=False), metavar="OUT",
              help="Write the recorded run as one HTML page (then nothing is replayed).")
@click.option("--gif", "gif_out", type=click.Path(dir_okay=False), metavar="OUT",
              help="Write the recorded run as an animated GIF (then nothing is replayed).")
@click.option("--url", help="Browser trajectories: open this page instead of the recorded one.")
@click.option("--display", help="X11 trajectories: use this X display instead of the recorded one.")
@click.option("--tolerance", type=FiniteFloat(0, 1), default=0.02, show_default=True,
              help="Largest fraction of differing pixels in a step's target region that still matches.")
@click.option("--timeout", type=FiniteFloat(min=0), default=10.0, show_default=True,
              help="Seconds to wait for the screen to match before each step.")
@click.pass_context
def replay_command(ctx: click.Context, trajectory: str, html_out: str | None, gif_out: str | None, url: str | None,
                   display: str | None, tolerance: float, timeout: float) -> None:  # fmt: skip
    """Replay a recorded UI trajectory (kimik3.tools.ui.TrajectoryRecorder) without a model.

    FILE is the trajectory directory or its trajectory.jsonl. The screen is opened as recorded
    (a headless Chromium page, or the X display) and each step runs once the screen matches the
    recorded screenshot; exits 1 naming the first step that does not. With --html / --gif the
    recorded run is rendered instead (a screenshot too large to decode, over 8K UHD by its header,
    is shown as a note).
    """
    from ..tools.ui import computer_for, load_trajectory, render_gif, render_html, replay

    progress = progress_view(True)
    try:
        traj = load_trajectory(trajectory)
        if html_out or gif_out:
            for out, render in ((html_out, render_html), (gif_out, render_gif)):
                if out:
                    click.echo(f"wrote {render(traj, out)} ({len(traj.steps)} steps)")
            ctx.exit(0)
        computer = computer_for(traj, url=url, display=display)
    except KimiK3Error as e:
        progress.error(e)
        ctx.exit(1)

    async def main() -> int:
        async with computer:
            steps = await replay(traj, computer, tolerance=tolerance, timeout=timeout,
                                 on_step=lambda s: click.echo(f"step {s.index}: {s.describe()}"))  # fmt: skip
        click.echo(f"replayed {steps} steps")
        return 0

    ctx.exit(execute(main, progress))
