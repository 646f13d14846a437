#!/usr/bin/env bash
# The libFuzzer target over the GGUF parser, dequantiser, LlamaConfig reader and tokenizer built from GGUF metadata, run for the
# given number of seconds (default 60) from the seed corpus tests/fuzz/corpus_gguf. See scripts/fuzz.sh.
#   scripts/fuzz-gguf.sh [seconds] [extra libFuzzer flags...]
exec "$(dirname "${BASH_SOURCE[0]}")/fuzz.sh" gguf "$@"
