package suite

// TEMPORARY: replaced by the hold and leader branches at merge.

import (
	"fmt"
	"time"
)

type External struct {
	Name string
	Down func(namespace string, on bool)
	Slow func(namespace string, latency time.Duration)
}

func (s *Suite) external(name string) (External, error) {
	return External{}, fmt.Errorf("no externals yet")
}
