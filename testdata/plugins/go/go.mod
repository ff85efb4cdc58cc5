// The test plugins built with Extism's official Go PDK. A module of its own,
// so the main module does not depend on the PDK. Rebuild: make plugins.
module github.com/sandboxd/sandboxd/testdata/plugins/go

go 1.26.0

require github.com/extism/go-pdk v1.1.3
