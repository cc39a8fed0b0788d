# shellcheck shell=bash
# scripts/lib/registry_tls.sh — the TLS + Docker Hub personality + forward proxy test bed
# (issue 10). Sourced by scripts/setup.sh after the registries are up; idempotent and fast
# on re-run (keys and certificates are kept, services restarted only when their inputs change).
#
#   /etc/hosts        127.0.0.1 registry.rocmenv.test hub.rocmenv.test auth.rocmenv.test
#                               cdn.rocmenv.test (one marked line)
#   $STATE/tls/       ca.crt/ca.key (the test CA), server.crt/server.key (all four names)
#   /etc/docker/certs.d/registry.rocmenv.test:5443/ca.crt   the CA, trusted the certs.d way
#                     (hub.rocmenv.test has no certs.d entry: trusted through SSL_CERT_FILE)
#   hub server        127.0.0.1:5443  tests/support/hub_server.py (TLS, Hub's habits,
#                     upstream = the open registry)
#   forward proxy     127.0.0.1:8888  tinyproxy (CONNECT to 443 and 5443), access log
#                     $STATE/logs/tinyproxy-access.log

TLS_HOSTS=(registry.rocmenv.test hub.rocmenv.test auth.rocmenv.test cdn.rocmenv.test)
HUB_LISTEN=127.0.0.1:5443
PROXY_LISTEN=127.0.0.1:8888

ensure_hosts_entries() {
  local line="127.0.0.1 ${TLS_HOSTS[*]} # rocmenv test bed"
  if ! grep -qF "$line" /etc/hosts; then
    # /etc/hosts may be a bind mount (containers): rewrite in place, never replace the file
    local rest
    rest=$(grep -v '# rocmenv test bed$' /etc/hosts || true)
    printf '%s\n%s\n' "$rest" "$line" >/etc/hosts
  fi
}

ensure_tls_certs() {
  local dir="$STATE/tls"
  mkdir -p "$dir"
  if [ ! -s "$dir/ca.crt" ] || [ ! -s "$dir/ca.key" ]; then
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=rocmenv test CA" \
      -keyout "$dir/ca.key" -out "$dir/ca.crt" >"$STATE/logs/tls.log" 2>&1 ||
      die "openssl could not create the test CA (log: $STATE/logs/tls.log)"
    rm -f "$dir/server.crt"
  fi
  if [ ! -s "$dir/server.crt" ]; then
    local san h
    san="subjectAltName=IP:127.0.0.1"
    for h in "${TLS_HOSTS[@]}"; do san="$san,DNS:$h"; done
    if ! { openssl req -newkey rsa:2048 -nodes -subj "/CN=registry.rocmenv.test" \
      -keyout "$dir/server.key" -out "$dir/server.csr" &&
      openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
        -CAcreateserial -days 3650 -extfile <(printf '%s\n' "$san") -out "$dir/server.crt"; } \
      >>"$STATE/logs/tls.log" 2>&1; then
      die "openssl could not sign the test server certificate (log: $STATE/logs/tls.log)"
    fi
  fi
  mkdir -p "/etc/docker/certs.d/registry.rocmenv.test:5443"
  cmp -s "$dir/ca.crt" "/etc/docker/certs.d/registry.rocmenv.test:5443/ca.crt" ||
    cp "$dir/ca.crt" "/etc/docker/certs.d/registry.rocmenv.test:5443/ca.crt"
}

tinyproxy_config() {
  cat <<EOF
Port ${PROXY_LISTEN##*:}
Listen ${PROXY_LISTEN%%:*}
Timeout 60
LogFile "$STATE/logs/tinyproxy-access.log"
LogLevel Connect
MaxClients 64
Allow 127.0.0.1
ConnectPort 443
ConnectPort 5443
EOF
}

ensure_registry_tls() {
  ensure_hosts_entries
  ensure_tls_certs
  local fp cfg="$STATE/tinyproxy.conf"
  fp=$(cat "$REPO/tests/support/hub_server.py" "$STATE/tls/server.crt" | sha256sum | cut -c1-16)
  CURL_CA_BUNDLE="$STATE/tls/ca.crt" start_service hub-tls \
    "https://registry.rocmenv.test:${HUB_LISTEN##*:}/v2/" "401" "$fp" \
    "$PY" "$REPO/tests/support/hub_server.py" --listen "$HUB_LISTEN" --upstream "$TE_OPEN_REGISTRY" \
    --cert "$STATE/tls/server.crt" --key "$STATE/tls/server.key"
  command -v tinyproxy >/dev/null || die "tinyproxy is not installed" "apt-get install tinyproxy"
  write_if_changed "$cfg" "$(tinyproxy_config)" || true
  fp=$(sha256sum <"$cfg" | cut -c1-16)
  # a proxy answers a request without a host with 400
  start_service tinyproxy "http://$PROXY_LISTEN/" "400" "$fp" tinyproxy -d -c "$cfg"
}
