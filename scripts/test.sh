#!/usr/bin/env bash
# Set up, then lint, type-check and run every test (real CLI, real servers).
#
# With no arguments the suite runs as two pytest sessions at once, each with its own
# temp dir, podman service socket, Synapse, Dovecot and fake APIs (every fixture picks free
# ports and names its podman objects per process): most of a test's time is spent waiting
# on servers and containers, so two sessions finish in a little over half the time. With
# arguments, one session runs exactly what they name.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/env.sh
uv run --frozen ruff check src tests bench
uv run --frozen ruff format --check src tests bench
uv run --frozen mypy
uv run --frozen lint-imports
if [ "$#" -gt 0 ]; then
  exec uv run --frozen pytest "$@"
fi
shopt -s nullglob
first=(tests/core tests/test_matrix_*.py tests/test_email_*.py tests/test_security_email.py
       tests/test_approval*.py tests/test_slack_*.py tests/test_gemini_backend.py
       tests/test_warm_session_leaks.py tests/test_bad_input_corpus.py
       tests/test_warm_sessions_podman.py tests/test_sandbox_lifecycle.py
       tests/test_agent_backends_podman.py tests/test_codex_backend.py
       tests/test_mail_continuation.py tests/test_schedules_channels.py
       tests/test_dashboard_browser.py tests/test_sandbox_hosts.py
       tests/test_action_approvals_channels.py tests/test_action_approvals_podman.py
       tests/test_faults_*.py)
second=()
for file in tests/test_*.py; do
  case " ${first[*]} " in *" $file "*) ;; *) second+=("$file") ;; esac
done
log=$(mktemp)
uv run --frozen pytest --basetemp=/tmp/gateway-bot-tests-1 "${first[@]}" >"$log" 2>&1 &
one=$!
status=0
uv run --frozen pytest --basetemp=/tmp/gateway-bot-tests-2 "${second[@]}" || status=$?
wait "$one" || status=$?
echo "===== the other session (${first[*]}) ====="
cat "$log"
rm -f "$log"
exit "$status"
