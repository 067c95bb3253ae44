#!/usr/bin/env python3
"""Compares a restarted (or shrunk) job's --step-log with an uninterrupted
job's, step by step (issue #40's goal: no step trained twice into the
weights, none skipped, the data position after a restart exactly the
backup's).

    step_losses.py REFERENCE RUN [--tolerance T]

REFERENCE must hold steps 1..N once each, in order. RUN is what a job
that failed and went on appended: runs of consecutive steps, each after the
first starting again at a step not past where the one before ended (it
resumed from a backup, redoing the steps after it). Every line of RUN must
name a step of REFERENCE with the same epoch and the same loss — the same
17 digits with no tolerance (bitwise), else within T relative — and the
last run must end at N. Prints what it found; exits 1 naming the first
difference.
"""
import sys


def read(path):
    rows = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line or line == "epoch,step,loss":
                continue
            parts = line.split(",")
            if len(parts) != 3:
                sys.exit(f"{path}:{number}: expected epoch,step,loss, got {line!r}")
            rows.append((int(parts[0]), int(parts[1]), parts[2], number))
    if not rows:
        sys.exit(f"{path}: no steps")
    return rows


def main():
    args = sys.argv[1:]
    tolerance = 0.0
    if "--tolerance" in args:
        at = args.index("--tolerance")
        tolerance = float(args[at + 1])
        del args[at:at + 2]
    if len(args) != 2:
        sys.exit(__doc__)
    reference, run = read(args[0]), read(args[1])
    steps = [r[1] for r in reference]
    if steps != list(range(1, len(steps) + 1)):
        sys.exit(f"{args[0]}: the steps are not 1..{len(steps)} once each")
    by_step = {r[1]: r for r in reference}
    runs = [[run[0]]]
    for row in run[1:]:
        if row[1] == runs[-1][-1][1] + 1:
            runs[-1].append(row)
        else:
            runs.append([row])
    if runs[0][0][1] != 1:
        sys.exit(f"{args[1]}: the job's first step is {runs[0][0][1]}, not 1")
    for before, after in zip(runs, runs[1:]):
        if after[0][1] > before[-1][1] + 1:
            sys.exit(f"{args[1]}:{after[0][3]}: after step {before[-1][1]} the job went on at "
                     f"step {after[0][1]}: steps {before[-1][1] + 1}..{after[0][1] - 1} skipped")
    if runs[-1][-1][1] != len(steps):
        sys.exit(f"{args[1]}: the job's last step is {runs[-1][-1][1]}, not {len(steps)}")
    worst = 0.0
    for epoch, step, loss, number in run:
        want = by_step.get(step)
        if want is None:
            sys.exit(f"{args[1]}:{number}: step {step} is not one of the uninterrupted job's")
        if epoch != want[0]:
            sys.exit(f"{args[1]}:{number}: step {step} in epoch {epoch}, the uninterrupted "
                     f"job's in epoch {want[0]}")
        if tolerance == 0.0:
            if loss != want[2]:
                sys.exit(f"{args[1]}:{number}: step {step}'s loss {loss}, the uninterrupted "
                         f"job's {want[2]} (bitwise equal expected)")
        else:
            got, expected = float(loss), float(want[2])
            diff = abs(got - expected) / max(1.0, abs(expected))
            worst = max(worst, diff)
            if diff > tolerance:
                sys.exit(f"{args[1]}:{number}: step {step}'s loss {loss}, the uninterrupted "
                         f"job's {want[2]} (relative difference {diff:.3g} > {tolerance:g})")
    resumes = "; ".join(
        f"after step {b[-1][1]} resumed at step {a[0][1]} ({b[-1][1] - a[0][1] + 1} steps "
        f"trained again from the backup)" for b, a in zip(runs, runs[1:]))
    how = "bitwise" if tolerance == 0.0 else f"within {worst:.2g} relative"
    print(f"step log: {len(steps)} steps, {len(runs) - 1} resume(s): {resumes or 'none'}; "
          f"every step's loss equal to the uninterrupted job's ({how}), none skipped")


if __name__ == "__main__":
    main()
