"""Coverage of the prediction-powered interval for a judge's pass rate (eval_pipeline.grading.agreement).

A scripted judge of known error rates (misses a true pass with probability `miss`, passes a true
failure with probability `lenient`) grades N unlabelled and n labelled answers whose true pass
rate is `rate`; over many seeds, prints how often the PPI interval, the judge-only interval and
the labelled-only (classical) interval cover the true rate, and their mean widths. No network.

    .venv/bin/python bench/judge_ppi_coverage.py [--seeds 2000] [--n 100] [--big-n 2000]
"""

import argparse
import math

import numpy as np

from eval_pipeline.grading.agreement import ppi_mean_interval


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=2000)
    parser.add_argument("--n", type=int, default=100, help="labelled (calibration) answers")
    parser.add_argument("--big-n", type=int, default=2000, help="answers graded by the judge alone")
    parser.add_argument("--rate", type=float, default=0.6)
    parser.add_argument("--miss", type=float, default=0.05)
    parser.add_argument("--lenient", type=float, default=0.30)
    parser.add_argument("--confidence", type=float, default=0.95)
    a = parser.parse_args()
    z = 1.959963984540054 if a.confidence == 0.95 else None
    counts = {"ppi": 0, "judge only": 0, "labelled only": 0}
    widths = {k: 0.0 for k in counts}
    for seed in range(a.seeds):
        rng = np.random.default_rng(seed)
        truth_l, truth_u = (rng.random(a.n) < a.rate).astype(float), (rng.random(a.big_n) < a.rate).astype(float)

        def judge(truth):
            u = rng.random(len(truth))
            return np.where(truth == 1, u >= a.miss, u < a.lenient).astype(float)

        f_l, f_u = judge(truth_l), judge(truth_u)
        got = ppi_mean_interval(f_u.tolist(), f_l.tolist(), truth_l.tolist(), confidence=a.confidence)
        half = (z or 1.96) * math.sqrt(f_u.var(ddof=1) / a.big_n)
        intervals = {"ppi": (got["low"], got["high"]), "judge only": (f_u.mean() - half, f_u.mean() + half),
                     "labelled only": (got["classical"]["low"], got["classical"]["high"])}
        for k, (low, high) in intervals.items():
            counts[k] += low <= a.rate <= high
            widths[k] += high - low
    judge_rate = a.rate * (1 - a.miss) + (1 - a.rate) * a.lenient
    print(f"true rate {a.rate}, judge's own rate {judge_rate:.3f} (miss {a.miss}, lenient {a.lenient}); "
          f"n={a.n} labelled, N={a.big_n} judged; {a.seeds} seeds; nominal {a.confidence}")
    for k in counts:
        print(f"{k:>14}: coverage {counts[k] / a.seeds:.3f}, mean width {widths[k] / a.seeds:.3f}")


if __name__ == "__main__":
    main()
