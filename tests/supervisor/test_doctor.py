"""Writer and reader provably agree: `clankiectl status` compares roots, `clankiectl doctor` probes each pair.

These boot a real supervisor on the real picture hosts and the real bridge
(no Discord token: the bridge runs local-only, which is all the probe needs;
no Chromium path: the probe must not depend on a browser being up).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from clankie.artifacts import parse_ref
from hosts.probe import probe_png
from supervisor import ctl
from supervisor.doctor import agreement
from tests.supervisor.harness import supervisor


def real(name: str, module: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "argv": ["{python}", "-m", module], "stop_timeout": 5.0, **extra}


def pictures_tree(bridge_env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    return [
        real("browser", "hosts.browser", sockets=["browser"]),  # handed down, as the default tree does (run as root,
        # the browser host goes apart and could not bind in the runtime dir itself)
        real("tldraw", "hosts.tldraw"),
        real("bridge", "bridge", env=bridge_env or {}),
    ]


ENV = {"CLANKIE_CHROMIUM_PATH": "/nonexistent/chromium", "CLANKIE_HEARTBEAT_SECONDS": "0.5"}


def test_agreement_ignores_children_that_have_not_reported() -> None:
    """Children that are down do not count as a disagreement; two different roots do."""
    assert agreement({"browser": "/a", "bridge": "/a", "service": None}) == {
        "agree": True,
        "by_child": {"browser": "/a", "bridge": "/a", "service": None},
    }
    assert agreement({"browser": "/a", "bridge": "/b"})["agree"] is False
    assert agreement({})["agree"] is True


def test_the_probe_picture_is_deterministic_and_names_its_host() -> None:
    """The same host always writes the same probe bytes; different hosts write different ones."""
    assert probe_png("browser") == probe_png("browser")
    assert probe_png("browser") != probe_png("tldraw")
    assert probe_png("tldraw").startswith(b"\x89PNG\r\n\x1a\n")


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_agreeing_tree_status_shows_one_root_and_doctor_passes_every_pair(
    tmp_path: Path, runtime_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With no override every child reports <state>/attachments, status agrees, and both pairs pass."""
    with supervisor(tmp_path, runtime_dir, pictures_tree(), env=ENV, ready_timeout=40) as sup:
        root = str(sup.state / "attachments")
        sock = ["--socket", str(sup.sock)]
        assert ctl.main([*sock, "status", "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["attachment_root"] == {"agree": True, "by_child": {"browser": root, "tldraw": root, "bridge": root}}
        assert all(c["attachment_root"] == root for c in doc["children"])
        assert ctl.main([*sock, "status"]) == 0
        assert "DISAGREE" not in capsys.readouterr().out

        assert ctl.main([*sock, "doctor", "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["ok"] is True
        assert [(c["writer"], c["reader"], c["ok"]) for c in report["checks"]] == [
            ("browser", "bridge", True),
            ("tldraw", "bridge", True),
        ]
        for check in report["checks"]:
            digest, sub, ext = parse_ref(check["ref"])
            written = Path(root, sub, f"{digest}.{ext}").read_bytes()
            assert written == probe_png(check["writer"]) and hashlib.sha256(written).hexdigest() == digest
        health = {h["name"]: h for h in report["health"]}
        assert [health[f"child:{n}"]["status"] for n in ("browser", "tldraw", "bridge")] == ["ok"] * 3
        assert health["metrics"]["status"] == "warn" and "CLANKIE_METRICS_LISTEN" in health["metrics"]["fix"]
        assert health["discord"]["status"] == "warn" and "discord_token" in health["discord"]["fix"]  # local-only
        assert health["store"]["status"] == "ok" and health["disk"]["status"] == "ok"
        assert "provider" not in health and "budget" not in health  # no service in this tree
        assert all(h["fix"] for h in report["health"] if h["status"] != "ok")
        assert not list((sup.state).glob(".doctor-*"))  # the store's probe file is gone
        assert ctl.main([*sock, "doctor"]) == 0
        text = capsys.readouterr().out
        assert re.search(r"^ok +pictures +browser -> bridge: sha256", text, re.M), text
        assert re.search(r"^warn +metrics .*\n +fix: set CLANKIE_METRICS_LISTEN", text, re.M), text
        assert re.search(r"^doctor: \d+ ok, 2 warn, 0 fail; 2/2 picture pairs pass$", text, re.M), text


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_bridge_reading_another_root_is_flagged_by_status_and_failed_by_doctor(
    tmp_path: Path, runtime_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The bridge started with its own CLANKIE_DISCORD_ATTACHMENT_ROOT: status warns loudly, doctor fails both pairs (exit 1)."""
    elsewhere = tmp_path / "elsewhere"
    tree = pictures_tree({"CLANKIE_DISCORD_ATTACHMENT_ROOT": str(elsewhere)})
    with supervisor(tmp_path, runtime_dir, tree, env=ENV, ready_timeout=40) as sup:
        root = str(sup.state / "attachments")
        sock = ["--socket", str(sup.sock)]
        assert ctl.main([*sock, "status", "--json"]) == 0  # a disagreement is reported, not an error
        doc = json.loads(capsys.readouterr().out)
        assert doc["attachment_root"] == {
            "agree": False,
            "by_child": {"browser": root, "tldraw": root, "bridge": str(elsewhere)},
        }
        assert ctl.main([*sock, "status"]) == 0
        out, err = capsys.readouterr()
        assert "WARNING: ATTACHMENT ROOTS DISAGREE" in out and "WARNING: ATTACHMENT ROOTS DISAGREE" in err
        assert f"bridge   {elsewhere}" in out
        assert ctl.main([*sock, "status", "bridge", "--json"]) == 0  # one child shown, still judged over the tree
        assert json.loads(capsys.readouterr().out)["attachment_root"]["agree"] is False

        assert ctl.main([*sock, "doctor", "--json"]) == 1
        report = json.loads(capsys.readouterr().out)
        assert report["ok"] is False
        for check in report["checks"]:
            assert check["ok"] is False
            assert check["code"] in ("artifact_root_unavailable", "artifact_missing")
            assert (check["writer_root"], check["reader_root"]) == (root, str(elsewhere))

        # A stale copy of the (deterministic) probe under the bridge's root must not make the pair pass.
        for check in report["checks"]:
            digest, sub, ext = parse_ref(check["ref"])
            (elsewhere / sub).mkdir(parents=True, exist_ok=True)
            (elsewhere / sub / f"{digest}.{ext}").write_bytes(probe_png(check["writer"]))
        assert ctl.main([*sock, "doctor"]) == 1
        text = capsys.readouterr().out
        assert re.search(r"^fail +pictures +browser -> bridge: attachment_root_mismatch$", text, re.M), text
        assert "fix: give every child the same CLANKIE_DISCORD_ATTACHMENT_ROOT" in text
        assert "0/2 picture pairs pass" in text


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_doctor_fails_a_pair_whose_host_is_stopped(
    tmp_path: Path, runtime_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A stopped tldraw host fails its pair as writer_not_running while the browser pair still passes."""
    with supervisor(tmp_path, runtime_dir, pictures_tree(), env=ENV, ready_timeout=40) as sup:
        sock = ["--socket", str(sup.sock)]
        assert ctl.main([*sock, "stop", "tldraw"]) == 0
        capsys.readouterr()
        assert ctl.main([*sock, "doctor", "--json"]) == 1
        checks = {c["writer"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
        assert checks["browser"]["ok"] is True
        assert checks["tldraw"]["ok"] is False and checks["tldraw"]["code"] == "writer_not_running"
