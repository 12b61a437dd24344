"""The Pico the dashboard serves names no data: URL: the CSP (``img-src 'self'``) refuses
them, and a page whose own stylesheet came late fetched Pico's icons and logged an error
(a CI failure of the look test on a busy machine). Every icon is one of our files."""

from __future__ import annotations

import re
from importlib import resources

from gateway_bot.dashboard.assets import ICONS, _pico_with_icon_files


def test_the_served_pico_names_only_icon_files() -> None:
    vendored = (
        resources.files("gateway_bot.dashboard").joinpath("static", "vendor", "pico.min.css")
    ).read_text()
    assert "data:image" in vendored, "the vendored file is as published"
    served = _pico_with_icon_files(vendored)
    assert "data:" not in served
    named = set(re.findall(r'url\("/static/icons/([a-z-]+)\.svg"\)', served))
    assert named == set(ICONS)
