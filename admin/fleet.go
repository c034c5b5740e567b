package admin

import (
	"time"

	"github.com/exgate/exgate/upstream"
)

// serviceStatus is a service's part of /admin/status.
type serviceStatus struct {
	Service   string           `json:"service"`
	Available bool             `json:"available"`
	Panic     bool             `json:"panic"`
	Failover  bool             `json:"failover"`
	Retries   uint64           `json:"retries"`
	Refused   uint64           `json:"unavailable"`
	Instances []instanceStatus `json:"instances"`
}

// instanceStatus is an instance's part of /admin/status.
type instanceStatus struct {
	Addr         string            `json:"addr"`
	State        string            `json:"state"`
	Priority     uint16            `json:"priority"`
	Reason       string            `json:"reason,omitempty"`
	EjectedUntil *time.Time        `json:"ejected_until,omitempty"`
	Weight       uint32            `json:"weight"`
	Active       int64             `json:"active"`
	Limit        int               `json:"overload_limit"`
	Requests     map[string]uint64 `json:"requests"`
	Ejections    map[string]uint64 `json:"ejections"`
}

// fleetStatus reports every service of f for the console.
func fleetStatus(f *upstream.Fleet) []serviceStatus {
	var out []serviceStatus
	if f == nil {
		return out
	}
	for _, svc := range f.Services() {
		state, counts := svc.State(), svc.Counts()
		ss := serviceStatus{Service: svc.Name(), Available: state.Available(), Panic: state.Panic,
			Failover: state.Failover, Retries: counts.Retries, Refused: counts.Unavailable, Instances: []instanceStatus{}}
		for _, in := range svc.Status() {
			is := instanceStatus{Addr: in.Addr, State: in.State, Priority: in.Priority, Reason: in.Reason, Weight: in.Weight, Active: in.Active, Limit: in.Limit,
				Requests: in.Requests, Ejections: in.Ejections}
			if !in.EjectedUntil.IsZero() {
				is.EjectedUntil = &in.EjectedUntil
			}
			ss.Instances = append(ss.Instances, is)
		}
		out = append(out, ss)
	}
	return out
}
