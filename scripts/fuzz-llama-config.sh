#!/usr/bin/env bash
# The libFuzzer target over the Hugging Face config.json reader, run for the given number of seconds (default 60) from the seed corpus
# tests/fuzz/corpus_llama_config. See scripts/fuzz.sh.
#   scripts/fuzz-llama-config.sh [seconds] [extra libFuzzer flags...]
exec "$(dirname "${BASH_SOURCE[0]}")/fuzz.sh" llama_config "$@"
