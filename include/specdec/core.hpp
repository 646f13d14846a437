// specdec — the torch-free sampling core in one include.
#pragma once

#include "specdec/sampling/block.hpp"
#include "specdec/sampling/chain.hpp"
#include "specdec/sampling/config.hpp"
#include "specdec/sampling/logits.hpp"
#include "specdec/sampling/params.hpp"
#include "specdec/sampling/philox.hpp"
#include "specdec/sampling/residual.hpp"
#include "specdec/sampling/status.hpp"
#include "specdec/sampling/theory.hpp"
#include "specdec/sampling/tree.hpp"
