package rpc

import (
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
)

type counters struct {
	requests     uint64
	runs         map[string]uint64
	queuedMicros int64
}

func (s *Server) initializeResult() *protocol.InitializeResult {
	types := []string{}
	for _, t := range protocol.ValueTypes() {
		types = append(types, string(t))
	}
	res := &protocol.InitializeResult{
		ServerInfo: protocol.ServerInfo{Name: "sandboxd", Version: s.opts.Version},
		Engine:     protocol.EngineInfo{Wasmtime: s.opts.EngineVersion},
		Capabilities: protocol.ServerCaps{
			HostFunctions: protocol.HostFunctions(),
			ValueTypes:    types,
			Framing:       string(s.opts.Framing),
			WASI:          protocol.WASIFunctions(),
		},
		Limits:         protocol.LimitsInfo{Defaults: limitsMap(s.opts.Defaults), Maximums: limitsMap(s.opts.Maximums)},
		MaxConcurrency: s.opts.MaxConcurrency,
		MaxQueue:       s.opts.MaxQueue,
		MaxQueueBytes:  s.opts.MaxQueueBytes,
	}
	s.describeInstances(res)
	s.describeSnippets(res)
	if _, ok := s.instances(); ok { // an instance limit, with the run limits
		res.Limits.Defaults[varBytesField] = s.opts.DefaultVarBytes
		res.Limits.Maximums[varBytesField] = s.opts.MaxVarBytes
	}
	return res
}

func (s *Server) statsResult() *protocol.StatsResult {
	cache := s.eng.CacheStats()
	hostCalls := s.hosts.stats()
	var instances *protocol.InstancesInfo
	if ie, ok := s.instances(); ok {
		st := ie.InstanceStats()
		instances = &st
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	runs := map[string]uint64{}
	for _, k := range protocol.OutcomeKeys() {
		runs[k] = s.stats.runs[k]
	}
	if n := s.stats.runs["internal"]; n > 0 {
		runs["internal"] = n
	}
	return &protocol.StatsResult{
		Runs:              runs,
		InFlight:          s.running + s.away,
		Queued:            s.waitingLocked(),
		QueuedMicrosTotal: s.stats.queuedMicros,
		Cache:             protocol.CacheInfo(cache),
		UptimeMs:          time.Since(s.start).Milliseconds(),
		Requests:          s.stats.requests,
		Instances:         instances,
		HostCalls:         hostCalls,
	}
}

// limitsMap renders limits with their wire names.
func limitsMap(l limits.Limits) map[string]uint64 {
	out := make(map[string]uint64, len(limitFields))
	for _, f := range limitFields {
		out[f.Name] = f.Get(l)
	}
	return out
}
