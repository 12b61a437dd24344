"""File names a sender chooses, read as an attack on the inbox they are written to."""

from __future__ import annotations

from gateway_bot.domain.filenames import safe_filename


def test_a_device_name_with_a_space_before_its_extension_is_not_a_device_name() -> None:
    """``CON .txt``: the space went after the reserved-name check, leaving ``CON.txt``,
    which Windows opens as the console device when the workspace is checked out there."""
    for name in ("CON .txt", "nul. .pdf", "com1 .tar.gz", "LPT1 "):
        assert safe_filename(name).split(".")[0].lower() not in {"con", "nul", "com1", "lpt1"}
