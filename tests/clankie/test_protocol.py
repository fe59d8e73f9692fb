"""Envelope shapes and record validation at the receive boundary."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pydantic
import pytest

from clankie import protocol
from clankie.errors import RemoteProtocolError

REPO = Path(__file__).resolve().parents[2]


def test_requests_responses_and_notifications_parse() -> None:
    """The three msgpack-RPC shapes are recognised."""
    assert protocol.parse_envelope([0, 7, "m", {}]) == protocol.Request(7, "m", {})
    assert protocol.parse_envelope([1, 7, None, {"x": 1}]) == protocol.Response(7, None, {"x": 1})
    assert protocol.parse_envelope([2, "m", {}]) == protocol.Notification("m", {})


@pytest.mark.parametrize(
    ("raw", "msgid"),
    [
        ([0, 7, "", {}], 7),
        ([0, 7, 5, {}], 7),
        ([0, 7, "m"], 7),
        ([0, -1, "m", {}], None),
        ([0, True, "m", {}], None),
        ([9, 1, 2, 3], None),
        ("hello", None),
        ([], None),
        ([1, 3, {"no": "code"}, None], None),
    ],
)
def test_bad_envelopes_are_refused_keeping_any_readable_msgid(raw: object, msgid: int | None) -> None:
    """A bad envelope is the peer's fault; its msgid is kept when one can be read."""
    with pytest.raises(protocol.BadEnvelope) as info:
        protocol.parse_envelope(raw)
    assert info.value.msgid == msgid


def test_records_forbid_unknown_keys_and_bad_types() -> None:
    """A record with an unexpected key or a wrongly typed field is refused."""
    good = {"delivery_id": "d", "room": {"channel_id": "1"}, "trigger": {"message_id": "2", "author": {"id": "3"}, "text": "hi"}}
    assert isinstance(protocol.validate(protocol.TurnSubmit, good), protocol.TurnSubmit)
    with pytest.raises(RemoteProtocolError, match="extra"):
        protocol.validate(protocol.TurnSubmit, {**good, "extra": 1})
    with pytest.raises(RemoteProtocolError, match="trigger"):
        protocol.validate(protocol.TurnSubmit, {**good, "trigger": {"message_id": "2"}})
    with pytest.raises(RemoteProtocolError):
        protocol.validate(protocol.TurnSubmit, ["not", "a", "map"])


def test_validation_errors_name_fields_but_never_echo_content() -> None:
    """The error message says which field is wrong without repeating what was sent."""
    with pytest.raises(RemoteProtocolError) as info:
        protocol.validate(protocol.TextUpdate, {"delivery_id": "d", "text": "secret " * 200})
    assert "text" in str(info.value)
    assert "secret" not in str(info.value)


def test_records_are_frozen() -> None:
    """Records cannot be changed after validation."""
    hello = protocol.Hello(role="bridge", pid=1, protocol=1)
    with pytest.raises(pydantic.ValidationError):
        hello.role = "x"


def test_every_method_names_records() -> None:
    """Each method in the table takes a record and answers with a record or nothing."""
    for role, methods in protocol.METHODS.items():
        for name, method in methods.items():
            assert issubclass(method.params, protocol.Record), (role, name)
            assert method.result is None or issubclass(method.result, protocol.Record), (role, name)


BUILT = """
import json
from clankie import protocol
from clankie.protocol.base import Record

def every(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from every(sub)

records = [Record, *every(Record)]
at_import = sum(cls.__pydantic_complete__ for cls in records)
protocol.Hello.model_validate({"role": "bridge", "pid": 1, "protocol": 1})
after_hello = sorted(cls.__name__ for cls in records if cls.__pydantic_complete__)
protocol.build_records()
print(json.dumps([len(records), at_import, after_hello, sum(cls.__pydantic_complete__ for cls in records)]))
"""


def test_records_build_on_first_use_and_build_records_builds_them_all() -> None:
    """A fresh interpreter builds no record's validator at import, one on its first use, every one on build_records."""
    done = subprocess.run([sys.executable, "-c", BUILT], capture_output=True, text=True, cwd=REPO, timeout=60, check=False,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]
    count, at_import, after_hello, built = json.loads(done.stdout)
    assert count > 50
    assert (at_import, after_hello, built) == (0, ["Hello"], count)
