"""Prints compare.sh's table from its JSON lines: medians per label, and
Lockstep's best configuration per workload against every peer run."""
import json
import statistics
import sys
from collections import defaultdict

runs = defaultdict(list)
for line in open(sys.argv[1]):
    r = json.loads(line)
    runs[r["label"]].append(r)


def median(label, key):
    values = [r[key] for r in runs[label] if r.get(key) is not None]
    return statistics.median(values) if values else None


def accuracies(label):
    return [r["test_accuracy"] for r in runs[label] if r.get("test_accuracy") is not None]


workloads = []
for label in runs:
    w = label.split()[0]
    if w not in workloads:
        workloads.append(w)

for w in workloads:
    labels = [lab for lab in runs if lab.split()[0] == w]
    first = runs[labels[0]][0]
    print(f"\n## {w}" + (f" (batch {first['batch']})" if "batch" in first else ""))
    if w == "allreduce":
        sizes = sorted(first["allreduce_MBps"].keys(), key=float)
        print("| system | mode | " + " | ".join(f"{s} MiB MB/s" for s in sizes) + " |")
        print("|---|---|" + "---|" * len(sizes))
        for lab in labels:
            cells = [statistics.median(r["allreduce_MBps"][s] for r in runs[lab]) for s in sizes]
            print(f"| {runs[lab][0]['system']} | {runs[lab][0]['mode']} | "
                  + " | ".join(f"{c:,.0f}" for c in cells) + " |")
        continue
    best = max((lab for lab in labels if "lockstep" in lab),
               key=lambda lab: median(lab, "samples_per_s"))
    best_rate = median(best, "samples_per_s")
    best_acc = accuracies(best)
    # Each system's fastest configuration in this run (by median).
    fastest = {}
    for lab in labels:
        name = lab.split()[1]
        if name not in fastest or median(lab, "samples_per_s") > median(fastest[name], "samples_per_s"):
            fastest[name] = lab
    print("| system | mode | samples/s median (min–max; fastest of each system in bold) | test accuracy "
          "| Lockstep's accuracy - this (pp) | peak RSS MiB | Lockstep best / this |")
    print("|---|---|---|---|---|---|---|")
    for lab in labels:
        rate, acc = median(lab, "samples_per_s"), accuracies(lab)
        rates = [r["samples_per_s"] for r in runs[lab] if r.get("samples_per_s") is not None]
        digits = 1 if rate < 100 else 0  # MobileNetV2: a few per second
        spread = (f"{rate:,.{digits}f} ({min(rates):,.{digits}f}–{max(rates):,.{digits}f})"
                  if rates else "-")
        if fastest.get(lab.split()[1]) == lab:
            spread = f"**{spread}** (fastest)"
        r0 = runs[lab][0]
        if not acc:
            acc_s = delta = "-"
        elif len(acc) == 1:
            acc_s, delta = f"{acc[0]:.4f}", f"{100 * (statistics.mean(best_acc) - acc[0]):+.2f}"
        else:
            acc_s = f"{statistics.mean(acc):.4f} ± {statistics.stdev(acc):.4f} ({len(acc)} runs)"
            delta = f"{100 * (statistics.mean(best_acc) - statistics.mean(acc)):+.2f}"
        print(f"| {r0['system']} | {r0['mode']} | {spread} | {acc_s} | {delta} | "
              f"{median(lab, 'peak_rss_mib'):,.0f} | {best_rate / rate:.2f} |")
    print()
    for name, lab in fastest.items():
        if name == "lockstep":
            continue
        rates = [r["samples_per_s"] for r in runs[lab]]
        best_rates = [r["samples_per_s"] for r in runs[best]]
        print(f"- Lockstep's best ({runs[best][0]['mode']}) against {name} at its fastest here "
              f"({runs[lab][0]['mode']}): {best_rate / median(lab, 'samples_per_s'):.2f}x "
              f"(over the rounds {min(best_rates) / max(rates):.2f}-{max(best_rates) / min(rates):.2f}x)")
