# bench/median.awk: median(k), the median of the values v[k, 1..n[k]], and
# ratio(a, b, tail), for the summaries of bench/*.sh (which fill n, v and
# rate, and prepend this file).
function median(k,   i, j, x, a) {
	for (i = 1; i <= n[k]; i++) a[i] = v[k, i]
	for (i = 2; i <= n[k]; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) {
		x = a[j]; a[j] = a[j - 1]; a[j - 1] = x }
	return a[int((n[k] + 1) / 2)]
}

# ratio(a, b, tail): the median over the rounds r of rate[a "," tail, r]
# over rate[b "," tail, r] (the rate of a run of round r)
function ratio(a, b, tail,   r, k) {
	k = a "/" b "," tail
	if (!(k in n))
		for (r = 1; (a "," tail, r) in rate; r++)
			if (rate[b "," tail, r] > 0) { n[k]++; v[k, n[k]] = rate[a "," tail, r] / rate[b "," tail, r] }
	return median(k)
}
