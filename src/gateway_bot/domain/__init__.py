"""The bottom layer: channel-neutral messages, task lifecycle, the state's records, and
how durations and texts are shown (``display.py``).

Plain data every other package may import and which imports none of them, so the layers
above (sandbox, agents, state, core, channels) never form a cycle (import-linter checks).
"""
