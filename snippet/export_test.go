package snippet

import "github.com/sandboxd/sandboxd/protocol"

// SpareCount is how many spares of lang are ready.
func SpareCount(r *Runner, lang protocol.Language) int {
	if p := r.runtimes[lang].sparePool(); p != nil {
		return p.count()
	}
	return 0
}
