#!/usr/bin/env bash
# The libFuzzer target over the ChatML chat template (template source and messages), run for the given number of seconds (default 60) from the seed corpus
# tests/fuzz/corpus_chat_template. See scripts/fuzz.sh.
#   scripts/fuzz-chat-template.sh [seconds] [extra libFuzzer flags...]
exec "$(dirname "${BASH_SOURCE[0]}")/fuzz.sh" chat_template "$@"
