"""Print the "Results" section of models/k3-tiny/README.md from a training log.

Usage: python scripts/tiny_k3/report.py [models/k3-tiny/train_log.json]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "models" / "k3-tiny" / "train_log.json"
    log = json.loads(path.read_text())
    s = log["settings"]
    d = log["data"]
    curve = log["loss_curve"]
    print("## Results\n")
    print(
        f"Trained on {log['device']} (torch {log['torch']}) for {log['train_seconds']:.0f} s of training "
        f"({log['total_seconds']:.0f} s in all): {log['steps']} steps, {log['tokens_seen'] / 1e6:.0f}M tokens "
        f"seen (header counted once per batch), batches of <= {s['batch_tokens']} body tokens, peak lr {s['lr']}, "
        f"{log['params'] / 1e6:.2f}M parameters. Data: {d['episodes']} episodes, {d['tokens_total'] / 1e6:.0f}M "
        f"tokens ({d['tokens_target'] / 1e6:.1f}M of them trained on), sequence length median "
        f"{d['length']['50']} / max {d['length']['100']}.\n"
    )
    print("Loss (mean cross-entropy on assistant tokens over the last 25 steps):\n")
    print("| step | time (s) | loss | lr |")
    print("|---:|---:|---:|---:|")
    picks = sorted({round(i * (len(curve) - 1) / 11) for i in range(12)}) if curve else []
    for i in picks:
        r = curve[i]
        print(f"| {r['step']} | {r['time_s']:.0f} | {r['loss']:.4f} | {r['lr']:.2e} |")
    print("\nHeld-out first-turn accuracy, synthetic group (unseen file names and words; exact tool names "
          "and arguments; intermediate evaluations on a sample):\n")
    kinds = sorted(log["final_eval"]["by_kind"])
    print("| step | tasks | all | " + " | ".join(kinds) + " |")
    print("|---:|---:|---:|" + "---:|" * len(kinds))
    for e in [*log["evals"], log["final_eval"]]:
        cells = " | ".join(f"{e['by_kind'].get(k, float('nan')):.3f}" for k in kinds)
        print(f"| {e['step']} | {e['n']} | {e['accuracy']:.3f} | {cells} |")
    f = log["final_eval"]
    if "by_group" in f:
        groups = sorted(f["by_group"])
        print("\nBy group (held-out: `synthetic` pools, `realistic` common names and real lines, "
              "`sample_workspace` = examples/sample_workspace) and turn (`first`: tool names and arguments "
              "of the first turn; `next`: the turn after the first tool results, i.e. the copied line in "
              "write_file's content or in the answer):\n")
        print("| step | " + " | ".join(groups) + " |")
        print("|---:|" + "---:|" * len(groups))
        for e in [*log["evals"], f]:
            cells = " | ".join(f"{e.get('by_group', {}).get(g, float('nan')):.3f}" for g in groups)
            print(f"| {e['step']} | {cells} |")
    if "by_shape" in f:
        print("\nBy shape, every evaluated turn (first and next) of all three groups:\n")
        print("| shape | right | of | rate |")
        print("|---|---:|---:|---:|")
        for k, (right, n) in f["by_shape"].items():
            print(f"| {k} | {right} | {n} | {right / n:.1%} |")
    max_new = s.get("max_new", 200)
    print(f"\nFinal: {f['accuracy']:.1%} of {f['n']} held-out tasks; {f['ended']:.1%} of the turns ended "
          f"with `<|end_of_msg|>` within {max_new} tokens.")


if __name__ == "__main__":
    main()
