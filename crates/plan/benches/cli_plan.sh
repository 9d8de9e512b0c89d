#!/bin/bash
# Whole-process planning of Deinsum's ten benchmark kernels (issue 13's target rows):
# per binary, per kernel, the min wall of 3 runs of `plan ... --format json`, peak RSS, JSON
# size and its md5 (equal md5: the same plan). Usage: cli_plan.sh P BIN [BIN...]
P=$1; shift
kernels='1mm ij,jk->ik i=32768,j=32768,k=32768
2mm ij,jk,kl->il i=32768,j=32768,k=32768,l=32768
3mm ij,jk,kl,lm->im i=32768,j=32768,k=32768,l=32768,m=32768
m3_0 ijk,ja,ka->ia i=4872,j=4872,k=4872,a=120
m3_1 ijk,ia,ka->ja i=4872,j=4872,k=4872,a=120
m3_2 ijk,ia,ja->ka i=4872,j=4872,k=4872,a=120
m5_0 ijklm,ja,ka,la,ma->ia i=192,j=192,k=192,l=192,m=192,a=68
m5_2 ijklm,ia,ja,la,ma->ka i=192,j=192,k=192,l=192,m=192,a=68
m5_4 ijklm,ia,ja,ka,la->ma i=192,j=192,k=192,l=192,m=192,a=68
ttmc5 ijklm,jb,kc,ld,me->ibcde i=192,j=192,k=192,l=192,m=192,b=68,c=68,d=68,e=68'
tmp=$(mktemp -d)
for BIN in "$@"; do
  echo "== $BIN"
  while read -r n e s; do
    best=999
    for _ in 1 2 3; do
      /usr/bin/time -f "%e %M" -o "$tmp/t" "$BIN" plan "$e" --sizes "$s" --procs "$P" --format json > "$tmp/j"
      read -r t m < "$tmp/t"
      best=$(python3 -c "print(min($best, $t))")
    done
    echo "$n $best s $((m / 1024)) MB $(stat -c%s "$tmp/j") B $(md5sum < "$tmp/j" | cut -c1-8)"
  done <<< "$kernels"
done
rm -rf "$tmp"
