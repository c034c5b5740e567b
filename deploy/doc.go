// Package deploy holds exgate's deployment files, not Go code: the
// Dockerfile, the compose file, the Kubernetes manifests, the Grafana
// dashboard, the Prometheus configuration and alert rules, and example
// configurations. Its tests check those files with the tools that consume
// them where they are installed (promtool) and by parsing them otherwise:
// every manifest is well formed and has the fields production needs, every
// path they name exists, every configuration they carry loads, and every
// metric the dashboard and the alert rules query is one exgate exports.
//
// docs/operations.md describes how to use them.
package deploy
