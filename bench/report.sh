#!/usr/bin/env bash
# bench/report.sh RESULTS.CSV: the table, the targets of issue 4 as ratios
# within this one run, and bench/results.png (gnuplot).
set -euo pipefail
CSV=$1
DIR=$(dirname "$CSV")

# value FIELD SCENARIO IMPL SYNC CLIENTS (fields: 5 tps, 6 p50, 7 p99, 8 wal)
value() {
	awk -F, -v f="$1" -v s="$2" -v i="$3" -v y="$4" -v c="$5" \
		'$1 == s && $2 == i && $3 == y && $4 == c {print $f}' "$CSV"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "n/a"}'; }

echo
printf '%-8s %-16s %-5s %9s %9s %9s %8s %8s %9s\n' scenario implementation sync \
	"tps c=1" "tps c=8" "tps c=32" "p50 ms" "p99 ms" "WAL B/op"
printf '%-8s %-16s %-5s %9s %9s %9s %8s %8s %9s\n' "" "" "" "" "" "" "(c=8)" "(c=8)" "(c=8)"
for sync in on off n/a; do
	for s in select1 10k hot 1m empty all; do
		for i in ceiling tokenbucket tokenbucket_memory A_plpgsql B_plain_update C_redis_lua; do
			t8=$(value 5 $s $i $sync 8)
			[ -n "$t8" ] || continue
			printf '%-8s %-16s %-5s %9s %9s %9s %8s %8s %9s\n' $s $i $sync \
				"$(value 5 $s $i $sync 1)" "$t8" "$(value 5 $s $i $sync 32)" \
				"$(value 6 $s $i $sync 8)" "$(value 7 $s $i $sync 8)" "$(value 8 $s $i $sync 8)"
		done
	done
done

echo
echo "Targets (8 clients unless named; ratios within this run):"
for sync in off on; do
	tb=$(value 5 10k tokenbucket $sync 8)
	printf '  sync %-3s  10k: tokenbucket/B %s (>= 0.9), tokenbucket/A %s (>= 1.3)\n' $sync \
		"$(ratio "$tb" "$(value 5 10k B_plain_update $sync 8)")" "$(ratio "$tb" "$(value 5 10k A_plpgsql $sync 8)")"
	printf '  sync %-3s  denied: %s WAL bytes/call (0), denied/granted %s (>= 2)\n' $sync \
		"$(value 8 empty tokenbucket $sync 8)" "$(ratio "$(value 5 empty tokenbucket $sync 8)" "$tb")"
	printf '  sync %-3s  hot: 32 clients/8 clients %s (>= 0.6); B: %s\n' $sync \
		"$(ratio "$(value 5 hot tokenbucket $sync 32)" "$(value 5 hot tokenbucket $sync 8)")" \
		"$(ratio "$(value 5 hot B_plain_update $sync 32)" "$(value 5 hot B_plain_update $sync 8)")"
	printf '  sync %-3s  1M/10k buckets %s (>= 0.8)\n' $sync \
		"$(ratio "$(value 5 1m tokenbucket $sync 8)" "$tb")"
	printf '  sync %-3s  tokenbucket/Redis+Lua over 10k keys %s (no target)\n' $sync \
		"$(ratio "$tb" "$(value 5 10k C_redis_lua n/a 8)")"
done
echo "Memory buckets (issue 13):"
for sync in off on; do
	for c in 8 32; do
		m=$(value 5 10k tokenbucket_memory $sync $c)
		printf '  sync %-3s  c=%-2s 10k: memory/SELECT 1 %s (>= 0.85), memory/Redis+Lua %s (>= 1.2)\n' $sync $c \
			"$(ratio "$m" "$(value 5 select1 ceiling $sync $c)")" "$(ratio "$m" "$(value 5 10k C_redis_lua n/a $c)")"
	done
	printf '  sync %-3s  hot memory: 32 clients/8 clients %s (>= 0.9), memory/table at 32 clients %s (>= 10 with sync on)\n' $sync \
		"$(ratio "$(value 5 hot tokenbucket_memory $sync 32)" "$(value 5 hot tokenbucket_memory $sync 8)")" \
		"$(ratio "$(value 5 hot tokenbucket_memory $sync 32)" "$(value 5 hot tokenbucket $sync 32)")"
	printf '  sync %-3s  memory: %s WAL bytes/grant (0), 1M/10k buckets %s (>= 0.9)\n' $sync \
		"$(value 8 10k tokenbucket_memory $sync 8)" \
		"$(ratio "$(value 5 1m tokenbucket_memory $sync 8)" "$(value 5 10k tokenbucket_memory $sync 8)")"
done

# the plot: transactions per second by clients, a panel per scenario
command -v gnuplot >/dev/null || exit 0
DATA=$(mktemp -d)
trap 'rm -rf "$DATA"' EXIT
plots=()
for s in select1 10k hot 1m empty all; do
	lines=()
	for i in ceiling tokenbucket tokenbucket_memory A_plpgsql B_plain_update C_redis_lua; do
		for sync in off on n/a; do
			f="$DATA/$s.$i.${sync//\//}"
			awk -F, -v s=$s -v i=$i -v y=$sync '$1 == s && $2 == i && $3 == y {print $4, $5}' "$CSV" >"$f"
			[ -s "$f" ] || continue
			label="$i"; [ $sync != n/a ] && label="$i, sync $sync"
			dash=1; [ $sync = on ] && dash=2
			lines+=("'$f' using 1:2 with linespoints dt $dash title '$label'")
		done
	done
	plots+=("set title '$s'; plot $(IFS=,; echo "${lines[*]}")")
done
gnuplot <<GP
set terminal pngcairo size 1500,900 font ',9' noenhanced
set output '$DIR/results.png'
set multiplot layout 2,3 title 'tokenbucket: transactions per second by clients ($(date -u +%Y-%m-%d), $(nproc) cores)'
set logscale x 2
set xtics (1, 8, 32)
set xlabel 'clients'
set ylabel 'tps'
set yrange [0:*]
set key top left font ',7'
$(printf '%s\n' "${plots[@]}")
unset multiplot
GP
echo
echo "plot: $DIR/results.png"
