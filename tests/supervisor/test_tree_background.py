"""The tree's background tasks: held until they end, bounded per child, cancelled at shutdown."""

from __future__ import annotations

import asyncio
import sys

import pytest

from clankie import settings as settings_mod
from clankie.tasks import TaskSetFull
from clankie.testing.clock import FakeClock
from supervisor.spec import ChildSpec
from supervisor.tree import BACKGROUND_PER_CHILD, Tree
from tests.supervisor.harness import FIXTURE


def _tree(env: dict[str, str], children: int) -> Tree:
    specs = [ChildSpec(name=f"c{n}", argv=(sys.executable, str(FIXTURE))) for n in range(children)]
    return Tree(settings_mod.load(env), specs, clock=FakeClock(), env=env, subreaper=False, forward_fd=None)


def test_past_its_bound_per_child_a_tree_refuses_another_background_task_loudly(env: dict[str, str]) -> None:
    """So many tasks at once is a leak: spawn raises instead of growing, and shutdown still cancels every held one."""

    async def main() -> None:
        tree = _tree(env, children=2)
        held = [tree.spawn(asyncio.Event().wait(), name=f"held-{n}") for n in range(2 * BACKGROUND_PER_CHILD)]
        with pytest.raises(TaskSetFull):
            tree.spawn(asyncio.Event().wait(), name="one-too-many")
        await tree._cancel_background()
        assert all(t.cancelled() for t in held)
        done = tree.spawn(asyncio.sleep(0), name="after")  # the slots are free again
        await done

    asyncio.run(main())
