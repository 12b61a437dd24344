#!/bin/sh
# A trivial agent speaking Claude Code's stream-json: reads the prompt, answers at once.
# The benchmarks use it (agent.command, agent.max_warm_sessions: 0) where the agent's own
# time is not what is measured.
cat >/dev/null
id=00000000-0000-4000-8000-000000000000
printf '%s\n' \
  "{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"$id\",\"model\":\"trivial\"}" \
  "{\"type\":\"assistant\",\"message\":{\"content\":[{\"type\":\"text\",\"text\":\"bench-done\"}]}}" \
  "{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"result\":\"bench-done\",\"session_id\":\"$id\",\"num_turns\":1}"
