#!/usr/bin/env python3
"""Where a kernel's warps stall, per source location: ncu's per-SASS-address warp-stall samples mapped onto the
inline chains of the same cubin's disassembly.

Two steps, because the GPU machine has ncu and this one has the disassembler:
  compact (GPU machine): the CSV of `ncu -i R.ncu-rep --page source --csv --print-source sass` -> the rows that hold
      samples, with the address and the stall-reason columns only (small enough to come back from $OUT).
  map (here): that file + `nvdisasm -gi` of the kernel's cubin -> a table per megakernel op (the interpreter's
      `case Op::X:` line that the outermost inlined frame sits on) and the top source locations.
scripts/megakernel_profile.sh runs the first step; its header says how to get the cubin and nvdisasm for the second.

Usage:
  ncu_stalls.py compact SOURCE_PAGE.csv OUT.csv
  ncu_stalls.py map SAMPLES.csv KERNEL.sass [--interpreter src/megakernel/device/interpreter.cu] [--top N]
  ncu_stalls.py summary SAMPLES.csv [SAMPLES.csv ...]   (each build's share of every stall reason; `no_inst` is the
      instruction fetch, a +-1-2% term of the megakernel's step that follows its code's shape: bench/RESULTS.md
      session 27 call 5)
KERNEL.sass: `nvdisasm -gi -fun IDX x.cubin` (IDX: the kernel's symbol index, `readelf -s x.cubin`); it must be the
disassembly of the very binary that was profiled (the addresses are matched by their offset from the first sample).
"""
import argparse
import collections
import csv
import re
import sys

REASONS = ['long_sb', 'wait', 'barrier', 'short_sb', 'selected', 'not_selected', 'branch_resolving', 'no_inst',
           'math', 'dispatch', 'lg', 'mio']


def number(text):
    try:
        return float(text.replace(',', ''))
    except ValueError:  # empty or 'N/A'
        return 0.0


def compact(src, dst):
    rows = list(csv.reader(open(src, newline='')))
    hi = next(i for i, r in enumerate(rows) if 'Address' in r)
    head = rows[hi]
    ai = head.index('Address')
    keep = [i for i, c in enumerate(head) if c == '# Samples' or (c.startswith('stall_') and '(' not in c)]
    out = csv.writer(open(dst, 'w', newline=''))
    out.writerow(['Address'] + [head[i] for i in keep])
    total = collections.Counter()
    for r in rows[hi + 1:]:
        if len(r) <= max(keep + [ai]):
            continue
        vals = [number(r[i]) for i in keep]
        if any(vals):
            out.writerow([r[ai]] + [f'{v:g}' for v in vals])
            for i, v in zip(keep, vals):
                total[head[i]] += v
    for k, v in total.most_common():
        print(f'{k}: {v:g}')


def parse_sass(path):
    """offset -> inline chain (innermost first) as 'file:line' strings, for the instructions of the .text sections
    (nvdisasm also prints the debug sections' bytes with offsets of their own)."""
    rx = re.compile(r'//## File "([^"]+)", line (\d+)')
    ins, pending, chain, after_instr, in_text = {}, [], [], True, False
    for line in open(path):
        sec = re.match(r'\s*\.section\s+([^,\s]+)', line)
        if sec:
            in_text = sec.group(1).startswith('.text')
            continue
        if not in_text:
            continue
        m = rx.search(line)
        if m:
            if after_instr:
                pending = []
            pending.append(f'{m.group(1).split("/")[-1]}:{m.group(2)}')
            after_instr = False
            continue
        m = re.match(r'\s+/\*([0-9a-f]{4,})\*/\s', line)
        if m:
            if not after_instr:
                chain = pending
            after_instr = True
            ins[int(m.group(1), 16)] = chain
    return ins


def op_lines(interpreter):
    """interpreter.cu line -> op name, from its dispatch switch (`case Op::X: op_...`)."""
    names = {}
    pending = []  # bare `case Op::X:` labels (fall-through cases), named with the next line's op_ call
    for n, line in enumerate(open(interpreter), 1):
        m = re.search(r'case Op::(\w+):\s*(\w+)?', line)
        if m and not m.group(2):
            pending.append(m.group(1))
            continue
        if re.search(r'\bop_\w+\s*[<(]', line):
            names[f'interpreter.cu:{n}'] = '/'.join(pending + ([m.group(1)] if m else []))
        pending = []
    return names


def map_samples(samples, sass, interpreter, top):
    ins = parse_sass(sass)
    rows = list(csv.DictReader(open(samples)))
    base = min(int(r['Address'], 16) for r in rows)
    names = op_lines(interpreter)
    per_op = collections.defaultdict(collections.Counter)
    per_loc = collections.defaultdict(collections.Counter)
    missing = 0
    for r in rows:
        chain = ins.get(int(r['Address'], 16) - base)
        if chain is None:
            missing += 1
            continue
        op = names.get(chain[-1], chain[-1]) if chain else '?'
        for c in (per_op[op], per_loc[(op, ' <- '.join(chain[:3]))]):
            c['all'] += float(r['# Samples'])
            for k in REASONS:
                c[k] += float(r.get('stall_' + k, 0) or 0)
    total = sum(c['all'] for c in per_op.values())
    print(f'{len(rows)} sampled addresses, {missing} not in the disassembly, {total:g} samples; % of all samples;')
    print('op: the dispatch line of the outermost frame (code the compiler shared between ops counts for one of them)')
    print(f"{'op / location':24s} {'all':>6s} " + ' '.join(f'{k[:8]:>8s}' for k in REASONS))
    for op, c in sorted(per_op.items(), key=lambda kv: -kv[1]['all']):
        if c['all'] < 0.003 * total:
            continue
        print(f"{op[:24]:24s} {100 * c['all'] / total:6.1f} " + ' '.join(f'{100 * c[k] / total:8.2f}' for k in REASONS))
    print('--- top locations (innermost <- callers)')
    for (op, loc), c in sorted(per_loc.items(), key=lambda kv: -kv[1]['all'])[:top]:
        first = sorted(((c[k], k) for k in REASONS), reverse=True)[:3]
        print(f"{100 * c['all'] / total:5.2f} {op[:12]:12s} {loc[:80]:80s} " +
              ', '.join(f'{k} {100 * v / total:.2f}' for v, k in first))


def summary(files):
    """Each samples file's share of every stall reason (% of its samples), side by side: what a build changed."""
    cols = []
    for f in files:
        rows = list(csv.DictReader(open(f)))
        total = sum(float(r['# Samples']) for r in rows)
        cols.append((total, {k: 100 * sum(float(r.get('stall_' + k, 0) or 0) for r in rows) / total for k in REASONS}))
    print(f"{'reason':18s} " + ' '.join(f'{f[-28:]:>28s}' for f in files))
    print(f"{'samples':18s} " + ' '.join(f'{t:28.0f}' for t, _ in cols))
    for k in REASONS:
        print(f'{k:18s} ' + ' '.join(f'{c[k]:27.1f}%' for _, c in cols))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest='cmd', required=True)
    c = sub.add_parser('compact')
    c.add_argument('src')
    c.add_argument('dst')
    m = sub.add_parser('map')
    m.add_argument('samples')
    m.add_argument('sass')
    m.add_argument('--interpreter', default='src/megakernel/device/interpreter.cu')
    m.add_argument('--top', type=int, default=30)
    u = sub.add_parser('summary')
    u.add_argument('samples', nargs='+')
    a = ap.parse_args()
    if a.cmd == 'compact':
        compact(a.src, a.dst)
    elif a.cmd == 'summary':
        summary(a.samples)
    else:
        map_samples(a.samples, a.sass, a.interpreter, a.top)


if __name__ == '__main__':
    sys.exit(main())
