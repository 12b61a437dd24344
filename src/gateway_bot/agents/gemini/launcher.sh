#!/bin/sh
# Gemini CLI in the agent image: the host's node running the bundle copied beside this file.
exec /usr/local/bin/node /usr/local/bin/gemini-cli/bundle/gemini.js "$@"
