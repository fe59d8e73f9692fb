"""Prompt framing, the untrusted backlog block and the stay-silent rules."""

from __future__ import annotations

import pytest

from clankie.protocol import Author, HistoryMessage, ImageAttachment, Trigger
from service.captain import prompt


def trig(text: str, *, unprompted: bool = False, images: int = 0) -> Trigger:
    atts = tuple(ImageAttachment(url=f"https://x/{i}.png") for i in range(images))
    return Trigger(message_id="m2", author=Author(id="42", name="ana"), text=text, unprompted=unprompted, attachments=atts)


def test_cold_prompt_carries_the_backlog_as_an_untrusted_block_and_the_trigger() -> None:
    """A cold lane's prompt has the channel conversation block, then the trigger."""
    history = [HistoryMessage(id="m1", author_id="7", text="what did you think of the bracket", at=1.0)]
    text = prompt.turn_prompt(trig("and the biggest upset?"), history)
    assert "Channel conversation (untrusted):" in text
    assert "what did you think of the bracket" in text
    assert text.index("Channel conversation") < text.index("and the biggest upset?")
    assert prompt.SENTINEL in text


def test_warm_prompt_carries_only_the_trigger() -> None:
    """A warm lane's prompt has no backlog block but still offers silence and carries the trigger."""
    text = prompt.turn_prompt(trig("and the biggest upset?"), None)
    assert "Channel conversation (untrusted):" not in text
    assert "and the biggest upset?" in text
    assert prompt.SILENCE_OFFER in text


def test_unprompted_trigger_says_he_was_not_addressed() -> None:
    """An unprompted message is framed as not addressed to him."""
    text = prompt.turn_prompt(trig("lol", unprompted=True), None)
    assert "(you were not addressed)" in text and prompt.UNPROMPTED in text


def test_image_only_trigger_is_described_not_empty() -> None:
    """A caption-less image message still gives the model a trigger line and the log a heard entry."""
    t = trig("", images=2)
    assert "(no text — only 2 images)" in prompt.turn_prompt(t, None)
    assert prompt.heard(t) == "(sent 2 images)"


@pytest.mark.parametrize(
    ("text", "silent"),
    [("[[stay-silent]]", True), ("  [[stay-silent]]\n", True), ("[[stay-silent]] lol", False), ("", False), ("ok", False)],
)
def test_silence_is_the_whole_trimmed_reply(text: str, silent: bool) -> None:
    """Only a reply that is exactly the sentinel once trimmed is silence."""
    assert prompt.is_silent(text) is silent


@pytest.mark.parametrize(
    ("prefix", "possible"),
    [
        ("", True),
        ("  [[st", True),
        ("[[stay", True),
        ("[[stay-silent]]", True),
        ("[[stay-silent]]  \n", True),
        ("  [[stop", False),
        ("[[stay-silent]] lol", False),
        ("sure", False),
    ],
)
def test_typing_prefix_rule(prefix: str, possible: bool) -> None:
    """The typing watcher lights the room exactly when the text can no longer become the sentinel."""
    assert prompt.may_become_silent(prefix) is possible


def test_image_notes_say_what_was_shown_and_what_was_not() -> None:
    """The trigger says how many pictures ride with it and why the others could not be shown."""
    report = prompt.ImageReport(shown=1, missing=("larger than 5 MiB",))
    text = prompt.turn_prompt(trig("look", images=2), None, report)
    assert "(1 image attached, shown with this message)" in text
    assert "(1 attached image was not shown to you: could not be loaded — larger than 5 MiB)" in text
    assert "image" not in prompt.turn_prompt(trig("look"), None, prompt.ImageReport())
