# proxy.bench.sh — sourced by tests/bench/run.sh (B, WORK, N and the helpers are set there).
#
# What the node's egress proxy adds to a sandbox's HTTPS request (issue 39), against the same
# request straight to the upstream, interleaved in one run on loopback (tests/bench/proxy-latency.c
# says what each side does): a request on a connection kept open, and a new connection with its
# TLS handshake and one request. The proxy is the node agent's own code, with one rule putting
# in one header; both clients verify the certificate they are shown.

px_dir=$WORK/proxy-bench
mkdir -p "$px_dir"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$px_dir/ca.key" \
	-out "$px_dir/ca.pem" -days 2 -subj /CN=paddock-bench-ca 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$px_dir/up.key" \
	-out "$px_dir/up.csr" -subj /CN=bench.proxy.test 2>/dev/null
printf 'subjectAltName=DNS:bench.proxy.test\n' >"$px_dir/up.ext"
openssl x509 -req -in "$px_dir/up.csr" -CA "$px_dir/ca.pem" -CAkey "$px_dir/ca.key" -CAcreateserial \
	-out "$px_dir/up.pem" -days 2 -extfile "$px_dir/up.ext" 2>/dev/null
px_k=$((N * 50))
[ "$px_k" -lt 300 ] && px_k=300
# Goal: what the proxy adds, in ms (ours minus direct): a request on an open connection under
# 1 ms, a new connection (two TLS handshakes instead of one) under 5 ms.
while read -r px_mode px_o50 px_o99 px_b50 px_b99; do
	px_goal="added <= 1 ms"
	[ "$px_mode" = connect ] && px_goal="added <= 5 ms"
	for px_p in 50 99; do
		eval "px_o=\$px_o$px_p px_b=\$px_b$px_p"
		px_add=$(awk -v a="$px_o" -v b="$px_b" 'BEGIN { printf "%.3f", a - b }')
		printf '%-44s %12s %12s %8s  %s\n' "egress proxy $px_mode p$px_p (ms) vs direct" "$px_o" "$px_b" "$(ratio "$px_o" "$px_b")" "$px_goal (+$px_add)"
	done
done < <("$B/tests/bench/proxy-latency" "$px_dir/ca.pem" "$px_dir/up.pem" "$px_dir/up.key" "$px_k")
