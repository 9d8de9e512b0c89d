#!/bin/bash
# Whole-process planning at a million ranks (issue 37 item 2, target: each < 0.5 s): per
# binary, per case, the min wall and min user CPU of 3 runs of `plan ... --format json`, peak
# RSS, JSON size and md5 (equal md5: the same plan). Usage: cli_million.sh BIN [BIN...]
cases='mttkrp3 ijk,ja,ka->ia i=4096,j=4096,k=4096,a=64 1048576
ttmc5 ijklm,jb,kc,ld,me->ibcde i=96,j=96,k=96,l=96,m=96,b=16,c=16,d=16,e=16 531441
mm ij,jk->ik i=4096,j=4096,k=4096 1048576'
tmp=$(mktemp -d)
for BIN in "$@"; do
  echo "== $BIN"
  while read -r n e s p; do
    best=999; cpu=999; rss=0
    for _ in 1 2 3; do
      /usr/bin/time -f "%e %U %M" -o "$tmp/t" "$BIN" plan "$e" --sizes "$s" --procs "$p" --format json > "$tmp/j"
      read -r t u m < "$tmp/t"
      best=$(python3 -c "print(min($best, $t))"); cpu=$(python3 -c "print(min($cpu, $u))")
      rss=$m
    done
    echo "$n P=$p wall $best s user $cpu s $((rss / 1024)) MB $(stat -c%s "$tmp/j") B $(md5sum < "$tmp/j" | cut -c1-8)"
  done <<< "$cases"
done
rm -rf "$tmp"
