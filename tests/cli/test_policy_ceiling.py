#!/usr/bin/env python3
"""bench/policy_ceiling.py on hand-made runs whose replays are worked out below (ctest: policy_ceiling)."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "bench", "policy_ceiling.py")

# r(1..4): 1-row forward 1, 2 rows 1.1, 3 rows 1.3, 4 rows 1.6; head steps cold 0.1, warm 0.05.
PROFILE = [1.0, 1.1, 1.3, 1.6]
COLD, WARM = 0.1, 0.05


def write_run(d, name, steps, temperature=0.0, adaptive=False, g=3):
    run = {"temperature": temperature, "adaptive": adaptive, "num_speculative_tokens": g}
    with open(os.path.join(d, name + ".json"), "w") as f:
        json.dump(run, f)
    with open(os.path.join(d, name + ".trace.jsonl"), "w") as f:
        for accepted, conf in steps:
            f.write(json.dumps({"proposed": len(conf), "verified": len(conf), "accepted": accepted,
                                "confidence": conf}) + "\n")


def write_tree_run(d, name, steps, g=3):
    with open(os.path.join(d, name + ".json"), "w") as f:
        json.dump({"temperature": 0.0, "adaptive": False, "num_speculative_tokens": g}, f)
    with open(os.path.join(d, name + ".trace.jsonl"), "w") as f:
        for parents, conf, accepted in steps:
            f.write(json.dumps({"proposed": len(conf), "verified": len(conf), "accepted": len(accepted), "tree": True,
                                "parents": parents, "confidence": conf, "accepted_nodes": accepted}) + "\n")


def write_measured(d, base_s, spec_s):
    j = {"cost_profile": PROFILE, "baseline": {"tokens": 100, "tokens_per_second": 100 / base_s},
         "speculative": {"tokens": 100, "tokens_per_second": 100 / spec_s}}
    with open(os.path.join(d, "m.json"), "w") as f:
        json.dump(j, f)


def run(args):
    return subprocess.run([sys.executable, SCRIPT] + args, capture_output=True, text=True)


def row(out, label):
    for line in out.splitlines():
        if line.startswith("| " + label):
            return float(line.rsplit("|", 2)[1].strip().rstrip("x"))
    raise AssertionError(f"no row '{label}' in:\n{out}")


class PolicyCeiling(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.runs = os.path.join(self.tmp.name, "runs")
        self.meas = os.path.join(self.tmp.name, "meas")
        os.makedirs(self.runs)
        os.makedirs(self.meas)
        write_measured(self.meas, base_s=3.0, spec_s=2.0)

    def tearDown(self):
        self.tmp.cleanup()

    def ceiling(self, *extra):
        p = run(["--runs", self.runs, "--measured", self.meas, "--cold", str(COLD), "--warm", str(WARM)] + list(extra))
        self.assertEqual(p.returncode, 0, p.stderr)
        return p.stdout

    def test_replays(self):
        # Two steps of 3 drafts: the first accepted 3 (confidences 0.9, 0.9, 0.9), the second none (0.1, 0.5, 0.5).
        write_run(self.runs, "a", [(3, [0.9, 0.9, 0.9]), (0, [0.1, 0.5, 0.5])])
        out = self.ceiling()
        # oracle: 4 tokens for r(4) + cold + 2 warm = 1.8, then a plain step (1 token for 1): 5 / 2.8
        self.assertAlmostEqual(row(out, "oracle"), round(5 / 2.8, 2))
        # fixed g = 1: (2 + 1) tokens for 2 (r(2) + cold) = 2.4; g = 2: (3 + 1) / 2 (1.3 + 0.15) = 4 / 2.9 = 1.379;
        # g = 3: (4 + 1) / 2 (1.6 + 0.2) = 5 / 3.6 = 1.389, the best
        self.assertIn("best fixed g (g = 3)", out)
        self.assertAlmostEqual(row(out, "best fixed g"), round(5 / 3.6, 2))
        # the confidence cut at bound 0.15: step 1 keeps all 3 (products 0.9, 0.81, 0.729); E(d) / r(d + 1) = 1/1,
        # 1.9/1.1, 2.71/1.3, 3.439/1.6: d = 3, 4 tokens for 1.8. Step 2 stops at the first draft (0.1 < 0.15) after one
        # head step: d = 0, 1 token for r(1) + cold = 1.1. 5 / 2.9.
        self.assertAlmostEqual(row(out, "confidence cut"), round(5 / 2.9, 2))
        self.assertAlmostEqual(row(out, "measured"), 1.5)
        # free rows: the same decisions (d = 3, d = 0): (4 + 1) / (1 + 0.2 + 1 + 0.1)
        self.assertAlmostEqual(row(out, "what if: confidence cut"), round(5 / 2.3, 2))
        self.assertIn("steps by accepted drafts: 0:1 3:1", out)
        self.assertIn("tau 2.50", out)
        # a lower bound keeps step 2's chain (0.1, 0.05, 0.025 >= 0.01): three head steps, and the cut verifies
        # none of it (E(1) / r(2) = 1.1 / 1.1 = 1 ties d = 0, the shorter wins): 1 token for 1 + 0.1 + 2 * 0.05 = 1.2
        out = self.ceiling("--bound", "0.01")
        self.assertAlmostEqual(row(out, "confidence cut"), round(5 / 3.0, 2))

    def test_trees(self):
        # One tree: nodes 1, 2 under the root, node 3 under node 1 (path confidences 0.6, 0.3, 0.3); the target accepts
        # nodes 1 then 3.
        write_tree_run(self.runs, "t", [([0, 0, 1], [0.6, 0.3, 0.5], [1, 3])])
        out = self.ceiling()
        self.assertIn("tau 3.00 with every node verified", out)
        # oracle: nodes 1 and 3, 3 tokens for r(3) + cold + one deeper level's warm = 1.45
        self.assertAlmostEqual(row(out, "oracle"), round(3 / 1.45, 2))
        # the 2 best: nodes 1 and 2 (the tie at 0.3 goes to the lower index), node 3 cut: 2 tokens for r(3) + cold
        self.assertAlmostEqual(row(out, "the 2 best nodes"), round(2 / 1.4, 2))
        self.assertAlmostEqual(row(out, "the 3 best nodes"), round(3 / 1.75, 2))
        # by value: 1.6 / 1.1, 1.9 / 1.3 (the best), 2.2 / 1.6 -> the 2 best; by depth: depth 1 (the same two nodes)
        self.assertAlmostEqual(row(out, "each step's best n"), round(2 / 1.4, 2))
        self.assertAlmostEqual(row(out, "each step's best depth"), round(2 / 1.4, 2))
        write_run(self.runs, "a", [(1, [0.5, 0.5])])
        p = run(["--runs", self.runs, "--measured", self.meas, "--cold", "0.1", "--warm", "0.05"])
        self.assertEqual(p.returncode, 2)
        self.assertIn("chains and trees", p.stderr)

    def test_refusals(self):
        write_run(self.runs, "a", [(1, [0.5, 0.5])], temperature=0.7)
        p = run(["--runs", self.runs, "--measured", self.meas, "--cold", "0.1", "--warm", "0.05"])
        self.assertEqual(p.returncode, 2)
        self.assertIn("--runs", p.stderr)
        self.assertIn("temperature 0.7", p.stderr)
        write_run(self.runs, "a", [(1, [0.5, 0.5])], adaptive=True)
        p = run(["--runs", self.runs, "--measured", self.meas, "--cold", "0.1", "--warm", "0.05"])
        self.assertIn("adaptive", p.stderr)
        write_run(self.runs, "a", [(1, [0.5, 0.5])])
        p = run(["--runs", self.runs, "--measured", self.meas, "--cold", "-1", "--warm", "0.05"])
        self.assertEqual(p.returncode, 2)
        self.assertIn("--cold", p.stderr)
        p = run(["--runs", os.path.join(self.tmp.name, "nowhere"), "--measured", self.meas, "--cold", "0.1",
                 "--warm", "0.05"])
        self.assertIn("is not a directory", p.stderr)
        os.remove(os.path.join(self.runs, "a.trace.jsonl"))
        p = run(["--runs", self.runs, "--measured", self.meas, "--cold", "0.1", "--warm", "0.05"])
        self.assertIn("--trace", p.stderr)


if __name__ == "__main__":
    unittest.main()
