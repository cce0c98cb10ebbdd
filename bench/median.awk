# bench/median.awk: median(k), the median of the values v[k, 1..n[k]], for
# the summaries of bench/*.sh (which fill n and v, and prepend this file).
function median(k,   i, j, x, a) {
	for (i = 1; i <= n[k]; i++) a[i] = v[k, i]
	for (i = 2; i <= n[k]; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) {
		x = a[j]; a[j] = a[j - 1]; a[j - 1] = x }
	return a[int((n[k] + 1) / 2)]
}
