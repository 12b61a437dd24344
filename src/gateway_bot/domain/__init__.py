"""The bottom layer: channel-neutral messages, task lifecycle and the state's records.

Plain data every other package may import and which imports none of them, so the layers
above (sandbox, agents, state, core, channels) never form a cycle (import-linter checks).
"""
