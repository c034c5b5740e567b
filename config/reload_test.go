package config

import (
	"slices"
	"testing"
	"time"
)

// reloadModes is, for every setting, whether a reload applies it (live)
// or it waits for a restart. cmd/exgate's TestReloadReportIsTrue changes
// a setting of every section on the running gateway: a live one takes
// effect, a restart-only one is reported as ignored until restart and
// changes nothing.
var reloadModes = map[string]string{
	"admin.pprof":                                        ReloadRestart,
	"admin.token_env":                                    ReloadRestart,
	"admin.allowed_hosts":                                ReloadRestart,
	"admin.max_connections":                              ReloadRestart,
	"admin_listen":                                       ReloadRestart,
	"replica":                                            ReloadRestart,
	"client_ip.ipv6_prefix":                              ReloadLive,
	"client_ip.trusted_proxies":                          ReloadRestart,
	"client_ip.header":                                   ReloadRestart,
	"idempotency.store":                                  ReloadRestart,
	"idempotency.backend":                                ReloadRestart,
	"idempotency.duplicate_answers.burst":                ReloadRestart,
	"idempotency.duplicate_answers.rate":                 ReloadRestart,
	"idempotency.enabled":                                ReloadRestart,
	"idempotency.in_flight_timeout":                      ReloadRestart,
	"idempotency.key_prefix":                             ReloadRestart,
	"idempotency.max_per_account":                        ReloadRestart,
	"idempotency.max_bytes_per_account":                  ReloadRestart,
	"idempotency.replica_acks":                           ReloadRestart,
	"idempotency.max_response_bytes":                     ReloadRestart,
	"idempotency.memory.max_bytes":                       ReloadRestart,
	"idempotency.memory.max_entries":                     ReloadRestart,
	"idempotency.retention":                              ReloadRestart,
	"idempotency.timeout":                                ReloadRestart,
	"identity.jwt.audience":                              ReloadRestart,
	"identity.jwt.cache_size":                            ReloadRestart,
	"identity.jwt.refused_cache_size":                    ReloadRestart,
	"identity.jwt.issuer":                                ReloadRestart,
	"identity.jwt.jwks_algorithms":                       ReloadRestart,
	"identity.jwt.jwks_file":                             ReloadRestart,
	"identity.jwt.jwks_min_interval":                     ReloadRestart,
	"identity.jwt.jwks_refresh":                          ReloadRestart,
	"identity.jwt.jwks_timeout":                          ReloadRestart,
	"identity.jwt.jwks_url":                              ReloadRestart,
	"identity.jwt.keys":                                  ReloadRestart,
	"identity.jwt.leeway":                                ReloadRestart,
	"identity.jwt.tier_claim":                            ReloadRestart,
	"identity.jwt.token_type":                            ReloadRestart,
	"identity.jwt.token_type_claim":                      ReloadRestart,
	"identity.jwt.user_claim":                            ReloadRestart,
	"identity.jwt.user_claim_type":                       ReloadRestart,
	"identity.users_file":                                ReloadLive,
	"identity.verify":                                    ReloadRestart,
	"limiter.store":                                      ReloadRestart,
	"limiter.backend":                                    ReloadRestart,
	"limiter.deny_cache_keys":                            ReloadRestart,
	"limiter.headers":                                    ReloadLive,
	"limiter.key_secret_env":                             ReloadRestart,
	"limiter.max_keys":                                   ReloadRestart,
	"limiter.on_store_error":                             ReloadLive,
	"limiter.redis.addrs":                                ReloadRestart,
	"limiter.redis.db":                                   ReloadRestart,
	"limiter.redis.master_name":                          ReloadRestart,
	"limiter.redis.password_env":                         ReloadRestart,
	"limiter.redis.timeout":                              ReloadRestart,
	"limiter.redis.tls":                                  ReloadRestart,
	"limiter.redis.tls_ca_file":                          ReloadRestart,
	"limiter.redis.tls_cert_file":                        ReloadRestart,
	"limiter.redis.tls_key_file":                         ReloadRestart,
	"limiter.redis.tls_server_name":                      ReloadRestart,
	"limiter.redis.username":                             ReloadRestart,
	"limiter.replicas":                                   ReloadLive,
	"limiter.token_spray.max_tokens":                     ReloadLive,
	"limiter.token_spray.window":                         ReloadLive,
	"listen":                                             ReloadRestart,
	"log.access":                                         ReloadRestart,
	"log.level":                                          ReloadRestart,
	"log.refusals_per_client.burst":                      ReloadRestart,
	"log.refusals_per_client.rate":                       ReloadRestart,
	"log.sampling.initial":                               ReloadRestart,
	"log.sampling.thereafter":                            ReloadRestart,
	"reload_interval":                                    ReloadRestart,
	"routes":                                             ReloadLive,
	"server.drain_delay":                                 ReloadRestart,
	"server.http2.enabled":                               ReloadRestart,
	"server.http2.max_concurrent_streams":                ReloadRestart,
	"server.proxy_protocol.policy":                       ReloadRestart,
	"server.proxy_protocol.trusted_peers":                ReloadRestart,
	"server.tls.certificates":                            ReloadLive,
	"overload.enabled":                                   ReloadLive,
	"overload.min_limit":                                 ReloadLive,
	"overload.max_limit":                                 ReloadLive,
	"overload.initial_limit":                             ReloadLive,
	"overload.fixed_limit":                               ReloadLive,
	"overload.tolerance_percent":                         ReloadLive,
	"overload.tolerance_min":                             ReloadLive,
	"overload.window":                                    ReloadLive,
	"overload.probe_interval":                            ReloadLive,
	"overload.max_wait.cancel":                           ReloadLive,
	"overload.max_wait.status":                           ReloadLive,
	"overload.max_wait.place":                            ReloadLive,
	"overload.max_wait.private_read":                     ReloadLive,
	"overload.max_wait.market_data":                      ReloadLive,
	"overload.retry_after":                               ReloadLive,
	"overload.shed_delay":                                ReloadLive,
	"server.tls.reload_interval":                         ReloadRestart,
	"server.idle_timeout":                                ReloadRestart,
	"server.max_body_bytes":                              ReloadRestart,
	"server.max_buffered_bytes":                          ReloadRestart,
	"server.max_connections":                             ReloadRestart,
	"server.max_header_bytes":                            ReloadRestart,
	"server.read_header_timeout":                         ReloadRestart,
	"server.read_timeout":                                ReloadRestart,
	"server.shutdown_timeout":                            ReloadRestart,
	"server.write_timeout":                               ReloadRestart,
	"tiers":                                              ReloadLive,
	"tokens_file":                                        ReloadLive,
	"upstream.dial_timeout":                              ReloadRestart,
	"upstream.idle_conn_timeout":                         ReloadRestart,
	"upstream.check_response_id":                         ReloadRestart,
	"upstream.forward_hosts":                             ReloadRestart,
	"upstream.max_conns_per_host":                        ReloadRestart,
	"upstream.max_idle_conns":                            ReloadRestart,
	"upstream.timeout":                                   ReloadLive,
	"upstream.url":                                       ReloadRestart,
	"upstream.urls":                                      ReloadRestart,
	"upstream.health_check.path":                         ReloadRestart,
	"upstream.health_check.interval":                     ReloadRestart,
	"upstream.health_check.timeout":                      ReloadRestart,
	"upstream.health_check.healthy_threshold":            ReloadRestart,
	"upstream.health_check.unhealthy_threshold":          ReloadRestart,
	"upstream.outlier.consecutive_5xx":                   ReloadRestart,
	"upstream.outlier.consecutive_connect_failures":      ReloadRestart,
	"upstream.outlier.base_ejection_time":                ReloadRestart,
	"upstream.outlier.max_ejection_time":                 ReloadRestart,
	"upstream.outlier.max_ejection_percent":              ReloadRestart,
	"upstream.outlier.failure_percentage_threshold":      ReloadRestart,
	"upstream.outlier.failure_percentage_request_volume": ReloadRestart,
	"upstream.panic_threshold":                           ReloadRestart,
	"upstream.retry_budget.percent":                      ReloadRestart,
	"upstream.retry_budget.min_retries":                  ReloadRestart,
	"upstream.services":                                  ReloadRestart,
	"upstream.tls.ca_file":                               ReloadRestart,
	"upstream.dns.name":                                  ReloadRestart,
	"upstream.dns.port":                                  ReloadRestart,
	"upstream.dns.srv":                                   ReloadRestart,
	"upstream.dns.scheme":                                ReloadRestart,
	"upstream.dns.interval":                              ReloadRestart,
	"upstream.dns.resolver":                              ReloadRestart,
	"upstream.hide_headers":                              ReloadRestart,
	"upstream.tls.cert_file":                             ReloadRestart,
	"upstream.tls.key_file":                              ReloadRestart,
	"upstream.tls.server_name":                           ReloadRestart,
	"upstream.tls.http2":                                 ReloadRestart,
	"upstream.tls.reload_interval":                       ReloadRestart,
	"validation.before_catalogue":                        ReloadLive,
	"cors.allowed_origins":                               ReloadLive,
	"cors.allowed_methods":                               ReloadLive,
	"cors.allowed_headers":                               ReloadLive,
	"cors.exposed_headers":                               ReloadLive,
	"cors.allow_credentials":                             ReloadLive,
	"cors.max_age":                                       ReloadLive,
	"validation.bulk.max_body_bytes":                     ReloadLive,
	"validation.bulk.max_orders":                         ReloadLive,
	"validation.catalogue.max_bytes":                     ReloadRestart,
	"validation.catalogue.path":                          ReloadRestart,
	"validation.catalogue.refresh":                       ReloadRestart,
	"validation.catalogue.timeout":                       ReloadRestart,
	"validation.catalogue.token_env":                     ReloadRestart,
	"validation.identifier.max_length":                   ReloadLive,
	"validation.identifier.punctuation":                  ReloadLive,
	"validation.identifier.required":                     ReloadLive,
	"validation.markets":                                 ReloadLive,
	"validation.max_body_bytes":                          ReloadLive,
	"validation.quotes":                                  ReloadLive,
	"validation.unknown_fields":                          ReloadLive,
	"tracing.exporter":                                   ReloadRestart,
	"tracing.protocol":                                   ReloadRestart,
	"tracing.endpoint":                                   ReloadRestart,
	"tracing.sampler":                                    ReloadRestart,
	"tracing.sampler_arg":                                ReloadRestart,
	"tracing.service_name":                               ReloadRestart,
	"tracing.resource_attributes":                        ReloadRestart,
	"tracing.trust_incoming":                             ReloadRestart,
	"tracing.propagators":                                ReloadRestart,
	"tracing.max_queue_size":                             ReloadRestart,
	"tracing.max_export_batch_size":                      ReloadRestart,
	"tracing.batch_timeout":                              ReloadRestart,
	"tracing.export_timeout":                             ReloadRestart,
}

func TestReloadModes(t *testing.T) {
	got := ReloadModes()
	for path, mode := range got {
		want, ok := reloadModes[path]
		switch {
		case !ok:
			t.Errorf("%s: %s, but the table does not say; add it (and prove it in cmd/exgate's reload test)", path, mode)
		case mode != want:
			t.Errorf("%s: %s, want %s", path, mode, want)
		}
	}
	for path := range reloadModes {
		if _, ok := got[path]; !ok {
			t.Errorf("%s: in the table but not a setting", path)
		}
	}
}

func TestReloaded(t *testing.T) {
	old := Default()
	tests := []struct {
		name    string
		change  func(c *Config)
		live    []string
		restart []string
		check   func(t *testing.T, eff *Config)
	}{
		{name: "nothing changed", change: func(*Config) {}},
		{name: "live settings apply",
			change: func(c *Config) {
				c.Upstream.Timeout = 3 * time.Second
				c.Limiter.Replicas = 4
				c.Limiter.OnStoreError = StoreClosed
				c.Routes = c.Routes[:1]
			},
			live: []string{"upstream.timeout", "limiter.replicas", "limiter.on_store_error", "routes"},
			check: func(t *testing.T, eff *Config) {
				if eff.Upstream.Timeout != 3*time.Second || eff.Limiter.Replicas != 4 || eff.Limiter.OnStoreError != StoreClosed || len(eff.Routes) != 1 {
					t.Errorf("live settings not in force: %+v %+v %d", eff.Upstream, eff.Limiter, len(eff.Routes))
				}
			}},
		{name: "restart settings are kept and reported",
			change: func(c *Config) {
				c.Listen = ":1"
				c.Upstream.URL = MustURL("http://10.0.0.1:1")
				c.Upstream.Timeout = time.Second
				c.Idempotency.Timeout = time.Second
				c.Validation.Catalogue.Refresh = time.Hour
				c.Validation.Identifier.MaxLength = 8
				c.Log.Level = "debug"
			},
			live:    []string{"upstream.timeout", "validation.identifier.max_length"},
			restart: []string{"listen", "upstream.url", "validation.catalogue.refresh", "idempotency.timeout", "log.level"},
			check: func(t *testing.T, eff *Config) {
				if eff.Listen != old.Listen || eff.Upstream.URL.String() != old.Upstream.URL.String() || eff.Idempotency.Timeout != old.Idempotency.Timeout ||
					eff.Validation.Catalogue.Refresh != old.Validation.Catalogue.Refresh || eff.Log.Level != old.Log.Level {
					t.Errorf("a restart-only setting changed: %+v", eff)
				}
				if eff.Upstream.Timeout != time.Second || eff.Validation.Identifier.MaxLength != 8 {
					t.Errorf("a live setting beside them was not applied")
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nc := Default()
			tt.change(nc)
			eff, live, restart := Reloaded(old, nc)
			if !slices.Equal(live, tt.live) || !slices.Equal(restart, tt.restart) {
				t.Errorf("live = %q, restart = %q, want %q and %q", live, restart, tt.live, tt.restart)
			}
			if tt.check != nil {
				tt.check(t, eff)
			}
		})
	}
}
