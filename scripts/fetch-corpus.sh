#!/usr/bin/env bash
# Installs the Debian packages whose texts `specdec-train data --corpus-packages` turns into training prompts (see
# models/TRAINING.md, "Corpus": each source, what is taken from it and its license). Needs root (apt-get); run once per
# machine. `--print` only lists the packages.
set -euo pipefail
packages=(
  python3.11-doc      # Python 3.11 documentation: reStructuredText sources of the tutorial, library reference, HOWTOs, FAQs
  fortunes            # fortune-mod data: quotations, literature, wisdom, humour (off-colour sets are separate packages)
  fortunes-min        # fortune-mod's default set
  wamerican           # /usr/share/dict/american-english word list
  wordnet-base        # WordNet 3.0 glosses: definitions and example sentences
  jargon-text         # The Jargon File (hacker slang), plain text
  debian-reference-en # Debian Reference (system administration guide), English
  doc-debian          # Debian FAQ, social contract, constitution and other project documents
  gnu-standards       # GNU coding standards and maintainer guide
  miscfiles           # GNU miscfiles: word lists, the GNU manifesto and other texts
)
if [[ "${1:-}" == "--print" ]]; then printf '%s\n' "${packages[@]}"; exit 0; fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${packages[@]}"
