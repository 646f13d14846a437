#!/usr/bin/env bash
# The libFuzzer target over specdec-generate's prompt-file parser, run for the given number of seconds (default 60) from the seed corpus
# tests/fuzz/corpus_prompt_file. See scripts/fuzz.sh.
#   scripts/fuzz-prompt-file.sh [seconds] [extra libFuzzer flags...]
exec "$(dirname "${BASH_SOURCE[0]}")/fuzz.sh" prompt_file "$@"
