"""What the captain reports about its lanes: live runs (heartbeat), lane rows (``clankiectl lanes``), counts."""

from __future__ import annotations

from pathlib import Path

from clankie.protocol import LaneInfo, RunReport
from service.captain.lanes import listing
from service.captain.lanes.registry import LaneRegistry


def runs(registry: LaneRegistry, now: float) -> tuple[RunReport, ...]:
    """Every live run, and every aborted run that has not stopped (a zombie), with its ages at ``now``."""
    out = [
        RunReport(
            lane=z.key,
            run_id=run_id,
            last_event_age_s=max(0.0, now - z.last_event_boot),
            started_age_s=max(0.0, now - z.run_started_boot),
            turns=0,
        )
        for run_id, z in registry.zombies.items()
    ]
    for lane in registry.lanes.values():
        m = lane.machine
        if m.live and m.run_id is not None:
            out.append(
                RunReport(
                    lane=lane.key,
                    run_id=m.run_id,
                    # a call waiting in the provider governor is paced, not silent: no age for the watchdog
                    last_event_age_s=0.0 if lane.paced else max(0.0, now - lane.last_event_boot),
                    started_age_s=max(0.0, now - lane.run_started_boot),
                    turns=len(m.attached),
                    paced=lane.paced,
                )
            )
    return tuple(out)


def lane_directories(registry: LaneRegistry) -> dict[str, Path]:
    """Where each live lane's session trees are (read back for its spend)."""
    return {lane.key: lane.plan.directory for lane in registry.lanes.values()}


def live_infos(registry: LaneRegistry, now: float, limit: int) -> list[LaneInfo]:
    """The live lanes, most recently used first, at most ``limit``."""
    return [
        LaneInfo(
            key=lane.key,
            warm=not lane.fresh,
            state=lane.machine.state_name,
            run_id=lane.machine.run_id,
            last_event_age_s=max(0.0, now - lane.last_event_boot) if lane.machine.live else None,
            turns=lane.machine.turns_started,
            last_active_age_s=max(0.0, now - lane.last_event_boot) if lane.last_event_boot else None,
        )
        for lane in reversed(registry.lanes.values())
    ][:limit]


def disk_infos(on_disk: list[listing.DiskLane], registry: LaneRegistry, wall: float) -> tuple[LaneInfo, ...]:
    """Rows for lanes only on disk: warm if their stamp is this process's, and how long ago they were written."""
    return tuple(
        LaneInfo(key=lane.key, warm=lane.stamp == registry.instance, state="on_disk", live=False,
                 last_active_age_s=max(0.0, wall - lane.last_write) if lane.last_write else None)
        for lane in on_disk
    )


def counts(registry: LaneRegistry) -> dict[str, int]:
    """The lane counts for the heartbeat report: live lanes, the bound, evictions so far."""
    return {"lanes_live": len(registry.lanes), "lanes_max_live": registry.max_live, "lanes_evicted": registry.evicted}
