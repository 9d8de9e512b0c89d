#!/bin/bash
# Whole-process planning at a million ranks (issue 37 item 2, target: each < 0.5 s): per
# binary, per case, the min wall and min user CPU of RUNS runs (default 5) of
# `plan ... --format json`, the max peak RSS, JSON size and md5 (equal md5: the same plan),
# with the load average when the case ran (the machine is shared: read the wall beside it).
# The table replaces the part of RESULTS.md beside this script between the markers
# `<!-- cli_million -->` and `<!-- /cli_million -->` (appended when absent).
# Usage: cli_million.sh BIN [BIN...]   (RUNS=n to change the runs; RESULTS=- for stdout only).
cases='mttkrp3 ijk,ja,ka->ia i=4096,j=4096,k=4096,a=64 1048576
ttmc5 ijklm,jb,kc,ld,me->ibcde i=96,j=96,k=96,l=96,m=96,b=16,c=16,d=16,e=16 531441
mm ij,jk->ik i=4096,j=4096,k=4096 1048576'
runs=${RUNS:-5}
here=$(cd "$(dirname "$0")" && pwd)
out=${RESULTS:-$here/RESULTS.md}
tmp=$(mktemp -d)
{
  echo "Command: \`bash crates/plan/benches/cli_million.sh $*\` ($(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores)."
  echo "Best of $runs runs of \`deinsum plan EINSUM --sizes ... --procs P --format json\` per case;"
  echo "load: the 1-minute load average before the case's runs."
  echo
  echo "| binary | case | P | wall min | user CPU min | max RSS | JSON | md5 | load |"
  echo "|---|---|---|---|---|---|---|---|---|"
  for BIN in "$@"; do
    while read -r n e s p; do
      best=999; cpu=999; rss=0
      load=$(cut -d' ' -f1 /proc/loadavg)
      for _ in $(seq "$runs"); do
        /usr/bin/time -f "%e %U %M" -o "$tmp/t" "$BIN" plan "$e" --sizes "$s" --procs "$p" --format json > "$tmp/j"
        read -r t u m < "$tmp/t"
        best=$(python3 -c "print(min($best, $t))"); cpu=$(python3 -c "print(min($cpu, $u))")
        rss=$((m > rss ? m : rss))
      done
      echo "| $(basename "$BIN") | $n | $p | $best s | $cpu s | $((rss / 1024)) MB | $(stat -c%s "$tmp/j") B | $(md5sum < "$tmp/j" | cut -c1-8) | $load |"
    done <<< "$cases"
  done
} | tee "$tmp/table"
if [ "$out" != - ]; then
  python3 - "$out" "$tmp/table" <<'PY'
import os, sys
path, table = sys.argv[1], open(sys.argv[2]).read()
start, end = "<!-- cli_million -->", "<!-- /cli_million -->"
text = open(path).read() if os.path.exists(path) else ""
block = f"{start}\n{table}{end}"
if start in text and end in text:
    text = text[: text.index(start)] + block + text[text.index(end) + len(end):]
else:
    text = text.rstrip("\n") + "\n\n" + block + "\n"
open(path, "w").write(text)
PY
fi
rm -rf "$tmp"
