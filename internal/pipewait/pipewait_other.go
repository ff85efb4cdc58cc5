//go:build !linux

package pipewait

import (
	"os"
	"time"
)

type impl struct{}

// New fails: only Linux waits in ppoll(2).
func New(f *os.File, closeFile bool) (*Reader, error) { return nil, ErrUnsupported }

func (impl) Read([]byte) (int, error)        { return 0, ErrUnsupported }
func (impl) Close() error                    { return nil }
func (impl) SetReadDeadline(time.Time) error { return ErrUnsupported }
func (impl) Restore()                        {}
