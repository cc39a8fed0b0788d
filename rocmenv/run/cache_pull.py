"""Pulling through the runner image cache (:mod:`rocmenv.cache`) for ``pull``, ``run``,
``shell``, ``shims check`` and ``suite run``: the pull display fed from the cache's fetch,
the record for ``gc --images``, and one line in ``$GITHUB_STEP_SUMMARY`` saying where the
image came from, the bytes that crossed the network and the seconds to present.

An image the cache cannot hold (a schema 1 manifest, foreign layers) is pulled by the
engine as without the cache, with a note saying so.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rocmenv.context import Context
from rocmenv.engine.protocol import Engine, PullEvent
from rocmenv.run.pull import (
    LayerPlan,
    PullObserver,
    PullPlan,
    PullResult,
    human_bytes,
    human_seconds,
)
from rocmenv.settings.resolve import Settings

if TYPE_CHECKING:
    from rocmenv.cache.present import LayerNeed, Presented


class _Observer:
    def __init__(self, display: PullObserver, image: str) -> None:
        self.display, self.image = display, image

    def note(self, text: str) -> None:
        self.display.note(text)

    def event(self, event: PullEvent) -> None:
        self.display.event(event)

    def layers(self, needs: tuple[LayerNeed, ...]) -> None:
        plan = PullPlan(
            image=self.image,
            layers=tuple(LayerPlan(digest=n.digest, size=n.size, present=n.cached) for n in needs),
        )
        self.display.begin(plan)


def pull_through_cache(
    ctx: Context, settings: Settings, engine: Engine, image: str, display: PullObserver
) -> PullResult:
    from rocmenv.cache.present import CacheUnsupported
    from rocmenv.cache.runner import present_with_settings
    from rocmenv.run.images import record_pull

    try:
        got = present_with_settings(ctx, settings, engine, image,
                                    observer=_Observer(display, image))  # fmt: skip
    except CacheUnsupported as err:
        from rocmenv.image.pinning import make_client
        from rocmenv.run.pull import fetch

        display.note(f"the image cache cannot hold {image} ({err.what}): the engine pulls it")
        with make_client(ctx, settings) as client:
            return fetch(ctx, engine, image, observer=display, client=client,
                         reserve=settings.disk_reserve)  # fmt: skip
    result = PullResult(
        image=image,
        total_bytes=got.total_bytes,
        missing_bytes=sum(n.size for n in got.layers if not n.cached),
        seconds=got.seconds,
        attempts=1,
        source=got.source,
        network_bytes=got.network_bytes,
        present_as=got.present_as,
    )
    line = f"image {image}: {_facts(got)}"
    display.note(line)
    record_pull(ctx, got.present_as, image)
    summary = ctx.env.get("GITHUB_STEP_SUMMARY", "").strip()
    if ctx.in_github_actions and summary:
        from rocmenv.hostfs import append_text

        try:
            append_text(Path(summary), f"- rocmenv: {_summary_line(got, image)}\n",
                        within=ctx.checkout)  # fmt: skip
        except OSError as err:
            display.note(f"could not write to $GITHUB_STEP_SUMMARY: {err}")
    return result


def _facts(got: Presented) -> str:
    took = human_seconds(got.seconds) if got.seconds >= 1 else f"{got.seconds:.1f}s"
    return (
        f"from {got.source}, {human_bytes(got.network_bytes)} over the network, present in {took}"
    )


def _summary_line(got: Presented, image: str) -> str:
    """The step summary's line: markdown, the reference (from the lockfile or a checkout's
    spec) as a code span that no markup can come out of."""
    from rocmenv.escape import markdown_code

    return f"image {markdown_code(image)}: {_facts(got)}"
