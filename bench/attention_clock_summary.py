"""Mean SM clock and power per phase of `attn_bench clock` (bench/attention.cpp, clock_probe).

Joins the '[clock] start <unix seconds> ...' lines of the benchmark log with an nvidia-smi log taken alongside
(`nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 100`, UTC
timestamps) and prints each phase's TFLOP/s with the mean SM clock (MHz) and board power (W) inside it (the first
0.2 s of a phase left out). Used by bench/attention_run.sh (ATTN_CLOCK=1).
Usage: python3 bench/attention_clock_summary.py BENCH_LOG NVIDIA_SMI_LOG
"""
import datetime
import sys


def main():
    samples = []
    for line in open(sys.argv[2]):
        f = [x.strip() for x in line.split(",")]
        try:
            t = datetime.datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=datetime.timezone.utc)
            samples.append((t.timestamp(), float(f[1].split()[0]), float(f[2].split()[0])))
        except (ValueError, IndexError):
            continue  # header or a malformed line
    phases = []
    for line in open(sys.argv[1]):
        if line.startswith("[clock] start "):
            f = line.split()
            phases.append((float(f[2]), " ".join(f[3:])))
    for i, (t0, what) in enumerate(phases):
        t1 = phases[i + 1][0] if i + 1 < len(phases) else t0 + 1.6
        sel = [s for s in samples if t0 + 0.2 <= s[0] < t1 - 0.1]
        if not sel:
            print(f"{what}: no nvidia-smi samples")
            continue
        mhz = sum(s[1] for s in sel) / len(sel)
        watt = sum(s[2] for s in sel) / len(sel)
        print(f"{what}: SM {mhz:.0f} MHz, {watt:.0f} W ({len(sel)} samples)")


if __name__ == "__main__":
    main()
